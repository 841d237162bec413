package e2e

import (
	"context"
	"encoding/json"
	"log/slog"
	"math"
	"math/rand/v2"
	"path/filepath"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/tflo-io/tflo/connectors/kafka"
	"github.com/tflo-io/tflo/connectors/parquet"
	"github.com/tflo-io/tflo/internal/devstack"
	"github.com/tflo-io/tflo/internal/worker"
	"github.com/tflo-io/tflo/pipeline"
	"github.com/tflo-io/tflo/testsuite/influxtest"
)

// specPath is a repository spec's path.
func specPath(name string) string { return filepath.Join("..", "..", "workers", "pipelines", name) }

type trade struct {
	Symbol string  `json:"symbol"`
	TS     int64   `json:"ts"` // ms
	Price  float64 `json:"price"`
	Volume float64 `json:"volume"`
}

// trades is a seeded market: n trades per symbol, a multiplicative random
// walk of the price (full float precision, so no two moving averages tie)
// and integer volumes, interleaved across the symbols in time order.
func trades(symbols []string, n int) []trade {
	rng := rand.New(rand.NewPCG(11, 12))
	price := make([]float64, len(symbols))
	for i := range price {
		price[i] = 50 + 100*rng.Float64()
	}
	start := time.Date(2026, 2, 2, 14, 30, 0, 0, time.UTC).UnixMilli()
	var out []trade
	for i := range n {
		for s, sym := range symbols {
			price[s] *= math.Exp(0.01 * rng.NormFloat64())
			out = append(out, trade{Symbol: sym, TS: start + int64(i)*1000 + int64(s), Price: price[s], Volume: float64(1 + rng.IntN(500))})
		}
	}
	return out
}

// marketReference computes what market-data.yaml must output for the
// trades, from the textbook definitions (each window summed afresh), by
// symbol, output name and time in nanoseconds: the mode as InfluxDB tags
// it (a named mode's name, "" for plain values).
func marketReference(ts []trade) map[outKey]outVal {
	type series struct {
		ts           []int64
		price, vol   []float64
		gain, loss   float64 // Wilder averages
		known, above bool    // the crossover's side
	}
	bySym := map[string]*series{}
	want := map[outKey]outVal{}
	mean := func(xs []float64) float64 {
		s := 0.0
		for _, x := range xs {
			s += x
		}
		return s / float64(len(xs))
	}
	for _, t := range ts {
		s := bySym[t.Symbol]
		if s == nil {
			s = &series{}
			bySym[t.Symbol] = s
		}
		s.ts, s.price, s.vol = append(s.ts, t.TS), append(s.price, t.Price), append(s.vol, t.Volume)
		i := len(s.price) - 1
		at := func(name string) outKey { return outKey{t.Symbol, name, t.TS * int64(time.Millisecond)} }

		// VWAP of the last 20 trades, from the first (warm-up: partial).
		pv, v := 0.0, 0.0
		for j := max(0, i-19); j <= i; j++ {
			pv += s.price[j] * s.vol[j]
			v += s.vol[j]
		}
		want[at("vwap")] = outVal{value: pv / v}

		// RSI(14), Wilder: the first averages are the means of the first
		// 14 changes, then avg = (13·avg + change)/14; from the 15th price.
		if i >= 1 {
			ch := s.price[i] - s.price[i-1]
			g, l := max(ch, 0), max(-ch, 0)
			switch {
			case i < 14:
				s.gain += g
				s.loss += l
			case i == 14:
				s.gain = (s.gain + g) / 14
				s.loss = (s.loss + l) / 14
			default:
				s.gain = (13*s.gain + g) / 14
				s.loss = (13*s.loss + l) / 14
			}
			if i >= 14 {
				rsi := 100.0
				if s.loss > 0 {
					rsi = 100 - 100/(1+s.gain/s.loss)
				}
				want[at("rsi")] = outVal{value: rsi}
			}
		}

		if i < 19 {
			continue
		}
		// Bollinger(20, 2) with the population standard deviation; the
		// mode is where the price stands.
		w := s.price[i-19 : i+1]
		m := mean(w)
		ss := 0.0
		for _, x := range w {
			ss += (x - m) * (x - m)
		}
		sd := math.Sqrt(ss / 20)
		upper, lower := m+2*sd, m-2*sd
		pos := "inside"
		if t.Price > upper {
			pos = "above"
		} else if t.Price < lower {
			pos = "below"
		}
		want[at("bb_upper")] = outVal{pos, upper}
		want[at("bb_middle")] = outVal{pos, m}
		want[at("bb_lower")] = outVal{pos, lower}

		// SMA(5) against SMA(20): the first side is only noted; a change
		// of side is a golden (up) or death (down) cross, valued at the
		// fast average.
		fast := mean(s.price[i-4 : i+1])
		above := fast > m
		switch {
		case !s.known:
			s.known, s.above = true, above
		case above != s.above:
			s.above = above
			mode := "death"
			if above {
				mode = "golden"
			}
			want[at("cross")] = outVal{mode, fast}
		}
	}
	return want
}

