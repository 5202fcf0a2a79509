package audit

import (
	"runtime"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// BenchmarkDecode is decode, the part of an audited record's CPU that
// runs on every core, per kind of record of the bench's topics.
func BenchmarkDecode(b *testing.B) {
	jo, cmds := benchTopics(b, 200)
	a := newAuditor(Input{Topics: tops, CommandPartitions: 1, MaxDataBytes: 1 << 20})
	// withMemo decodes with the journal's records in its recordMemo, as
	// Run does: an outcome of the first one takes it from there.
	withMemo := newAuditor(Input{Topics: tops, CommandPartitions: 1, MaxDataBytes: 1 << 20})
	withMemo.useMemo()
	withMemo.decodeAll(jo, make([]decoded, len(jo)))
	pick := func(topic string, rs []*kgo.Record) *kgo.Record {
		for _, r := range rs {
			if r.Topic == topic {
				return r
			}
		}
		b.Fatalf("no record of %s", topic)
		return nil
	}
	for _, c := range []struct {
		name string
		r    *kgo.Record
		a    *auditor
	}{
		{"journal", pick(tops.Journal, jo), a},
		{"outcome", pick(tops.Outcomes, jo), a},
		{"outcome-memo", pick(tops.Outcomes, jo), withMemo},
		{"command", pick(tops.Commands, cmds), a},
	} {
		b.Run(c.name, func(b *testing.B) {
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			var d decoded
			cpu0 := threadCPU(b)
			for b.Loop() {
				d = decoded{}
				c.a.decode(c.r, &d)
			}
			// The thread's CPU, not wall time: on a shared machine the
			// wall time is mostly the neighbours'.
			b.ReportMetric(float64((threadCPU(b)-cpu0).Nanoseconds())/float64(b.N), "cpu-ns/op")
			if d.err != nil {
				b.Fatal(d.err)
			}
			if d.fromMemo != (c.a == withMemo) {
				b.Fatalf("decoded with the memo: %v", d.fromMemo)
			}
		})
	}
}

// threadCPU is the calling thread's user and system CPU time so far.
func threadCPU(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_THREAD, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
