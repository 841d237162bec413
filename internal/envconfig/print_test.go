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
		{"url", `"http://influx:8086/a@b"`, `"http://influx:8086/a@b"`},
		{"url", `"http://u@influx:8086"`, `"http://u@influx:8086"`},
		// A comma in a password is no list's (the password was shown).
		{"coordination.nats_url", `"nats://u:p,w@a:4222"`, `"nats://u:xxxxx@a:4222"`},
		{"coordination.nats_url", `"nats://u:a,b,c@a:4222,nats://b:4222,nats://u:d,e@c:4222"`, `"nats://u:xxxxx@a:4222,nats://b:4222,nats://u:xxxxx@c:4222"`},
		{"servers", `[mqtt://u:s3,cret@a:1883, mqtt://b:1883]`, `[mqtt://u:xxxxx@a:1883, mqtt://b:1883]`},
		{"url", `"http://influx:8086/x?a=b,c@d"`, `"http://influx:8086/x?a=b,c@d"`},
	} {
		require.Equal(t, c.want, Redact(c.path, c.value), c.value)
	}
}
