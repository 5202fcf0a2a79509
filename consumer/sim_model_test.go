package consumer_test

import (
	"cmp"
	"context"
	"fmt"
	"net/http"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/onceflight/onceflight/audit"
	"github.com/onceflight/onceflight/onceflighttest"
	"github.com/onceflight/onceflight/schemas"
)

// simCheck is the simulation's reference model of G1–G5, checked from
// what the external system saw (svc) and what the executors published
// (outcomes and journal, read complete once they stopped):
//
//   - G1: no two effectful calls of one entity overlapped at the service;
//   - G2: a key took effect at most once, plus once more per operator
//     release that came after an effect of it;
//   - G4: every command was answered, and every later answer of it is the
//     same one (republished) or follows an unresolved or held answer (its
//     settlement); a settlement by an operator names a signed resolve;
//   - forged decisions (unsigned, unknown key, bad signature) were
//     refused (rejected not_allowed) and changed no record;
//   - G3 and the evidence: every evidence entry of every record is a call
//     the service answered that way, established_by agrees with the
//     evidence, a succeeded record's effect happened and a failed one's
//     attempts took no effect;
//   - G5: onceflight audit passes.
func simCheck(t *testing.T, h *onceflighttest.Harness, ks *schemas.ControlKeys, svc *simService, hist simHistory, ids []string) (bad []violation, seen map[string]int) {
	t.Helper()
	outs := h.AllOutcomes()
	journal := h.JournalAll()
	calls, effects, overlaps := svc.snapshot()
	// seen counts what the history made happen, for make sim's report.
	seen = map[string]int{}
	add := func(what string, keys ...string) { bad = append(bad, violation{what: what, keys: keys}) }

	steps := map[string]simStep{}
	for _, s := range hist.steps {
		if s.ID != "" {
			steps[s.ID] = s
		}
	}
	// G1.
	for _, o := range overlaps {
		add("G1: "+o, strings.Fields(o)[3])
	}
	// G4: answered, and consistently.
	for _, id := range ids {
		os := outs[id]
		if len(os) == 0 {
			add(fmt.Sprintf("G4: command %s (%s) has no answer", id, steps[id]), id)
			continue
		}
		// An answer is its outcome id and what it says: a rejection for
		// another reason has the same id (key, status, command) but is
		// another answer.
		same := func(a, b schemas.Outcome) bool {
			return a.ID == b.ID && a.Record.Status == b.Record.Status && code(a) == code(b)
		}
		var distinct []schemas.Outcome
		for _, o := range os {
			if !slices.ContainsFunc(distinct, func(d schemas.Outcome) bool { return same(d, o) }) {
				distinct = append(distinct, o)
			}
		}
		for i, o := range distinct[:len(distinct)-1] {
			if st := o.Record.Status; st != schemas.StatusUnresolved && st != schemas.StatusHeld {
				n := distinct[i+1]
				add(fmt.Sprintf("G4: command %s (%s) answered %s %s (replayed=%v) and then %s %s (replayed=%v): a final answer was changed",
					id, steps[id], st, code(o), o.Replayed, n.Record.Status, code(n), n.Replayed), id, steps[id].Key)
			}
		}
		if s := steps[id]; s.Op == opForge {
			for _, o := range distinct {
				if o.Record.Status != schemas.StatusRejected || code(o) != schemas.CodeNotAllowed {
					add(fmt.Sprintf("forged %s (%s) answered %s %s, want rejected not_allowed", id, s, o.Record.Status, code(o)), id, s.Key)
				}
			}
		}
		if len(distinct) > 1 {
			seen["observed settlements"]++
		}
		for _, o := range distinct[1:] {
			if res := o.Record.Resolution; o.Record.EstablishedBy == schemas.EstablishedByOperator {
				if d, ok := steps[decisionOf(res)]; !ok || d.Op != opDecide || d.Action != schemas.TypeResolve || d.Key != o.Record.IdempotencyKey || d.Entity != o.Record.Entity {
					add(fmt.Sprintf("command %s settled %s by an operator, but by no signed resolve of its key (resolution %+v)", id, o.Record.Status, res), id, o.Record.IdempotencyKey)
				}
			}
		}
	}
	// Forged decisions change no record.
	for _, rec := range journal {
		for _, r := range []*schemas.Resolution{rec.Resolution, rec.Release} {
			if s, ok := steps[decisionOf(r)]; ok && s.Op == opForge {
				add(fmt.Sprintf("forged %s (%s) changed the record of %s/%s: %+v", s.ID, s, rec.Entity, rec.IdempotencyKey, r), s.ID, rec.IdempotencyKey)
			}
		}
	}
	// G2: effects, each allowed by the execution before it or a release
	// after the last one.
	byKey := map[string][]keyEvent{}
	for k, ts := range effects {
		for _, at := range ts {
			byKey[k] = append(byKey[k], keyEvent{at: at})
		}
	}
	releases := map[string]bool{}
	for _, rec := range journal {
		if rel := rec.Release; rel != nil && !releases[rel.DecisionID] && isSimKey(rec.IdempotencyKey) {
			releases[rel.DecisionID] = true
			byKey[rec.IdempotencyKey] = append(byKey[rec.IdempotencyKey], keyEvent{at: rel.At, release: rel.DecisionID})
		}
	}
	seen["observed releases applied"] = len(releases)
	for k, evs := range byKey {
		for _, ev := range evs {
			if ev.release == "" {
				seen["observed effects"]++
			}
		}
		if what := overEffectBudget(evs); what != "" {
			add(fmt.Sprintf("G2: %s %s", k, what), k)
		}
	}
	// G3 and the evidence.
	postsOf := map[string][]svcCall{}
	getsOf := map[string][]svcCall{}
	for _, c := range calls {
		if c.method == http.MethodPost {
			postsOf[c.key] = append(postsOf[c.key], c)
		} else {
			getsOf[c.key] = append(getsOf[c.key], c)
		}
	}
	checked := map[string]bool{}
	for _, rec := range journal {
		if !isSimKey(rec.IdempotencyKey) || checked[rec.Hash] {
			continue
		}
		checked[rec.Hash] = true
		if rec.Status.Final() || rec.Status == schemas.StatusUnresolved {
			seen["observed records established by "+cmp.Or(rec.EstablishedBy, "-")]++
		}
		for _, w := range evidenceMismatches(rec, postsOf[rec.IdempotencyKey], getsOf[rec.IdempotencyKey], len(effects[rec.IdempotencyKey]) > 0) {
			add(fmt.Sprintf("evidence: record of %s/%s (%s %s, established by %q, command %s): %s",
				rec.Entity, rec.IdempotencyKey, rec.Status, errCode(rec.Error), rec.EstablishedBy, rec.Command.ID, w), rec.IdempotencyKey)
		}
	}
	// G5: the audit, with the control keys (so it checks the decisions'
	// signatures too).
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	rep, err := audit.Run(ctx, audit.Options{Brokers: h.Brokers, ControlKeys: ks, MaxViolations: 20})
	if err != nil {
		t.Fatalf("audit: %v", err)
	}
	seen["observed commands consumed again and republished"] = rep.Counts.Republications
	if !rep.OK() {
		var b strings.Builder
		_ = rep.WriteText(&b)
		var keys []string
		for _, m := range auditNames.FindAllStringSubmatch(b.String(), -1) {
			keys = append(keys, m[1])
		}
		add("G5: audit failed:\n"+b.String(), keys...)
	}
	return bad, seen
}

