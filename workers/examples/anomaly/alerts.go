package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"sync"

	"github.com/tflo-io/tflo/pipeline"
	"github.com/tflo-io/tflo/streaming"
)

// AlertsType is a sink of this program's own, registered with
// pipeline.RegisterSink so that anomaly.yaml names it like a built-in
// sink:
//
//	sinks:
//	  - alerts: {file: /var/log/anomaly/alerts.jsonl}
//
// It appends the outputs of one mode (anomaly, by default) to a file, a
// JSON object a line, and syncs the file at every checkpoint: every
// alert of a checkpointed record is on disk. It is at least once: a
// replay after a crash appends the alerts of the replayed records again
// (dedupe by key and ts).
var AlertsType = pipeline.SinkType{
	Name: "alerts",
	Doc:  "The outputs of one mode (anomaly) as JSON lines appended to a file, synced at each checkpoint.",
	New: func(s pipeline.Settings) (pipeline.SinkSpec, error) {
		a := AlertsSink{Mode: "anomaly"}
		if err := s.Decode(&a); err != nil {
			return nil, err
		}
		if a.File == "" {
			return nil, errors.New("file is required")
		}
		return a, nil
	},
}

// AlertsSink is the alerts sink's settings.
type AlertsSink struct {
	// File the alerts are appended to (created if missing). Required.
	File string `yaml:"file"`
	// Mode is the name of the mode written (default anomaly): an output
	// of another mode, or of an operator without it, is left out.
	Mode string `yaml:"mode"`
}

// Alert is one line of the file.
type Alert struct {
	Key   string  `json:"key"`
	Name  string  `json:"name"`
	TS    int64   `json:"ts"` // in the records' time unit (ms by default)
	Value float64 `json:"value"`
}

// OpenSink opens the file for appending.
func (a AlertsSink) OpenSink(_ context.Context, env pipeline.SinkEnv) (streaming.Sink, error) {
	// The mode's number in each output that names it.
	modes := map[string]streaming.Mode{}
	for _, out := range env.Outputs {
		for m, name := range env.ModesOf(out) {
			if name == a.Mode {
				modes[out] = m
			}
		}
	}
	if len(modes) == 0 {
		return nil, fmt.Errorf("alerts sink: no output of the graph has mode %q", a.Mode)
	}
	f, err := os.OpenFile(a.File, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		return nil, fmt.Errorf("alerts sink: %w", err)
	}
	return &alerts{f: f, modes: modes, unit: env.TimeUnit.Nanos()}, nil
}

// alerts is the open sink. Shards write concurrently: a mutex orders
// their lines.
type alerts struct {
	mu    sync.Mutex
	f     *os.File
	modes map[string]streaming.Mode
	unit  int64 // ns in the records' time unit
	buf   []byte
}

func (s *alerts) Write(_ context.Context, outs []streaming.Output) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.buf = s.buf[:0]
	for _, o := range outs {
		if m, ok := s.modes[o.Name]; !ok || o.Mode != m {
			continue
		}
		b, err := json.Marshal(Alert{Key: o.Key, Name: o.Name, TS: o.TS / s.unit, Value: o.Value})
		if err != nil {
			return fmt.Errorf("alerts sink: %w", err)
		}
		s.buf = append(append(s.buf, b...), '\n')
	}
	if len(s.buf) == 0 {
		return nil
	}
	if _, err := s.f.Write(s.buf); err != nil {
		return fmt.Errorf("alerts sink: %w", err)
	}
	return nil
}

// Flush syncs the file: what was written before is durable.
func (s *alerts) Flush(context.Context, streaming.ShardID, streaming.CheckpointID) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.f.Sync(); err != nil {
		return fmt.Errorf("alerts sink: %w", err)
	}
	return nil
}

func (s *alerts) Close(context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return errors.Join(s.f.Sync(), s.f.Close())
}
