package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/tflo-io/tflo/internal/archiveloc"
	"github.com/tflo-io/tflo/internal/devstack"
	"github.com/tflo-io/tflo/internal/portal"
	"github.com/tflo-io/tflo/workers/simulator"
	"github.com/tflo-io/tflo/workflows"
)

// demoFlags are `starter demo`'s options.
type demoFlags struct {
	duration   time.Duration
	dir        string
	sensors    int
	interval   time.Duration
	partitions int32
	every      time.Duration
	checkpoint time.Duration
	logFile    string
	// localArchive keeps the archive in the work folder instead of the
	// in-process S3 server.
	localArchive bool
	// fileAge finishes the archive's files this long after they open.
	fileAge time.Duration
}

func (a *app) demoCommand() *cobra.Command {
	var f demoFlags
	cmd := &cobra.Command{
		Use:   "demo",
		Short: "Run the whole iot-portal on this machine",
		Long: `Run the whole iot-portal on this machine: an in-process MQTT broker
(mochi-mqtt) and Kafka-protocol cluster (kfake), the Temporal dev server
with its web UI (bin/temporal) and InfluxDB 1.8 (bin/influxd) — both built
by "make tools" — a sensor simulator, one edge gateway and two central
workers (each on its own Temporal task queue), Badger state and a shared
checkpoint folder under the work folder, and the Parquet archive on an
in-process S3 server (s3://tflo-archive/iot-portal, in memory: gone at
exit; --local-archive keeps it in the work folder instead).

It prints what runs where (the Temporal web UI first), then progress every
few seconds, and stops cleanly on Ctrl-C or after --duration: the simulator
first, then the edge gateway once it took every reading the simulator
published (up to 15s), then the central workers once they took every
signal (up to 15s), each with its final checkpoints; a second Ctrl-C while
it stops exits at once (130). The progress line printed after the stop is
the run's summary: readings and malformed payloads published, the
readings the edge applied and the payloads it dead-lettered (fewer than
published: payloads lost on the way), its signals, the central workers'
signals taken ("central in": each once, by its Kafka offset, also when a shard's next owner
replays it) and outputs written (replays included). A worker that
stops on its own (fails) stops the demo: it names the worker and its error,
drains the others and exits 1. The work folder is a temporary one removed at exit (kept, with
its logs, when the demo fails) unless --dir names one to keep (it must be
new or empty: the embedded Kafka starts empty on every run). If the demo cannot start, it removes what it created
there, so the same command can run again. Its output is for people: -o
json and yaml do not apply.`,
		Example:     "  starter demo\n  starter demo --duration 2m --dir ./demo-data --sensors 50",
		Annotations: map[string]string{annotationTextOnly: "true"},
		RunE:        func(cmd *cobra.Command, _ []string) error { return a.runDemo(cmd.Context(), f) },
	}
	fl := cmd.Flags()
	fl.DurationVar(&f.duration, "duration", 0, "stop after this long (0: run until Ctrl-C)")
	fl.StringVar(&f.dir, "dir", "", "work folder to keep (default: a temporary folder removed at exit, kept when the demo fails)")
	fl.IntVar(&f.sensors, "sensors", 20, "number of simulated sensors")
	fl.DurationVar(&f.interval, "interval", 100*time.Millisecond, "time between two readings of one sensor")
	fl.Int32Var(&f.partitions, "partitions", 4, "partitions of the signals topic (the central workers share them)")
	fl.DurationVar(&f.every, "progress", 3*time.Second, "how often to print progress")
	fl.DurationVar(&f.checkpoint, "checkpoint-interval", 5*time.Second, "checkpoint interval of every shard")
	fl.StringVar(&f.logFile, "log", "", "write the workers' logs to this file (default <work folder>/workers.log)")
	fl.BoolVar(&f.localArchive, "local-archive", false, "archive to <work folder>/archive instead of the in-process S3 server")
	fl.DurationVar(&f.fileAge, "archive-file-age", time.Minute, "finish each archive file this long after it opens, so a backfill finds it (the spec's max_file_age is 15m)")
	return cmd
}