// keyEvent is an effect of a key at the service, or (release != "") an
// operator's release of it.
type keyEvent struct {
	at      time.Time
	release string
}

// overEffectBudget says how a key's effects and releases break G2: at
// most one effect, and one more after each release that came after an
// effect ("" when they do not).
func overEffectBudget(evs []keyEvent) string {
	evs = slices.Clone(evs)
	sort.SliceStable(evs, func(i, j int) bool { return evs[i].at.Before(evs[j].at) })
	used, budget := 0, 1
	var story []string
	for _, ev := range evs {
		if ev.release != "" {
			story = append(story, "released by "+ev.release)
			budget = used + 1
			continue
		}
		used++
		story = append(story, "effect")
		if used > budget {
			return fmt.Sprintf("took effect %d times, at most %d allowed: %s", used, budget, strings.Join(story, ", "))
		}
	}
	return ""
}

// auditNames finds the keys and commands an audit report names.
var auditNames = regexp.MustCompile(`(?:key|command) "([^"]+)"`)

func decisionOf(r *schemas.Resolution) string {
	if r == nil {
		return ""
	}
	return r.DecisionID
}

func errCode(e *schemas.Error) string {
	if e == nil {
		return ""
	}
	return e.Code
}

// isSimKey: a key of the simulation's service (not the slow command's).
func isSimKey(k string) bool { return strings.Contains(k, "-k") }

