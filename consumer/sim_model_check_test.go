package consumer_test

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/onceflight/onceflight/schemas"
)

// TestSimModelG2: the simulation's G2 rule, on effect and release
// histories it must accept and refuse (a model that accepts everything
// would let every seed pass).
func TestSimModelG2(t *testing.T) {
	t0 := time.Date(2026, 12, 2, 4, 0, 0, 0, time.UTC)
	at := func(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }
	for _, tc := range []struct {
		name string
		evs  []keyEvent
		ok   bool
	}{
		{"one effect", []keyEvent{{at: at(1)}}, true},
		{"two effects", []keyEvent{{at: at(1)}, {at: at(2)}}, false},
		{"released after the effect", []keyEvent{{at: at(1)}, {at: at(2), release: "d1"}, {at: at(3)}}, true},
		{"released before any effect", []keyEvent{{at: at(1), release: "d1"}, {at: at(2)}, {at: at(3)}}, false},
		{"one release, three effects", []keyEvent{{at: at(1)}, {at: at(2), release: "d1"}, {at: at(3)}, {at: at(4)}}, false},
		{"two releases, given out of order", []keyEvent{{at: at(5)}, {at: at(4), release: "d2"}, {at: at(3)}, {at: at(2), release: "d1"}, {at: at(1)}}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if what := overEffectBudget(tc.evs); (what == "") != tc.ok {
				t.Errorf("overEffectBudget = %q, want ok=%v", what, tc.ok)
			}
		})
	}
}

// TestSimModelEvidence: the simulation's evidence rule against what the
// service did: a record whose evidence or status the service's calls do
// not bear out is refused.
func TestSimModelEvidence(t *testing.T) {
	post := func(attempt int, class string, applied bool) svcCall {
		return svcCall{method: http.MethodPost, key: "e-k1", attempt: attempt, token: 7, class: class, applied: applied}
	}
	get := func(class string) svcCall { return svcCall{method: http.MethodGet, key: "e-k1", class: class} }
	attempt := func(n int, answer string) schemas.Evidence {
		return schemas.Evidence{Kind: schemas.EvidenceAttempt, Attempt: n, FencingToken: 7, Answer: answer}
	}
	confirm := func(answer string) schemas.Evidence {
		return schemas.Evidence{Kind: schemas.EvidenceConfirm, Attempt: 1, FencingToken: 7, Answer: answer, By: schemas.ByExecutor, At: time.Now()}
	}
	rec := func(st schemas.Status, by string, code string, ev ...schemas.Evidence) schemas.Record {
		r := schemas.Record{IdempotencyKey: "e-k1", Status: st, EstablishedBy: by, Evidence: ev}
		if code != "" {
			r.Error = &schemas.Error{Code: code}
		}
		return r
	}
	for _, tc := range []struct {
		name   string
		rec    schemas.Record
		posts  []svcCall
		gets   []svcCall
		effect bool
		want   string // a part of the mismatch; "" for none
	}{
		{"succeeded by answer", rec(schemas.StatusSucceeded, schemas.EstablishedByAnswer, "", attempt(1, "succeeded")),
			[]svcCall{post(1, "succeeded", true)}, nil, true, ""},
		{"succeeded, the service said 4xx", rec(schemas.StatusSucceeded, schemas.EstablishedByAnswer, "", attempt(1, "succeeded")),
			[]svcCall{post(1, "rejected", false)}, nil, false, "no such POST"},
		{"succeeded by confirmation", rec(schemas.StatusSucceeded, schemas.EstablishedByConfirmation, "", attempt(1, "ambiguous"), confirm("found")),
			[]svcCall{post(1, "ambiguous", true)}, []svcCall{get("found")}, true, ""},
		{"found, the service never said so", rec(schemas.StatusSucceeded, schemas.EstablishedByConfirmation, "", attempt(1, "ambiguous"), confirm("found")),
			[]svcCall{post(1, "ambiguous", true)}, []svcCall{get("unknown")}, true, "no GET"},
		{"succeeded without an effect", rec(schemas.StatusSucceeded, schemas.EstablishedByConfirmation, "", attempt(1, "ambiguous"), confirm("found")),
			[]svcCall{post(1, "ambiguous", false)}, []svcCall{get("found")}, false, "never applied"},
		{"failed though its attempt took effect", rec(schemas.StatusFailed, schemas.EstablishedByAnswer, schemas.CodeConnectorRejected, attempt(1, "ambiguous"), attempt(2, "rejected")),
			[]svcCall{post(1, "ambiguous", true), post(2, "rejected", false)}, nil, true, "took effect"},
		{"failed by a 4xx", rec(schemas.StatusFailed, schemas.EstablishedByAnswer, schemas.CodeConnectorRejected, attempt(1, "rejected")),
			[]svcCall{post(1, "rejected", false)}, nil, false, ""},
		{"unresolved without confirm_url", rec(schemas.StatusUnresolved, schemas.EstablishedByAnswer, "ambiguous_no_confirm", attempt(1, "ambiguous")),
			[]svcCall{post(1, "ambiguous", true)}, nil, true, ""},
		{"unresolved by answer after a success", rec(schemas.StatusUnresolved, schemas.EstablishedByAnswer, "ambiguous_no_confirm", attempt(1, "succeeded")),
			[]svcCall{post(1, "succeeded", true)}, nil, true, "last evidence"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := strings.Join(evidenceMismatches(tc.rec, tc.posts, tc.gets, tc.effect), "; ")
			if (got == "") != (tc.want == "") || !strings.Contains(got, tc.want) {
				t.Errorf("mismatches %q, want %q", got, tc.want)
			}
		})
	}
}