// readTopic reads a topic from its start to its current end, and
// decodes each record with f.
func readTopic(t *testing.T, ctx context.Context, addrs []string, topic string, f func(*kgo.Record)) int {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(addrs...), kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	require.NoError(t, err)
	defer cl.Close()
	ends, err := kadm.NewClient(cl).ListEndOffsets(ctx, topic)
	require.NoError(t, err)
	left := map[int32]int64{}
	total := 0
	ends.Each(func(o kadm.ListedOffset) {
		require.NoError(t, o.Err)
		if o.Offset > 0 {
			left[o.Partition] = o.Offset
		}
	})
	pctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	for len(left) > 0 {
		fs := cl.PollFetches(pctx)
		require.NoError(t, pctx.Err(), "reading %s: partitions left %v", topic, left)
		fs.EachRecord(func(r *kgo.Record) {
			if end, ok := left[r.Partition]; ok && r.Offset < end {
				f(r)
				total++
				if r.Offset+1 == end {
					delete(left, r.Partition)
				}
			}
		})
	}
	return total
}

// TestMarketData runs the market-data spec as the worker runs it (a
// three-partition trades topic on Kafka, InfluxDB, a local archive) over
// a seeded market, stopped and restarted once midway (a graceful restart
// restores the symbols' indicator state from the final checkpoint), and
// compares every output on the Kafka topic, in InfluxDB and in the
// archive with a reference computed independently in this test. A
// malformed trade goes to the dead-letter topic.
func TestMarketData(t *testing.T) {
	influxd := influxtest.Start(t)
	influxd.CreateDatabase(t, "market")
	k, err := devstack.StartKafka(devstack.KafkaTopic{Name: "trades", Partitions: 3},
		devstack.KafkaTopic{Name: "trades.dlq", Partitions: 1}, devstack.KafkaTopic{Name: "trades.indicators", Partitions: 3})
	require.NoError(t, err)
	defer k.Close()
	dir := t.TempDir()
	archive := filepath.Join(dir, "archive")
	t.Setenv("KAFKA_BROKERS", k.Addrs()[0])
	t.Setenv("INFLUX_URL", influxd.URL)
	t.Setenv("ARCHIVE_DIR", archive)
	t.Setenv("STATE_DIR", filepath.Join(dir, "state"))
	t.Setenv("TFLO_CHECKPOINT_INTERVAL", "300ms") // checkpoints (and archive files) mid-stream

	symbols := []string{"AAPL", "MSFT", "NVDA", "AMZN", "GOOG", "META", "TSLA", "BRK.B"}
	all := trades(symbols, 120)
	want := marketReference(all)

	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	pub, err := kafka.NewPublisher(ctx, kafka.PublishTo("trades", k.Addrs()...))
	require.NoError(t, err)
	defer pub.Close()
	publish := func(ts []trade) {
		for _, tr := range ts {
			b, err := json.Marshal(tr)
			require.NoError(t, err)
			require.NoError(t, pub.Publish(ctx, tr.Symbol, b))
		}
		require.NoError(t, pub.Flush(ctx))
	}
	// produced counts the outputs on the indicators topic.
	produced := func() int {
		cl, err := kgo.NewClient(kgo.SeedBrokers(k.Addrs()...))
		require.NoError(t, err)
		defer cl.Close()
		ends, err := kadm.NewClient(cl).ListEndOffsets(ctx, "trades.indicators")
		require.NoError(t, err)
		n := 0
		ends.Each(func(o kadm.ListedOffset) { n += int(o.Offset) })
		return n
	}
	run := func(until func() bool) {
		p, err := pipeline.Load(specPath("market-data.yaml"))
		require.NoError(t, err)
		rctx, stop := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() {
			done <- worker.RunPipeline(rctx, p, worker.PipelineConfig{WorkerID: "m1"}, slog.New(slog.NewTextHandler(t.Output(), nil)), prometheus.NewRegistry())
		}()
		// A failed Eventually ends the test here: stop the pipeline and
		// wait for it, so that it does not run (and log to t.Output) after
		// the test.
		stopped := false
		defer func() {
			if !stopped {
				stop()
				<-done
			}
		}()
		require.Eventually(t, until, 2*time.Minute, 10*time.Millisecond)
		stop()
		stopped = true
		require.NoError(t, <-done)
	}
	// wantBefore counts the reference outputs of the first trades.
	wantBefore := func(n int) int {
		c := 0
		for k := range want {
			for _, tr := range all[:n] {
				if tr.Symbol == k.sensor && tr.TS*int64(time.Millisecond) == k.ts {
					c++
					break
				}
			}
		}
		return c
	}
	half := len(all) / 2
	publish(all[:half])
	first := wantBefore(half)
	run(func() bool { return produced() >= first })
	require.NoError(t, pub.Publish(ctx, "AAPL", []byte(`{"symbol":"AAPL","ts":"noon","price":1,"volume":1}`)))
	publish(all[half:])
	run(func() bool { return produced() >= len(want) })

	// Kafka: every output once, as JSON {"key","name","ts"(ms),"value"[,"mode"]}
	// ("mode" for the outputs whose modes are named).
	gotKafka := map[outKey]outVal{}
	n := readTopic(t, ctx, k.Addrs(), "trades.indicators", func(r *kgo.Record) {
		var o struct {
			Key, Name, Mode string
			TS              int64
			Value           float64
		}
		require.NoError(t, json.Unmarshal(r.Value, &o), "%s", r.Value)
		require.Equal(t, o.Key, string(r.Key), "outputs are keyed by symbol")
		gotKafka[outKey{o.Key, o.Name, o.TS * int64(time.Millisecond)}] = outVal{o.Mode, o.Value}
	})
	require.Equal(t, len(want), n, "no output twice on Kafka")
	// A named mode 0 ("inside") is written too, as Influx tags it.
	requireSameOutputs(t, want, gotKafka, "the Kafka topic")

	// The malformed trade, dead-lettered.
	dead := 0
	readTopic(t, ctx, k.Addrs(), "trades.dlq", func(r *kgo.Record) {
		require.Contains(t, string(r.Value), "noon")
		dead++
	})
	require.Equal(t, 1, dead)

	// InfluxDB: measurement per output, tag sensor = symbol, tag mode.
	measurements := []string{"vwap", "rsi", "bb_upper", "bb_middle", "bb_lower", "cross"}
	requireSameOutputs(t, want, influxPoints(t, ctx, influxd.Influx(), "market", measurements), "InfluxDB")

	// The archive: one folder per partition of the trades topic.
	p, err := pipeline.Load(specPath("market-data.yaml"))
	require.NoError(t, err)
	env, err := p.SinkEnv(nil)
	require.NoError(t, err)
	la, err := parquet.NewLocalArchive(archive)
	require.NoError(t, err)
	archived, rows := archivedOutputs(t, ctx, la, p.Name, 3, env)
	require.Equal(t, len(want), rows, "no row twice in the archive")
	requireSameOutputs(t, want, archived, "the Parquet archive")
	perName := map[string]int{}
	for k := range want {
		perName[k.signal]++
	}
	for _, m := range measurements {
		require.Positive(t, perName[m], "the reference has %s outputs", m)
	}
	t.Logf("%d trades, %d outputs (%v) compared on Kafka, in InfluxDB and in the archive", len(all), len(want), perName)
}