// evidenceMismatches lists where rec's evidence and established_by
// disagree with what the service did: posts and gets are the service's
// calls of the key, effect whether the key ever took effect.
func evidenceMismatches(rec schemas.Record, posts, gets []svcCall, effect bool) []string {
	var out []string
	answered := func(ev schemas.Evidence, class string) bool {
		return slices.ContainsFunc(posts, func(c svcCall) bool {
			return c.attempt == ev.Attempt && c.token == ev.FencingToken && c.class == class
		})
	}
	sent := func(ev schemas.Evidence) bool {
		return slices.ContainsFunc(posts, func(c svcCall) bool { return c.attempt == ev.Attempt && c.token == ev.FencingToken })
	}
	for _, ev := range rec.Evidence {
		switch {
		case ev.Kind == schemas.EvidenceAttempt && (ev.Answer == schemas.AnswerSucceeded || ev.Answer == schemas.AnswerRejected):
			if !answered(ev, ev.Answer) {
				out = append(out, fmt.Sprintf("attempt %d (token %d) %s, but the service answered no such POST so", ev.Attempt, ev.FencingToken, ev.Answer))
			}
		case ev.Kind == schemas.EvidenceAttempt && ev.Answer == schemas.AnswerUnavailable:
			if sent(ev) && !answered(ev, schemas.AnswerUnavailable) && !answered(ev, schemas.AnswerAmbiguous) {
				out = append(out, fmt.Sprintf("attempt %d (token %d) unavailable, but the service answered it otherwise", ev.Attempt, ev.FencingToken))
			}
		case ev.Kind == schemas.EvidenceConfirm && (ev.Answer == schemas.AnswerFound || ev.Answer == schemas.AnswerNotFound):
			if !slices.ContainsFunc(gets, func(c svcCall) bool { return c.class == ev.Answer }) {
				out = append(out, fmt.Sprintf("confirm of attempt %d by %s %s, but the service answered no GET so", ev.Attempt, ev.By, ev.Answer))
			}
		}
	}
	var last, lastAttempt, lastConfirm *schemas.Evidence
	for i := range rec.Evidence {
		ev := &rec.Evidence[i]
		last = ev
		if ev.Kind == schemas.EvidenceAttempt {
			lastAttempt = ev
		} else {
			lastConfirm = ev
		}
	}
	lastIs := func(kind string, answers ...string) bool {
		return last != nil && last.Kind == kind && slices.Contains(answers, last.Answer)
	}
	switch rec.Status {
	case schemas.StatusSucceeded:
		switch rec.EstablishedBy {
		case schemas.EstablishedByAnswer:
			if !lastIs(schemas.EvidenceAttempt, schemas.AnswerSucceeded) {
				out = append(out, fmt.Sprintf("succeeded by answer, but the last evidence is %+v", last))
			}
		case schemas.EstablishedByConfirmation, schemas.EstablishedByReconciler:
			// A confirmation found the effect; or it found none and the
			// attempt made then (by the same run) succeeded.
			switch {
			case lastConfirm == nil:
				out = append(out, fmt.Sprintf("succeeded by %s without a confirmation", rec.EstablishedBy))
			case lastConfirm.Answer != schemas.AnswerFound && !(lastAttempt != nil && lastAttempt.Answer == schemas.AnswerSucceeded && !lastAttempt.At.Before(lastConfirm.At)):
				out = append(out, fmt.Sprintf("succeeded by %s, but the confirmation answered %s and no attempt after it succeeded", rec.EstablishedBy, lastConfirm.Answer))
			}
			if rec.EstablishedBy == schemas.EstablishedByReconciler && lastConfirm != nil && lastConfirm.By != schemas.ByReconciler && lastConfirm.By != schemas.ByOperator {
				out = append(out, fmt.Sprintf("established by the reconciler, but its confirmation was asked by %q", lastConfirm.By))
			}
		case schemas.EstablishedByOperator:
		default:
			out = append(out, "succeeded, established by "+rec.EstablishedBy)
		}
		if rec.EstablishedBy != schemas.EstablishedByOperator && !effect {
			out = append(out, "succeeded, but the service never applied the key")
		}
	case schemas.StatusFailed:
		if rec.EstablishedBy == schemas.EstablishedByOperator {
			break
		}
		for _, ev := range rec.Evidence {
			if ev.Kind == schemas.EvidenceAttempt && slices.ContainsFunc(posts, func(c svcCall) bool {
				return c.attempt == ev.Attempt && c.token == ev.FencingToken && c.applied
			}) {
				out = append(out, fmt.Sprintf("failed, but its attempt %d (token %d) took effect", ev.Attempt, ev.FencingToken))
			}
		}
		if errCode(rec.Error) == schemas.CodeConnectorRejected && !lastIs(schemas.EvidenceAttempt, schemas.AnswerRejected) {
			out = append(out, fmt.Sprintf("failed connector_rejected, but the last evidence is %+v", last))
		}
	case schemas.StatusUnresolved:
		switch rec.EstablishedBy {
		case schemas.EstablishedByAnswer:
			if !lastIs(schemas.EvidenceAttempt, schemas.AnswerAmbiguous) {
				out = append(out, fmt.Sprintf("unresolved by answer, but the last evidence is %+v", last))
			}
		case schemas.EstablishedByConfirmation, schemas.EstablishedByReconciler:
			if !lastIs(schemas.EvidenceConfirm, schemas.AnswerUnknown) {
				out = append(out, fmt.Sprintf("unresolved by %s, but the last evidence is %+v", rec.EstablishedBy, last))
			}
		}
	}
	return out
}
