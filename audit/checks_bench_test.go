package audit

import (
	"runtime"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"
)

// BenchmarkAuditChecks is the part of an audited record's CPU that runs
// in order on one core: the checks of a bench-shaped partition's records,
// decoded beforehand (BenchmarkDecode is the rest), with the state of a
// new auditor each time as Run has for each partition. The thread's CPU
// per record: the maps' growth and lookups are most of it.
func BenchmarkAuditChecks(b *testing.B) {
	const keys = 10_000
	jo, cmds := benchTopics(b, keys)
	a := newAuditor(Input{Topics: tops, CommandPartitions: 1})
	dec := func(rs []*kgo.Record) []decoded {
		ds := make([]decoded, len(rs))
		for i, r := range rs {
			a.decode(r, &ds[i])
		}
		return ds
	}
	djo, dcmds := dec(jo), dec(cmds)
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	cpu0 := threadCPU(b)
	for b.Loop() {
		a := newAuditor(Input{Topics: tops, CommandPartitions: 1, Committed: map[int32]int64{0: int64(len(cmds))}})
		for i, r := range jo {
			if r.Topic == tops.Journal {
				a.checkJournal(r, &djo[i])
			} else {
				a.checkOutcome(r, &djo[i])
			}
		}
		a.endJournal(0)
		a.endAnswers()
		for i, r := range cmds {
			a.checkCommand(r, &dcmds[i])
		}
		a.endCommands(0)
		if rep := a.finish(); !rep.OK() || rep.Counts.Outcomes != 2*keys || rep.Counts.Commands != 2*keys {
			b.Fatalf("audit of the bench's topics: %+v", rep)
		}
	}
	b.ReportMetric(float64((threadCPU(b)-cpu0).Nanoseconds())/float64(b.N*(len(jo)+len(cmds))), "cpu-ns/record")
}
