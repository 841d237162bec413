package natskv_test

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/tflo-io/tflo/coordination"
	"github.com/tflo-io/tflo/coordination/natskv"
	"github.com/tflo-io/tflo/internal/benchratio"
)

var benchServer *server.Server

func TestMain(m *testing.M) {
	benchratio.Main(m, benchratio.Baselines{"BenchmarkStoreOps": {"js-publish": baselinePublish}})
	if benchServer != nil {
		benchServer.Shutdown()
	}
}

func sharedServer(b *testing.B) *server.Server {
	if benchServer == nil {
		dir, err := mkTemp()
		if err != nil {
			b.Fatal(err)
		}
		srv, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: dir, NoLog: true, NoSigs: true})
		if err != nil {
			b.Fatal(err)
		}
		go srv.Start()
		if !srv.ReadyForConnections(10 * time.Second) {
			b.Fatal("nats-server did not start")
		}
		benchServer = srv
	}
	return benchServer
}

// baselinePublish is one acknowledged JetStream publish to a plain
// stream on the same server: the floor under every KV write.
func baselinePublish(b *testing.B) {
	srv := sharedServer(b)
	nc, err := nats.Connect(srv.ClientURL())
	if err != nil {
		b.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	if _, err := js.CreateOrUpdateStream(ctx, jetstream.StreamConfig{Name: "BASELINE", Subjects: []string{"baseline.>"}, MaxMsgsPerSubject: 1}); err != nil {
		b.Fatal(err)
	}
	payload := []byte("value-0123456789")
	for b.Loop() {
		if _, err := js.Publish(ctx, "baseline.k", payload); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkStoreOps measures latency per operation (ns/op) and throughput
// (ops/s) of each primitive on an in-process nats-server (file storage), as
// a ratio against one acknowledged JetStream publish.
func BenchmarkStoreOps(b *testing.B) {
	srv := sharedServer(b)
	nc, err := nats.Connect(srv.ClientURL())
	if err != nil {
		b.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	ctx := context.Background()
	s, err := natskv.Open(ctx, js, fmt.Sprintf("bench%d", time.Now().UnixNano()), natskv.WithLeaseTTL(10*time.Second))
	if err != nil {
		b.Fatal(err)
	}
	val := []byte("value-0123456789")
	for _, ks := range []coordination.Keyspace{coordination.Durable, coordination.Ephemeral} {
		b.Run(ks.String()+"/update", func(b *testing.B) {
			if _, err := s.Delete(ctx, ks, "u", 0); err != nil { // left by an earlier -count round
				b.Fatal(err)
			}
			o, err := s.Create(ctx, ks, "u", val)
			if err != nil || !o.Won() {
				b.Fatalf("create: %v %v", o, err)
			}
			rev := o.Revision()
			for b.Loop() {
				o, err := s.Update(ctx, ks, "u", val, rev)
				if err != nil || !o.Won() {
					b.Fatalf("update: %v %v", o, err)
				}
				rev = o.Revision()
			}
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "ops/s")
			benchratio.Report(b, "js-publish", baselinePublish)
		})
	}
	b.Run("durable/get", func(b *testing.B) {
		_, _ = s.Create(ctx, coordination.Durable, "g", val)
		for b.Loop() {
			if _, err := s.Get(ctx, coordination.Durable, "g"); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "ops/s")
		benchratio.Report(b, "js-publish", baselinePublish)
	})
	b.Run("durable/create+delete", func(b *testing.B) {
		for b.Loop() {
			o, err := s.Create(ctx, coordination.Durable, "cd", val)
			if err != nil || !o.Won() {
				b.Fatalf("create: %v %v", o, err)
			}
			if _, err := s.Delete(ctx, coordination.Durable, "cd", o.Revision()); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(2*float64(b.N)/b.Elapsed().Seconds(), "ops/s")
		benchratio.Report(b, "js-publish", baselinePublish)
	})
	b.Run("durable/list-100", func(b *testing.B) {
		for i := range 100 {
			_, _ = s.Create(ctx, coordination.Durable, fmt.Sprintf("p.k%03d", i), val)
		}
		for b.Loop() {
			if _, err := s.List(ctx, coordination.Durable, "p."); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "ops/s")
		benchratio.Report(b, "js-publish", baselinePublish)
	})
}

func mkTemp() (string, error) { return os.MkdirTemp("", "natskv-bench-") }