// demoServers are the servers the demo runs from ./bin, with the
// variable that overrides where each is.
var demoServers = []struct{ name, env, what string }{
	{"temporal", "TFLO_TEMPORAL", "the Temporal dev server and web UI"},
	{"influxd", "TFLO_INFLUXD", "InfluxDB 1.8"},
}

// checkDemoServers says which servers are missing and how to build them.
func checkDemoServers() error {
	var missing []string
	for _, s := range demoServers {
		if _, err := devstack.Binary(s.name, s.env); err != nil {
			missing = append(missing, fmt.Sprintf("  %s (%s): %v", s.name, s.what, err))
		}
	}
	if len(missing) == 0 {
		return nil
	}
	return fmt.Errorf("demo: missing servers:\n%s\nbuild them into ./bin with `make tools` (the Temporal CLI takes ~10 minutes the first time), or run `make demo`, which builds them first", strings.Join(missing, "\n"))
}

func (a *app) runDemo(ctx context.Context, f demoFlags) error {
	running := false // the stack started: --dir holds a run's data now
	if f.duration < 0 {
		return usagef("demo: --duration %s must not be negative", f.duration)
	}
	// Named with the value given, as pipeline start names its flags.
	for _, c := range []struct {
		flag  string
		value any
		ok    bool
	}{{"--sensors", f.sensors, f.sensors >= 1}, {"--interval", f.interval, f.interval > 0}, {"--partitions", f.partitions, f.partitions >= 1},
		{"--progress", f.every, f.every > 0}, {"--checkpoint-interval", f.checkpoint, f.checkpoint > 0}, {"--archive-file-age", f.fileAge, f.fileAge > 0}} {
		if !c.ok {
			return usagef("demo: %s %v must be positive", c.flag, c.value)
		}
	}
	if err := checkDemoServers(); err != nil {
		return err
	}
	dir := f.dir
	keep := false // a failed run keeps its temporary folder: the error names its logs
	if dir == "" {
		tmp, err := os.MkdirTemp("", "tflo-demo-")
		if err != nil {
			return err
		}
		defer func() {
			if !keep {
				os.RemoveAll(tmp)
			}
		}()
		dir = tmp
	} else {
		if ents, err := os.ReadDir(dir); err == nil && len(ents) > 0 {
			return usagef("demo: work folder %s is not empty: the embedded Kafka starts empty on every run, so an earlier run's checkpoints and workflows would not match it; remove the folder or name another", dir)
		}
		undo, err := makeWorkDir(dir)
		if err != nil {
			return err
		}
		defer func() {
			if !running {
				undo() // nothing ran: leave --dir as it was, so the same command works again
			}
		}()
		if dir, err = filepath.Abs(dir); err != nil {
			return err
		}
	}
	logPath := f.logFile
	if logPath == "" {
		logPath = filepath.Join(dir, "workers.log")
	}
	logf, err := os.OpenFile(logPath, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		if f.logFile != "" {
			return usagef("demo: --log: %v", err)
		}
		return fmt.Errorf("demo: worker log: %w", err)
	}
	defer logf.Close()
	level := slog.LevelInfo
	if a.verbose {
		level = slog.LevelDebug
	}
	log := slog.New(slog.NewTextHandler(logf, &slog.HandlerOptions{Level: level}))

	fmt.Fprintf(a.errOut, "starting the iot-portal in %s (Temporal dev server and influxd take a few seconds)...\n", dir)
	started := time.Now()
	st, err := portal.StartStack(ctx, portal.StackOptions{
		BeforeSimulator:    demoBeforeSimulator,
		Dir:                dir,
		Simulator:          simulator.Config{Sensors: f.sensors, Interval: f.interval, Pace: true},
		Partitions:         f.partitions,
		CheckpointInterval: f.checkpoint,
		Metrics:            true,
		LocalArchive:       f.localArchive,
		ArchiveMaxFileAge:  f.fileAge,
		Log:                log,
	})
	if err != nil {
		if f.dir != "" && (f.logFile == "" || isUnder(f.logFile, dir)) {
			return fmt.Errorf("demo: %w (%s is emptied again, worker log included; --log FILE outside it keeps the log)", err, f.dir)
		}
		if f.dir != "" {
			return fmt.Errorf("demo: %w (worker logs: %s; %s is emptied again, the servers' logs included)", err, logPath, f.dir)
		}
		// Kept for its logs, which the error names; not after Ctrl-C:
		// nothing failed, and execute reports only "interrupted".
		keep = ctx.Err() == nil
		// The servers' logs are in the work folder, wherever --log put
		// the workers'.
		return fmt.Errorf("demo: %w (worker logs: %s; the servers' logs are under %s)", err, logPath, dir)
	}
	running = true
	printWhere(a.out, st, logPath)
	fmt.Fprintf(a.errOut, "running (started in %s); Ctrl-C stops it\n", time.Since(started).Round(100*time.Millisecond))

	var stop <-chan time.Time
	if f.duration > 0 {
		t := time.NewTimer(f.duration)
		defer t.Stop()
		stop = t.C
	}
	tick := time.NewTicker(f.every)
	defer tick.Stop()
	begin := time.Now()
	var simErr error
loop:
	for {
		select {
		case <-ctx.Done():
			fmt.Fprintln(a.errOut, "interrupted: draining the workers (final checkpoints; Ctrl-C again stops at once)...")
			break loop
		case <-stop:
			fmt.Fprintf(a.errOut, "%s passed: draining the workers (final checkpoints)...\n", f.duration)
			break loop
		case <-st.SimulatorDone():
			simErr = st.SimulatorErr()
			break loop
		case <-st.WorkerFailed():
			// Stopped on its own: the portal no longer runs whole.
			fmt.Fprintf(a.errOut, "a worker failed: %v\ndraining the others (final checkpoints)...\n", st.WorkerErr())
			break loop
		case <-tick.C:
			fmt.Fprintln(a.out, progress(time.Since(begin), st.Stats()))
		}
	}
	err = st.StopWorkers()
	fmt.Fprintln(a.out, progress(time.Since(begin), st.Stats()))
	if cerr := st.Close(); err == nil {
		err = cerr
	}
	keep = f.dir == "" && (err != nil || simErr != nil)
	fmt.Fprintf(a.out, "stopped; work folder %s%s\n", dir, map[bool]string{true: " (removed)", false: ""}[f.dir == "" && !keep])
	if simErr != nil {
		return fmt.Errorf("demo: simulator: %w (worker logs: %s)", simErr, logPath)
	}
	if err != nil {
		// Also after Ctrl-C: the drain failed, which the interrupt did
		// not cause (execute would report only "interrupted", exit 130).
		return stopError{fmt.Errorf("demo: %w (worker logs: %s)", err, logPath)}
	}
	return nil
}

