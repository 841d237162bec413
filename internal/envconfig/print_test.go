package envconfig

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// TestRedactEveryURLOfAList: a value listing servers (NATS takes
// "nats://u:p@a,nats://u:p@b") has every password redacted, not only
// the first one's, a comma in a password included; a URL that does not
// parse is not shown.
func TestRedactEveryURLOfAList(t *testing.T) {
	for _, c := range []struct{ path, value, want string }{
		{"coordination.nats_url", `"nats://u:pw1@a:4222,nats://u:pw2@b:4222"`, `"nats://u:xxxxx@a:4222,nats://u:xxxxx@b:4222"`},
		{"coordination.nats_url", `"nats://u:pw1@a:4222, nats://b:4222"`, `"nats://u:xxxxx@a:4222, nats://b:4222"`},
		{"servers", `[mqtt://u:pw1@a:1883, mqtt://u:pw2@b:1883]`, `[mqtt://u:xxxxx@a:1883, mqtt://u:xxxxx@b:1883]`},
		{"url", `"http://u:pw@[::1]:8086"`, `"http://u:xxxxx@[::1]:8086"`},
		{"url", `"http://u:p%zz@influx:8086"`, `"(unparsable URL)"`},
		// An '@' past a port: as likely a password with a '/' whose part
		// before it is all digits (taken for the port), so redacted.
		{"url", `"http://influx:8086/a@b"`, `"http://influx:xxxxx@b"`},
		{"url", `"http://u@influx:8086"`, `"http://u@influx:8086"`},
		// A comma in a password is no list's (the password was shown).
		{"coordination.nats_url", `"nats://u:p,w@a:4222"`, `"nats://u:xxxxx@a:4222"`},
		{"coordination.nats_url", `"nats://u:a,b,c@a:4222,nats://b:4222,nats://u:d,e@c:4222"`, `"nats://u:xxxxx@a:4222,nats://b:4222,nats://u:xxxxx@c:4222"`},
		{"servers", `[mqtt://u:s3,cret@a:1883, mqtt://b:1883]`, `[mqtt://u:xxxxx@a:1883, mqtt://b:1883]`},
		{"url", `"http://influx:8086/x?a=b,c@d"`, `"http://influx:xxxxx@d"`},
		{"url", `"http://influx:8086/x?a=b,c"`, `"http://influx:8086/x?a=b,c"`},
	} {
		require.Equal(t, c.want, Redact(c.path, c.value), c.value)
	}
}

// TestRedactDigitPasswordTakenForAPort: a password with a '/', '?' or
// '#' whose part before it is all digits parsed as the port of a host
// named by the user (nats://u:1234/x@h), so the URL had no password and
// was shown whole.
func TestRedactDigitPasswordTakenForAPort(t *testing.T) {
	for _, c := range []struct{ value, want string }{
		{`"nats://u:1234/x@h:4222"`, `"nats://u:xxxxx@h:4222"`},
		{`"nats://u:1234?x@h:4222"`, `"nats://u:xxxxx@h:4222"`},
		{`"nats://u:1234#x@h:4222"`, `"nats://u:xxxxx@h:4222"`},
		{`"nats://u:1234/x/y@h:4222/p"`, `"nats://u:xxxxx@h:4222/p"`},
		{`[mqtt://u:99/9@a:1883, mqtt://b:1883]`, `[mqtt://u:xxxxx@a:1883, mqtt://b:1883]`},
		{`"nats://u:p@h:4222/x@y"`, `"nats://u:xxxxx@y"`},
	} {
		require.Equal(t, c.want, Redact("coordination.nats_url", c.value), c.value)
	}
}
