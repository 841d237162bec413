package devstack

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/tflo-io/tflo/internal/loopport"
)

// InfluxStartTimeout bounds how long StartInflux and Restart wait for
// /ping.
const InfluxStartTimeout = 60 * time.Second

// InfluxOptions configure StartInflux.
type InfluxOptions struct {
	// Dir holds the data, meta and WAL folders, the config and the log
	// (required; kept after Close).
	Dir string
	// Bin is the influxd binary (default: Binary("influxd", "TFLO_INFLUXD")).
	Bin string
	// User and Password, when set, enable authentication and create that
	// admin user.
	User, Password string
}

// Influx is a running (or stopped) influxd 1.8 with Flux and the /api/v2
// write endpoint enabled, on loopback ports.
type Influx struct {
	// URL is the HTTP base URL, e.g. http://127.0.0.1:41234.
	URL string

	opts InfluxOptions
	conf string
	// addrs are the HTTP and RPC addresses: influxd is ready once it
	// listens on both itself (see process.listening).
	addrs []string
	proc  process
}

// StartInflux writes a config for loopback ports under o.Dir, starts
// influxd and waits until it answers /ping (and creates the admin user
// when o.User is set). Ports it picks (see loopport) and finds taken when
// influxd starts are picked again; influxd is ready once it listens on
// its ports itself and answers /ping.
func StartInflux(ctx context.Context, o InfluxOptions) (*Influx, error) {
	if o.Dir == "" {
		return nil, fmt.Errorf("devstack: influxd needs a data folder (InfluxOptions.Dir is empty)")
	}
	if o.Bin == "" {
		bin, err := Binary("influxd", "TFLO_INFLUXD")
		if err != nil {
			return nil, err
		}
		o.Bin = bin
	}
	return loopport.Retry(func() (*Influx, error) { return startInflux(ctx, o) }, portTaken)
}

func startInflux(ctx context.Context, o InfluxOptions) (*Influx, error) {
	httpAddr, err := loopport.Pick()
	if err != nil {
		return nil, err
	}
	rpcAddr, err := loopport.Pick()
	if err != nil {
		return nil, err
	}
	s := &Influx{URL: "http://" + httpAddr, opts: o, addrs: []string{httpAddr, rpcAddr}, proc: process{name: "influxd", logPath: filepath.Join(o.Dir, "influxd.log")}}
	conf := fmt.Sprintf(`reporting-disabled = true
bind-address = %q

[meta]
  dir = %q
  logging-enabled = false

[data]
  dir = %q
  wal-dir = %q
  query-log-enabled = false
  wal-fsync-delay = "0s"

[coordinator]
  log-queries-after = "0s"

[retention]
  enabled = false

[monitor]
  store-enabled = false

[continuous_queries]
  enabled = false

[http]
  bind-address = %q
  auth-enabled = %t
  flux-enabled = true
  log-enabled = false
  pprof-enabled = false

[logging]
  level = "warn"
`, rpcAddr, filepath.Join(o.Dir, "meta"), filepath.Join(o.Dir, "data"), filepath.Join(o.Dir, "wal"), httpAddr, o.User != "")
	s.conf = filepath.Join(o.Dir, "influxdb.conf")
	if err := os.MkdirAll(o.Dir, 0o700); err != nil {
		return nil, fmt.Errorf("devstack: influxd folder: %w", err)
	}
	if err := os.WriteFile(s.conf, []byte(conf), 0o600); err != nil {
		return nil, fmt.Errorf("devstack: influxd config: %w", err)
	}
	if err := s.Restart(ctx); err != nil {
		return nil, err
	}
	if o.User != "" {
		q := fmt.Sprintf("CREATE USER %q WITH PASSWORD '%s' WITH ALL PRIVILEGES", o.User, strings.ReplaceAll(o.Password, "'", `\'`))
		if _, err := s.query(ctx, "", q, false); err != nil {
			s.Close()
			return nil, fmt.Errorf("devstack: influxd: create admin user %q: %w", o.User, err)
		}
	}
	return s, nil
}

// Restart starts a stopped server again on the same ports and data and
// waits until it listens on them and answers /ping.
func (s *Influx) Restart(ctx context.Context) error {
	if err := s.proc.start(s.opts.Bin, []string{"-config", s.conf}, []string{"INFLUXDB_DATA_QUERY_LOG_ENABLED=false"}); err != nil {
		return err
	}
	err := s.proc.waitReady(ctx, InfluxStartTimeout, 50*time.Millisecond, func() error {
		if err := ctx.Err(); err != nil {
			return err
		}
		if err := s.ping(); err != nil {
			return err
		}
		// Not just any /ping answer: another server that took a port
		// first answers while influxd exits with "address already in
		// use" (then started again on new ports).
		return s.proc.listening(s.addrs...)
	})
	if err != nil {
		s.Stop()
	}
	return err
}

func (s *Influx) ping() error {
	c := http.Client{Timeout: time.Second}
	resp, err := c.Get(s.URL + "/ping")
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNoContent {
		return fmt.Errorf("/ping: %s", resp.Status)
	}
	return nil
}

// Stop kills influxd (SIGKILL: a crash, not a clean shutdown; the WAL
// keeps what was acknowledged). Restart brings it back.
func (s *Influx) Stop() { s.proc.stop(syscall.SIGKILL, 10*time.Second) }

// Close stops influxd cleanly (SIGTERM, then SIGKILL after 10 s).
// Idempotent.
func (s *Influx) Close() error {
	s.proc.stop(syscall.SIGTERM, 10*time.Second)
	return nil
}

