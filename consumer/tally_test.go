package consumer

import (
	"fmt"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

func newCommandsVec() *prometheus.CounterVec {
	return prometheus.NewCounterVec(prometheus.CounterOpts{Name: "c"}, []string{"action", "status"})
}

// TestAnswerTallyCounts: a transaction's answers tallied by action and
// status reach the commands counter with the counts one Inc per answer
// gives, beyond the tally's room too, and the empty action as "(none)".
func TestAnswerTallyCounts(t *testing.T) {
	want, got := newCommandsVec(), newCommandsVec()
	var tally answerTally
	answer := func(action, status string) {
		want.WithLabelValues(actionLabel(action), status).Inc()
		tally.add(got, action, status)
	}
	for i := range 300 {
		answer("pay", "succeeded")
		if i%7 == 0 {
			answer("pay", "failed")
		}
		if i%11 == 0 {
			answer("", "rejected")
		}
		answer(fmt.Sprintf("a%d", i%(2*answerTallyPairs)), "succeeded")
	}
	tally.addTo(got)
	if n := len(tally.pairs); n != answerTallyPairs {
		t.Errorf("tally holds %d pairs, want its room of %d", n, answerTallyPairs)
	}
	for _, l := range [][2]string{{"pay", "succeeded"}, {"pay", "failed"}, {"(none)", "rejected"}, {"a0", "succeeded"}, {"a31", "succeeded"}} {
		w, g := testutil.ToFloat64(want.WithLabelValues(l[0], l[1])), testutil.ToFloat64(got.WithLabelValues(l[0], l[1]))
		if w != g || w == 0 {
			t.Errorf("%v: counted %v, want %v", l, g, w)
		}
	}
}

// BenchmarkAnswerCounts: counting a 500-answer transaction's answers one
// label lookup each (as before) against the tally.
func BenchmarkAnswerCounts(b *testing.B) {
	c := newCommandsVec()
	b.Run("each", func(b *testing.B) {
		for b.Loop() {
			for range 500 {
				c.WithLabelValues(actionLabel("bench.noop"), "succeeded").Inc()
			}
		}
	})
	b.Run("tally", func(b *testing.B) {
		for b.Loop() {
			var t answerTally
			for range 500 {
				t.add(c, "bench.noop", "succeeded")
			}
			t.addTo(c)
		}
	})
}

// TestMetricChildrenCached: a child is looked up in its vector once per
// label pair and is the vector's own child, so what it counts is what
// the vector exports.
func TestMetricChildrenCached(t *testing.T) {
	vec := newCommandsVec()
	var c children[prometheus.Counter]
	lookups := 0
	of := func(lv ...string) prometheus.Counter {
		lookups++
		return vec.WithLabelValues(lv...)
	}
	for range 5 {
		c.with(of, "pay", "succeeded").Inc()
	}
	c.with(of, "pay", "failed").Inc()
	if lookups != 2 {
		t.Errorf("%d lookups in the vector, want one per pair (2)", lookups)
	}
	if n := testutil.ToFloat64(vec.WithLabelValues("pay", "succeeded")); n != 5 {
		t.Errorf("vector's pay/succeeded = %v, want 5", n)
	}
}

// BenchmarkMetricChildren: a command's status count, through the vector's
// lookup each time (as before) and through children.
func BenchmarkMetricChildren(b *testing.B) {
	vec := newCommandsVec()
	b.Run("vector", func(b *testing.B) {
		for b.Loop() {
			vec.WithLabelValues("succeeded", "answer").Inc()
		}
	})
	b.Run("children", func(b *testing.B) {
		var c children[prometheus.Counter]
		for b.Loop() {
			c.with(vec.WithLabelValues, "succeeded", "answer").Inc()
		}
	})
}
