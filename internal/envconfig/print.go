package envconfig

import (
	"encoding"
	"fmt"
	"io"
	"net/url"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"text/tabwriter"
	"time"
)

// Setting is one value of a config, flattened: its key path and its text.
type Setting struct {
	Path, Value string
}

// Settings flattens cfg (a struct or a pointer to one) into its values by
// key path, in field order: sections by dotted keys, lists by [i], maps
// by .key. Values that look secret are redacted (Redact). Fields tagged
// yaml:"-" are left out, and so are nil sections.
func Settings(cfg any) []Setting {
	var out []Setting
	flatten(reflect.ValueOf(cfg), "", &out)
	return out
}

func flatten(v reflect.Value, path string, out *[]Setting) {
	for v.Kind() == reflect.Pointer || v.Kind() == reflect.Interface {
		if v.IsNil() {
			return
		}
		v = v.Elem()
	}
	if text, ok := scalarText(v); ok {
		*out = append(*out, Setting{Path: path, Value: Redact(path, text)})
		return
	}
	switch v.Kind() {
	case reflect.Struct:
		for sf, name := range yamlFields(v.Type()) {
			if name == "" {
				flatten(v.FieldByIndex(sf.Index), path, out)
				continue
			}
			flatten(v.FieldByIndex(sf.Index), join(path, name), out)
		}
	case reflect.Slice, reflect.Array:
		if v.Type().Elem().Kind() == reflect.String {
			items := make([]string, v.Len())
			for i := range items {
				items[i] = v.Index(i).String()
			}
			*out = append(*out, Setting{Path: path, Value: Redact(path, "["+strings.Join(items, ", ")+"]")})
			return
		}
		for i := range v.Len() {
			flatten(v.Index(i), fmt.Sprintf("%s[%d]", path, i), out)
		}
	case reflect.Map:
		keys := v.MapKeys()
		slices.SortFunc(keys, func(a, b reflect.Value) int {
			return strings.Compare(fmt.Sprint(a.Interface()), fmt.Sprint(b.Interface()))
		})
		for _, k := range keys {
			flatten(v.MapIndex(k), join(path, fmt.Sprint(k.Interface())), out)
		}
	default:
		*out = append(*out, Setting{Path: path, Value: Redact(path, fmt.Sprint(v.Interface()))})
	}
}

// scalarText is the text of a leaf value: a duration, a TextMarshaler, a
// string, a number or a bool.
func scalarText(v reflect.Value) (string, bool) {
	if v.Type() == durationType {
		return time.Duration(v.Int()).String(), true
	}
	if m, ok := v.Interface().(encoding.TextMarshaler); ok {
		b, err := m.MarshalText()
		if err != nil {
			return fmt.Sprintf("<%v>", err), true
		}
		return string(b), true
	}
	if v.CanAddr() {
		if m, ok := v.Addr().Interface().(encoding.TextMarshaler); ok {
			b, err := m.MarshalText()
			if err != nil {
				return fmt.Sprintf("<%v>", err), true
			}
			return string(b), true
		}
	}
	switch v.Kind() {
	case reflect.String:
		return fmt.Sprintf("%q", v.String()), true
	case reflect.Bool, reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Float32, reflect.Float64:
		return fmt.Sprint(v.Interface()), true
	}
	return "", false
}

// secretKey matches the last key of a path that holds a secret itself
// (not the name of a variable or file holding one: *_env, *_path, *_file).
var secretKey = regexp.MustCompile(`(?i)(password|passwd|secret|token|api_?key|credentials?)$`)

// Redact returns value, or "<redacted>" when path's last key names a
// secret and the value is not empty; a URL's password is redacted too.
func Redact(path, value string) string {
	last := path
	if i := strings.LastIndexAny(path, ".]"); i >= 0 {
		last = path[i+1:]
	}
	if secretKey.MatchString(last) && value != `""` && value != "" && value != "[]" {
		return "<redacted>"
	}
	if strings.Contains(value, "://") && strings.Contains(value, "@") {
		s := strings.Trim(value, `"`)
		if s == value && strings.HasPrefix(s, "[") && strings.HasSuffix(s, "]") {
			s = s[1 : len(s)-1] // a list: [a, b]
		}
		// A list of servers, in a list or one string ("nats://u:p@a,nats://u:p@b"):
		// every password.
		parts := strings.Split(s, ",")
		var urls []string
		for i := 0; i < len(parts); i++ {
			u := parts[i]
			if strings.Contains(u, "://") && !strings.Contains(u, "@") {
				// A comma in the password split the URL
				// (nats://u:p,w@h): join it up to its @.
				for j := i + 1; j < len(parts) && !strings.Contains(parts[j], "://"); j++ {
					if strings.Contains(parts[j], "@") {
						u, i = strings.Join(parts[i:j+1], ","), j
						break
					}
				}
			}
			urls = append(urls, redactURL(u))
		}
		return strings.Replace(value, s, strings.Join(urls, ","), 1)
	}
	return value
}

// RedactURLs returns list, a URL or a comma-separated list of them (a
// NATS server list), with every URL's password redacted, as Redact does
// a setting's value.
func RedactURLs(list string) string { return Redact("", list) }

// redactURL returns s (with the spaces around it) with a URL's password
// redacted; a URL with user information that does not parse is replaced
// whole, since it could hold one.
func redactURL(s string) string {
	t := strings.TrimSpace(s)
	if !strings.Contains(t, "://") || !strings.Contains(t, "@") {
		return s
	}
	u, err := url.Parse(t)
	if err != nil {
		return strings.Replace(s, t, "(unparsable URL)", 1)
	}
	// A password holding a '/', '?' or '#' ends the authority early, and
	// when its part before that is all digits it parses as a port
	// (nats://u:1234/x@h is host u, port 1234, path /x@h): an '@' past
	// the authority of a URL with a port is taken for the end of such a
	// password and redacted up to it (a path or query holding an '@'
	// after a port is redacted too: better than showing a password).
	scheme, rest, _ := strings.Cut(t, "://")
	auth := rest
	if i := strings.IndexAny(rest, "/?#"); i >= 0 {
		auth = rest[:i]
	}
	if at := strings.LastIndexByte(rest, '@'); at > len(auth) && u.Port() != "" {
		colon := strings.LastIndexByte(auth, ':') // the port's
		if u.User != nil {
			colon = strings.IndexByte(rest, ':') // the user's
		}
		return strings.Replace(s, t, scheme+"://"+rest[:colon+1]+"xxxxx"+rest[at:], 1)
	}
	if _, has := u.User.Password(); has {
		return strings.Replace(s, t, u.Redacted(), 1)
	}
	return s
}

// Print writes cfg's settings, one a line, each with its origin: "FILE:LINE",
// "env NAME" or "default" (Origins.Of).
func Print(w io.Writer, cfg any, origins Origins) error {
	tw := tabwriter.NewWriter(w, 2, 8, 2, ' ', 0)
	for _, s := range Settings(cfg) {
		fmt.Fprintf(tw, "%s = %s\t# %s\n", s.Path, s.Value, origins.Of(s.Path))
	}
	return tw.Flush()
}