// demoBeforeSimulator is the demo's StackOptions.BeforeSimulator (tests
// reach the running stack with it).
var demoBeforeSimulator func(*portal.Stack) error

// makeWorkDir makes dir (new or empty) and returns how to undo that:
// remove dir and the parents this made if it made dir, else empty it
// again.
func makeWorkDir(dir string) (undo func(), err error) {
	// The topmost folder MkdirAll makes: undo removes it, parents of dir
	// included.
	top := ""
	for d := filepath.Clean(dir); ; d = filepath.Dir(d) {
		if _, err := os.Stat(d); !os.IsNotExist(err) {
			break
		}
		top = d
		if filepath.Dir(d) == d {
			break
		}
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("demo: work folder: %w", err)
	}
	if top != "" {
		return func() { os.RemoveAll(top) }, nil
	}
	return func() {
		ents, _ := os.ReadDir(dir)
		for _, e := range ents {
			os.RemoveAll(filepath.Join(dir, e.Name()))
		}
	}, nil
}

// isUnder reports whether path lies in dir.
func isUnder(path, dir string) bool {
	p, err1 := filepath.Abs(path)
	d, err2 := filepath.Abs(dir)
	if err1 != nil || err2 != nil {
		return false
	}
	rel, err := filepath.Rel(d, p)
	return err == nil && rel != ".." && !strings.HasPrefix(rel, ".."+string(filepath.Separator))
}