// LogTail returns about the last n bytes of influxd's log.
func (s *Influx) LogTail(n int64) string { return s.proc.logTail(n) }

// CreateDatabase creates db; its default retention policy is "autogen",
// so the v2 bucket name is "<db>/autogen".
func (s *Influx) CreateDatabase(ctx context.Context, db string) error {
	if _, err := s.query(ctx, "", fmt.Sprintf("CREATE DATABASE %q", db), true); err != nil {
		return fmt.Errorf("devstack: influxd %s: create database %q: %w", s.URL, db, err)
	}
	return nil
}

// InfluxResult is the decoded body of an InfluxQL /query response.
type InfluxResult struct {
	Results []struct {
		Series []struct {
			Name    string `json:"name"`
			Tags    map[string]string
			Columns []string `json:"columns"`
			Values  [][]any  `json:"values"`
		} `json:"series"`
		Error string `json:"error"`
	} `json:"results"`
	Error string `json:"error"`
}

// Query runs an InfluxQL statement against db (with the admin
// credentials when auth is on). Numbers decode as json.Number.
func (s *Influx) Query(ctx context.Context, db, q string) (InfluxResult, error) {
	r, err := s.query(ctx, db, q, true)
	return r, s.queryErr(err, db, q)
}

// QueryNS is Query with times returned as integer nanoseconds since the
// epoch instead of RFC 3339 text.
func (s *Influx) QueryNS(ctx context.Context, db, q string) (InfluxResult, error) {
	r, err := s.query(ctx, db, q, true, "epoch", "ns")
	return r, s.queryErr(err, db, q)
}

// queryErr names the server, the database and the statement in a failed
// query's error (query's own errors are the server's bare answer). Not
// for the admin user's creation: its statement holds the password.
func (s *Influx) queryErr(err error, db, q string) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("devstack: influxd %s: %q in database %q: %w", s.URL, q, db, err)
}

// SignalPoint identifies a point the way tflo writes signals: the
// sensor tag, the measurement (the signal's name) and the time.
type SignalPoint struct {
	Sensor, Measurement string
	TS                  int64 // unix nanoseconds
}

// SignalValue is a signal point's value and its mode tag ("" when none).
type SignalValue struct {
	Mode  string
	Value float64
}

// Points reads every point of the measurements of db: field "value",
// tags "sensor" and "mode".
func (s *Influx) Points(ctx context.Context, db string, measurements []string) (map[SignalPoint]SignalValue, error) {
	out := map[SignalPoint]SignalValue{}
	for _, m := range measurements {
		r, err := s.QueryNS(ctx, db, fmt.Sprintf(`SELECT "value", "sensor", "mode" FROM %q`, m))
		if err != nil {
			return nil, err
		}
		for _, res := range r.Results {
			for _, se := range res.Series {
				col := map[string]int{}
				for i, c := range se.Columns {
					col[c] = i
				}
				for _, row := range se.Values {
					tn, _ := row[col["time"]].(json.Number)
					ts, err := tn.Int64()
					if err != nil {
						return nil, fmt.Errorf("devstack: %s in %s: time %v: %w", m, db, row[col["time"]], err)
					}
					vn, _ := row[col["value"]].(json.Number)
					v, err := vn.Float64()
					if err != nil {
						return nil, fmt.Errorf("devstack: %s in %s: value %v: %w", m, db, row[col["value"]], err)
					}
					mode, _ := row[col["mode"]].(string)
					sensor, _ := row[col["sensor"]].(string)
					out[SignalPoint{sensor, m, ts}] = SignalValue{Mode: mode, Value: v}
				}
			}
		}
	}
	return out, nil
}

// Count returns the number of points of measurement in db (the count of
// field "value").
func (s *Influx) Count(ctx context.Context, db, measurement string) (int, error) {
	r, err := s.Query(ctx, db, fmt.Sprintf("SELECT count(\"value\") FROM %q", measurement))
	if err != nil {
		return 0, err
	}
	if len(r.Results) == 0 || len(r.Results[0].Series) == 0 {
		return 0, nil
	}
	v := r.Results[0].Series[0].Values[0][1]
	n, ok := v.(json.Number)
	if !ok {
		return 0, fmt.Errorf("devstack: count of %s in %s is %T %v, not a number", measurement, db, v, v)
	}
	i, err := n.Int64()
	return int(i), err
}

func (s *Influx) query(ctx context.Context, db, q string, withAuth bool, params ...string) (InfluxResult, error) {
	form := url.Values{"q": {q}}
	for i := 0; i+1 < len(params); i += 2 {
		form.Set(params[i], params[i+1])
	}
	if db != "" {
		form.Set("db", db)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.URL+"/query", strings.NewReader(form.Encode()))
	if err != nil {
		return InfluxResult{}, err
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	if withAuth && s.opts.User != "" {
		req.SetBasicAuth(s.opts.User, s.opts.Password)
	}
	c := http.Client{Timeout: 30 * time.Second}
	resp, err := c.Do(req)
	if err != nil {
		return InfluxResult{}, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return InfluxResult{}, err
	}
	var r InfluxResult
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	if err := dec.Decode(&r); err != nil {
		return InfluxResult{}, fmt.Errorf("/query %s: %s: %w", resp.Status, body, err)
	}
	if resp.StatusCode != http.StatusOK || r.Error != "" {
		return r, fmt.Errorf("/query %s: %s", resp.Status, body)
	}
	for _, res := range r.Results {
		if res.Error != "" {
			return r, fmt.Errorf("/query: %s", res.Error)
		}
	}
	return r, nil
}
