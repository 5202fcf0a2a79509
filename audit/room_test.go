package audit

import (
	"strconv"
	"testing"
)

// TestExpectMakesRoom: once told how many records a partition holds
// (expect), the maps of its keys, entities, answers and answered
// causations fill without allocating (no growth, no rehash), and so do
// they for the next partition, whose maps are the emptied ones.
func TestExpectMakesRoom(t *testing.T) {
	const n = 5000
	ds := make([]digest, n)
	for i := range ds {
		ds[i] = digestOf(strconv.Itoa(i))
	}
	fill := func(a *auditor, p int32) {
		for _, d := range ds {
			a.keys.set(d, keyState{})
			a.ents.set(d, entityState{})
			a.answers.set(d, answer{})
			a.addCause(p, d, causeAnswered)
		}
	}
	// AllocsPerRun runs f once before counting: each run has its own
	// auditor.
	var as []*auditor
	for range 2 {
		a := newAuditor(Input{Topics: tops})
		a.expect(0, n, n)
		as = append(as, a)
	}
	next := func() (a *auditor) { a, as = as[0], as[1:]; return a }
	if allocs := testing.AllocsPerRun(1, func() { fill(next(), 0) }); allocs != 0 {
		t.Errorf("a partition's state allocated %v times, want 0", allocs)
	}
	for range 2 {
		a := newAuditor(Input{Topics: tops})
		a.expect(0, n, n)
		fill(a, 0)
		as = append(as, a)
	}
	// The next partition: one allocation for the partition (judged),
	// none for its n entries of each map.
	if allocs := testing.AllocsPerRun(1, func() {
		a := next()
		a.endAnswers()
		a.endCommands(0)
		a.expect(1, n, n)
		fill(a, 1)
	}); allocs > 1 {
		t.Errorf("the next partition's state allocated %v times, want at most 1", allocs)
	}
}

// TestExpectBoundsRoom: however many records a partition holds, the maps
// are made with room for at most maxMem+1 entries, what memory holds
// before a spill: the audit's memory stays bounded (docs/memory.md#audit).
func TestExpectBoundsRoom(t *testing.T) {
	st, err := openIDStore(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := st.close(); err != nil {
			t.Error(err)
		}
	}()
	const maxMem = 100
	a := newAuditor(Input{Topics: tops})
	a.useStore(st, maxMem)
	a.expect(0, 1_000_000, 1_000_000)
	for name, room := range map[string]int{"keys": a.keys.room, "entities": a.ents.room, "answers": a.answers.room,
		"ids": a.idsRoom, "causes": a.causes[0].room} {
		if room != maxMem+1 {
			t.Errorf("%s: room for %d entries, want %d", name, room, maxMem+1)
		}
	}
}