// printWhere prints what runs where, the Temporal web UI first.
func printWhere(w io.Writer, st *portal.Stack, logPath string) {
	tw := tabwriter.NewWriter(w, 2, 8, 2, ' ', 0)
	p := func(what, where, note string) { fmt.Fprintf(tw, "%s\t%s\t%s\n", what, where, note) }
	p("Temporal web UI", st.Temporal.UIURL, fmt.Sprintf("namespace default; search %s = %q", workflows.SearchPipeline.GetName(), portal.PipelineName))
	p("Temporal frontend", st.Temporal.HostPort, "starter --address "+st.Temporal.HostPort+" pipeline status --pipeline "+portal.PipelineName)
	p("InfluxDB", st.Influx.URL, fmt.Sprintf("database %s: curl -G %s/query --data-urlencode 'db=%s' --data-urlencode 'q=SELECT * FROM mean LIMIT 5'", portal.Database, st.Influx.URL, portal.Database))
	if st.S3 != nil {
		p("Parquet archive", st.Archive, fmt.Sprintf("on the in-process S3 server %s (any keys): starter backfill start --archive %s replays it (sink influx:<db>/autogen); "+
			"starter archive ls|verify|compact reach it with %s=%s AWS_ACCESS_KEY_ID=demo AWS_SECRET_ACCESS_KEY=demo AWS_REGION=us-east-1",
			st.S3.URL, st.Archive, archiveloc.EnvEndpoint, st.S3.URL))
	} else {
		p("Parquet archive", st.Archive, "starter backfill start --archive "+st.Archive+" replays it (sink influx:<db>/autogen)")
	}
	names := make([]string, 0, len(st.Metrics))
	for n := range st.Metrics {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		p("metrics "+n, st.Metrics[n], "")
	}
	p("MQTT broker", st.MQTT.URL(), "readings on sensors/<sensor>, dead letters on "+portal.SensorsDLQTopic)
	p("Kafka (kfake)", strings.Join(st.Kafka.Addrs(), ","), fmt.Sprintf("topic %s, %d partitions; dead letters %s", portal.SignalsTopic, st.Opts.Partitions, portal.SignalsDLQTopic))
	var badger []string
	for _, w := range st.Centrals {
		badger = append(badger, w.Pipeline().State.Dir)
	}
	p("Badger", st.Edge.Pipeline().State.Dir, strings.Join(badger, ", "))
	p("pipeline specs", "workers/pipelines/"+portal.EdgeSpec, "workers/pipelines/"+portal.CentralSpec)
	p("checkpoints", st.CheckpointDir, "shared durable store of the central workers")
	p("worker logs", logPath, "")
	tw.Flush()
}

// progress is one line of live progress: what the simulator published
// beside what the edge applied and dead-lettered, so the summary shows
// payloads lost on the way.
func progress(elapsed time.Duration, s portal.StackStats) string {
	return fmt.Sprintf("[%6s] readings %d (malformed %d) → edge applied %d, dlq %d, signals %d → central in %d, out %d, dlq %d | checkpoints edge %d central %d | lag %d signals, event lag %s | partitions %v",
		elapsed.Round(time.Second), s.Simulator.Readings, s.Simulator.Malformed, s.EdgeReadings, s.EdgeDLQ, s.EdgeSignals,
		s.CentralIn, s.CentralOut, s.CentralDLQ, s.EdgeCheckpoints, s.CentralCheckpoints, s.Lag, s.EventLag.Round(time.Millisecond), s.Owned)
}
