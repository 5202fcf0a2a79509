package audit

import (
	"reflect"
	"testing"

	"github.com/onceflight/onceflight/schemas"
)

// TestStateCodec: every field of the state a spill writes out comes back
// as it was (zero values and negatives included), and a truncated or
// overlong entry is refused rather than read as other state.
func TestStateCodec(t *testing.T) {
	keys := []keyState{{}, {
		final: finalRef{status: schemas.StatusSucceeded, off: 7, finishedSec: 1767323045, freeAfter: -1, releaseAt: 12,
			finishedNsec: 999_999_999, hasFinished: true, hasFree: true},
		attempts: 3, attemptsOff: 5, hasFinal: true, unresolved: true,
		pubs: []pubRec{{hash: digest{1, 2, 3}, off: 7, status: statusCode(schemas.StatusSucceeded)}, {off: 1 << 40}},
	}}
	ents := []entityState{{tokOff: -1}, {
		inflight: []inflightKey{{"a", 1, 0, 0}, {"ключ", 1 << 40, 1767323045_999_999_999, 3}}, tok: 1<<32 | 9, tokKey: "a", tokOff: 2,
	}, {tokOff: -1, inherited: &inflightKey{"k", 4, -5, 1 << 33}}}
	answers := []answer{{}, {status: schemas.StatusFailed, code: "timeout", at: src{p: 11, off: 1 << 35}}}
	roundTrip(t, keys, encKey, decKey)
	roundTrip(t, ents, encEnt, decEnt)
	roundTrip(t, answers, encAnswer, decAnswer)
	roundTrip(t, []uint8{0, causeAnswered | causeSucceeded}, encCause, decCause)
}

func roundTrip[V any](t *testing.T, vs []V, enc func([]byte, V) []byte, dec func([]byte) (V, error)) {
	t.Helper()
	for _, v := range vs {
		b := enc(nil, v)
		got, err := dec(b)
		if err != nil || !reflect.DeepEqual(got, v) {
			t.Fatalf("%+v came back as %+v (%v)", v, got, err)
		}
		if _, err := dec(b[:len(b)-1]); err == nil {
			t.Fatalf("%+v: a truncated entry was accepted", v)
		}
		if _, err := dec(append(b, 0)); err == nil {
			t.Fatalf("%+v: an entry with a byte more was accepted", v)
		}
	}
}
