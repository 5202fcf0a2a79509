package consumer

import (
	"encoding/json"
	"log/slog"
	"runtime"
	"testing"
	"weak"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/onceflight/onceflight/internal/dedupe"
	"github.com/onceflight/onceflight/internal/outbox"
	"github.com/onceflight/onceflight/partitioner"
	"github.com/onceflight/onceflight/schemas"
)

// TestRoutedAnswerDoesNotPinFetchResponse: a command the poll loop answers
// itself — deadlettered (undecodable) or forwarded (misrouted) — stays
// staged, with its record, until its transaction commits, and longer while
// the brokers refuse transactions. Its staged answer must not keep the
// fetch response the record's key, value and headers are slices of (up to
// --max-fetch-bytes, beyond what the staged bound counts), as a buffered
// command does not (TestItemDoesNotPinFetchResponse).
func TestRoutedAnswerDoesNotPinFetchResponse(t *testing.T) {
	const parts = 3
	misrouted := ""
	for i := 0; misrouted == ""; i++ {
		if e := "order-" + string(rune('a'+i)); partitioner.ForEntity(e, parts) != 0 {
			misrouted = e
		}
	}
	cmd, err := schemas.EncodeCommand(schemas.Command{ID: "c1", Source: "test", Type: "noop.ping", Subject: misrouted,
		IdempotencyKey: "k1", Data: json.RawMessage(`{}`)}, schemas.Binary)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name   string
		rec    *kgo.Record
		staged func(em emit) bool
	}{
		{"deadlettered", &kgo.Record{Key: []byte("order-1"), Value: []byte("not a cloudevent")}, func(em emit) bool { return em.deadletter != nil }},
		{"forwarded", cmd, func(em emit) bool { return em.fwdCopy != nil }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := Config{MaxMessageBytes: 1 << 20}
			cfg.setDefaults()
			e := &Executor{cfg: cfg, m: newMetrics(prometheus.NewRegistry()), log: slog.New(slog.DiscardHandler), nPart: parts,
				obTopics: outbox.Topics{Commands: "commands", Deadletter: "deadletter", Outcomes: "outcomes", Journal: "journal",
					MaxRecordBytes: cfg.MaxMessageBytes}}
			p := newPipeline(e, nil)
			st := newPartState(0, dedupe.Progress{})
			// The record as a fetch decodes it: key, value and header
			// values are slices of one response.
			resp, r := inResponse(tc.rec)
			gone := weak.Make(&resp[0])
			resp = nil
			pr := polled{r: r, st: st, pf: -1}
			r = nil
			p.dispatch(&pr, nil)
			pr = polled{}
			if q := p.cm.mu.queue; len(q) != 1 || q[0].item == nil || len(q[0].item.emits) == 0 || !tc.staged(q[0].item.emits[0]) {
				t.Fatalf("staged %+v, want the command %s", q, tc.name)
			}
			runtime.GC()
			runtime.GC()
			if gone.Value() != nil {
				t.Fatal("the fetch response is still reachable from the staged answer")
			}
			runtime.KeepAlive(p)
		})
	}
}

// inResponse copies r's key, value and header values into one buffer, the
// "fetch response", and returns it with a record whose bytes are slices
// of it.
func inResponse(r *kgo.Record) ([]byte, *kgo.Record) {
	resp := make([]byte, 0, 1<<20)
	slice := func(b []byte) []byte {
		resp = append(resp, b...)
		return resp[len(resp)-len(b) : len(resp) : len(resp)]
	}
	out := &kgo.Record{Topic: "commands", Partition: 0, Offset: 7, Key: slice(r.Key), Value: slice(r.Value)}
	for _, h := range r.Headers {
		out.Headers = append(out.Headers, kgo.RecordHeader{Key: h.Key, Value: slice(h.Value)})
	}
	return resp, out
}
