package audit

import (
	"cmp"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/onceflight/onceflight/consumer"
	"github.com/onceflight/onceflight/internal/topics"
	"github.com/onceflight/onceflight/outbox"
	"github.com/onceflight/onceflight/partitioner"
	"github.com/onceflight/onceflight/schemas"
)

// Input is everything the pure core needs: the records as read, and the
// few facts about the cluster that the records do not carry themselves.
// Tests build it by hand; Run builds it from Kafka.
type Input struct {
	Topics topics.Topics
	// CommandPartitions is the commands topic's partition count: the
	// canonical entity -> partition mapping depends on it (SPEC §4).
	CommandPartitions int
	// Partitions restricts the command and journal checks to these
	// partitions; empty means all. Outcomes and deadletters are matched
	// by causation and source wherever they are.
	Partitions []int32
	// Commands holds the records of the commands topic. It may include
	// partitions outside Partitions: a misrouted command's forwarded copy
	// lives on its entity's partition, which need not be checked.
	Commands, Journal, Outcomes, Deadletter []*kgo.Record
	// JournalStart is each journal partition's log start offset. Above 0,
	// retention deleted the start of the chain, so the first record read
	// cannot be linked to its predecessor.
	JournalStart map[int32]int64
	// Committed is the executors' group's committed offset per commands
	// partition (absent: none). Commands at or above it may legitimately
	// be unanswered still; they count as pending.
	Committed map[int32]int64
	// MaxDataBytes is the executor's --max-data-bytes: what it could not
	// decode, the audit must not expect an outcome for. 0: the default.
	MaxDataBytes int
	// KeyMemory is the executor's key_memory: a key executed again this
	// long after its final record was forgotten, by design (SPEC §3), so
	// it is noted rather than counted against G2. 0: 90 days.
	KeyMemory time.Duration
	// MaxViolations bounds the violations listed per check (all are
	// counted). 0 lists none.
	MaxViolations int
}

// jrec is one decoded journal record with its place in the journal.
type jrec struct {
	off int64
	rec schemas.Record
}

// src names a record by where it was consumed: how deadletters and
// forwarded copies point back at their command.
type src struct {
	p   int32
	off int64
}

// pk scopes a key or entity to its journal partition: dedupe is per
// partition (DESIGN "Known limits"), so the same key on two partitions is
// two histories, and their offsets are not comparable anyway.
type pk struct {
	p  int32
	id string
}

type auditor struct {
	in      Input
	checked map[int32]bool // nil: every partition
	results map[string]*CheckResult
	counts  Counts
	notes   []string
	// journal holds each checked partition's decoded records in offset
	// order; undecodable ones are reported by the chain check and left out.
	journal map[int32][]jrec
}

// Check runs every check over in and returns the report. It never fails:
// what cannot be decoded is itself a violation.
func Check(in Input) Report {
	if in.KeyMemory <= 0 {
		in.KeyMemory = 90 * 24 * time.Hour
	}
	a := &auditor{in: in, results: map[string]*CheckResult{}, journal: map[int32][]jrec{}}
	if len(in.Partitions) > 0 {
		a.checked = map[int32]bool{}
		for _, p := range in.Partitions {
			a.checked[p] = true
		}
		ps := slices.Sorted(func(yield func(int32) bool) {
			for p := range a.checked {
				if !yield(p) {
					return
				}
			}
		})
		a.notef("only command and journal partitions %v were checked", ps)
	}
	order := []string{CheckHashChain, CheckAnswered, CheckOutcomeIDs, CheckOncePerKey, CheckSingleFlight}
	for _, name := range order {
		a.results[name] = &CheckResult{Name: name, Guarantee: guarantees[name], OK: true}
	}
	a.hashChains()
	a.histories()
	causes := a.outcomeIDs()
	a.answered(causes)

	rep := Report{Counts: a.counts, Notes: a.notes}
	for _, name := range order {
		rep.Checks = append(rep.Checks, *a.results[name])
	}
	return rep
}

func (a *auditor) isChecked(p int32) bool { return a.checked == nil || a.checked[p] }

func (a *auditor) notef(format string, args ...any) {
	a.notes = append(a.notes, fmt.Sprintf(format, args...))
}

func (a *auditor) violate(check string, v Violation) {
	r := a.results[check]
	r.OK = false
	r.Count++
	if len(r.Violations) < a.in.MaxViolations {
		r.Violations = append(r.Violations, v)
	}
}

// sorted returns rs ordered by partition and offset, the order the checks
// reason in, whatever order the fetches delivered them in.
func sorted(rs []*kgo.Record) []*kgo.Record {
	out := slices.Clone(rs)
	slices.SortStableFunc(out, func(x, y *kgo.Record) int {
		return cmp.Or(cmp.Compare(x.Partition, y.Partition), cmp.Compare(x.Offset, y.Offset))
	})
	return out
}

func header(r *kgo.Record, key string) (string, bool) {
	for _, h := range r.Headers {
		if h.Key == key {
			return string(h.Value), true
		}
	}
	return "", false
}

// short abbreviates a hash for messages; the full values are in the record.
func short(h string) string {
	if h == "" {
		return `""`
	}
	if len(h) > 19 {
		return h[:19] + "…"
	}
	return h
}

// hashChains checks G5 per journal partition: every record entry (epoch
// markers are not chained) names its predecessor's hash as prev_hash, and
// its own hash is what its contents hash to. It also decodes the journal for
// the history checks.
func (a *auditor) hashChains() {
	const check = CheckHashChain
	var (
		cur      int32 = -1
		prev     string
		prevOff  int64
		havePrev bool
	)
	for _, r := range sorted(a.in.Journal) {
		if !a.isChecked(r.Partition) {
			continue
		}
		if r.Partition != cur {
			cur, prev, havePrev = r.Partition, "", true
			prevOff = -1
			if start := a.in.JournalStart[cur]; start > 0 {
				// Retention took the beginning: the first record's
				// predecessor is gone, not missing.
				havePrev = false
				a.notef("journal partition %d starts at offset %d (retention): its chain is checked from there", cur, start)
			}
		}
		kind, _ := header(r, outbox.HeaderKind)
		if kind != outbox.KindRecord {
			continue // epoch markers are not chained; unknown kinds are skipped, as restore does
		}
		a.counts.JournalRecords++
		v := Violation{Topic: a.in.Topics.Journal, Partition: r.Partition, Offset: r.Offset, Key: string(r.Key)}
		rec, err := schemas.UnmarshalRecord(r.Value)
		if err != nil {
			v.Message = fmt.Sprintf("undecodable record, chain cannot be verified across it: %v", err)
			a.violate(check, v)
			havePrev = false
			continue
		}
		a.journal[r.Partition] = append(a.journal[r.Partition], jrec{off: r.Offset, rec: rec})
		var problems []string
		if havePrev && rec.PrevHash != prev {
			if prevOff < 0 {
				problems = append(problems, fmt.Sprintf("first record of the partition has prev_hash %s, want \"\"", short(rec.PrevHash)))
			} else {
				problems = append(problems, fmt.Sprintf("prev_hash %s, but the previous record (offset %d) has hash %s: a record is missing, inserted or reordered",
					short(rec.PrevHash), prevOff, short(prev)))
			}
		}
		// The hash is over the record's own bytes in RFC 8785 form, as
		// any JCS library computes it; journals written before the change
		// carry the round-1 hash, which is accepted too.
		if h, err := schemas.RecordHash(r.Value); err != nil {
			problems = append(problems, fmt.Sprintf("cannot hash: %v", err))
		} else if h != rec.Hash {
			if old, err := schemas.LegacyHashRecord(rec.PrevHash, rec); err != nil || old != rec.Hash {
				problems = append(problems, fmt.Sprintf("hash %s but the contents hash to %s: the record was changed", short(rec.Hash), short(h)))
			} else {
				a.counts.LegacyHashes++
			}
		}
		for i, p := range problems {
			if i > 0 {
				v.Message += "; "
			}
			v.Message += p
		}
		if len(problems) > 0 {
			a.violate(check, v)
		}
		prev, prevOff, havePrev = rec.Hash, r.Offset, true
	}
}

// markerEpoch reads an epoch marker's epoch: the JSON value, else the
// header, as restore does.
func markerEpoch(r *kgo.Record) int64 {
	var m struct {
		Epoch int64 `json:"epoch"`
	}
	if err := json.Unmarshal(r.Value, &m); err == nil && m.Epoch > 0 {
		return m.Epoch
	}
	h, _ := header(r, outbox.HeaderEpoch)
	e, _ := strconv.ParseInt(h, 10, 64)
	return e
}

// keyState is what G2 needs to remember about one key's history.
type keyState struct {
	latest      schemas.Status
	final       *jrec // last succeeded/failed/rejected record, until re-executed
	attempts    int
	attemptsOff int64
}

// entityState is what G1 needs to remember about one entity.
type entityState struct {
	inflight map[string]int64 // key -> offset of its latest in_progress record
	tok      int64            // highest fencing token seen
	tokKey   string
	tokOff   int64
}

// histories replays each checked journal partition in offset order and
// checks G2 (per key) and G1 (per entity) on the way.
func (a *auditor) histories() {
	markers := map[int32]map[int64]int64{} // partition -> offset -> epoch
	for _, r := range a.in.Journal {
		if k, _ := header(r, outbox.HeaderKind); k == outbox.KindEpoch && a.isChecked(r.Partition) {
			if markers[r.Partition] == nil {
				markers[r.Partition] = map[int64]int64{}
			}
			markers[r.Partition][r.Offset] = markerEpoch(r)
		}
	}
	keys := map[pk]*keyState{}
	ents := map[pk]*entityState{}
	for _, p := range slices.Sorted(func(yield func(int32) bool) {
		for p := range a.journal {
			if !yield(p) {
				return
			}
		}
	}) {
		marks := slices.Sorted(func(yield func(int64) bool) {
			for off := range markers[p] {
				if !yield(off) {
					return
				}
			}
		})
		var epoch int64
		for _, j := range a.journal[p] {
			for len(marks) > 0 && marks[0] < j.off {
				epoch = max(epoch, markers[p][marks[0]])
				marks = marks[1:]
			}
			rec := j.rec
			v := Violation{Topic: a.in.Topics.Journal, Partition: p, Offset: j.off, Key: rec.IdempotencyKey}
			if rec.Epoch < epoch {
				// Restore ignores such a record; that it is visible
				// at all means a replaced owner's write got through
				// the fence.
				v.Message = fmt.Sprintf("%s record written under epoch %d after the epoch %d marker: a replaced owner's write is visible", rec.Status, rec.Epoch, epoch)
				a.violate(CheckSingleFlight, v)
			}
			// A key is scoped to its entity (SPEC §3): one key of two
			// entities is two histories.
			a.onceKey(keys, pk{p, rec.Entity + "\x00" + rec.IdempotencyKey}, j, v)
			a.singleFlight(ents, pk{p, rec.Entity}, j, v)
		}
	}
	a.counts.Keys = len(keys)
	for _, ks := range keys {
		if ks.latest == schemas.StatusUnresolved {
			a.counts.UnresolvedKeys++
		}
	}
}

// onceKey checks G2 for one record of a key: no in_progress after a final
// succeeded, failed or rejected record (unresolved may be reconciled, which
// starts a new attempt), and attempt numbers never go down.
func (a *auditor) onceKey(keys map[pk]*keyState, id pk, j jrec, v Violation) {
	ks := keys[id]
	if ks == nil {
		ks = &keyState{}
		keys[id] = ks
	}
	rec := j.rec
	ks.latest = rec.Status
	if rec.Release != nil {
		// An operator released the key (SPEC §3 Release): its next
		// execution is new work, not a repeat.
		ks.final, ks.attempts = nil, 0
		return
	}
	switch rec.Status {
	case schemas.StatusSucceeded, schemas.StatusFailed, schemas.StatusRejected:
		ks.final = &j
	case schemas.StatusInProgress:
		if f := ks.final; f != nil {
			ks.final = nil // one report per re-execution, not per attempt
			gap, known := reexecutionGap(f.rec, rec)
			if known && gap >= a.in.KeyMemory {
				a.notef("key %q (journal partition %d) executed again at offset %d, %s after its final record at offset %d: beyond key_memory %s, so forgotten by design (not checked)",
					rec.IdempotencyKey, id.p, j.off, gap.Round(time.Second), f.off, a.in.KeyMemory)
				ks.attempts = 0
			} else {
				v.Message = fmt.Sprintf("in_progress (attempt %d) after the key's final %s record at offset %d", rec.Attempts, f.rec.Status, f.off)
				if known {
					v.Message += fmt.Sprintf(", %s later", gap.Round(time.Millisecond))
				}
				a.violate(CheckOncePerKey, v)
			}
		}
		if rec.Attempts < ks.attempts {
			v.Message = fmt.Sprintf("attempt %d after attempt %d at offset %d: attempt numbers went down", rec.Attempts, ks.attempts, ks.attemptsOff)
			a.violate(CheckOncePerKey, v)
		}
		if rec.Attempts >= ks.attempts {
			ks.attempts, ks.attemptsOff = rec.Attempts, j.off
		}
	}
}

// reexecutionGap is the time between a final record and a later start of
// the same key, when both records carry the times.
func reexecutionGap(final, next schemas.Record) (time.Duration, bool) {
	if final.FinishedAt == nil || next.StartedAt == nil {
		return 0, false
	}
	return next.StartedAt.Sub(*final.FinishedAt), true
}

// singleFlight checks G1 for one record of an entity: while one key of the
// entity is in_progress, no other key starts; and fencing tokens never go
// back (they strictly increase across keys; one key's retries may reuse its
// token).
func (a *auditor) singleFlight(ents map[pk]*entityState, id pk, j jrec, v Violation) {
	es := ents[id]
	if es == nil {
		es = &entityState{inflight: map[string]int64{}, tokOff: -1}
		ents[id] = es
	}
	rec := j.rec
	if rec.Status != schemas.StatusInProgress {
		delete(es.inflight, rec.IdempotencyKey)
		return
	}
	others := slices.Sorted(func(yield func(string) bool) {
		for k := range es.inflight {
			if k != rec.IdempotencyKey && !yield(k) {
				return
			}
		}
	})
	for _, k := range others {
		w := v
		w.Message = fmt.Sprintf("entity %q: key %q starts (in_progress) while key %q is in_progress since offset %d",
			rec.Entity, rec.IdempotencyKey, k, es.inflight[k])
		a.violate(CheckSingleFlight, w)
	}
	es.inflight[rec.IdempotencyKey] = j.off
	t := rec.FencingToken
	if t == 0 {
		return // written before fencing tokens existed
	}
	if es.tokOff >= 0 {
		sameKey := es.tokKey == rec.IdempotencyKey
		if t < es.tok || (t == es.tok && !sameKey) {
			w := v
			w.Message = fmt.Sprintf("entity %q: fencing token %d after token %d of key %q at offset %d: tokens must strictly increase",
				rec.Entity, t, es.tok, es.tokKey, es.tokOff)
			a.violate(CheckSingleFlight, w)
			return
		}
	}
	if t > es.tok || es.tokOff < 0 {
		es.tok, es.tokKey, es.tokOff = t, rec.IdempotencyKey, j.off
	}
}

// outcomeKey is what an outcome id must stand for (SPEC §3: the id is
// deterministic in key, status and command id).
type outcomeKey struct {
	causation, key string
	status         schemas.Status
}

// outcomeIDs checks that each outcome id stands for exactly one (causation,
// status, key) and is the deterministic id of them, counts republications
// (same id again: allowed, consumers drop it) and returns the set of
// causation ids answered, for the G4 check.
func (a *auditor) outcomeIDs() map[string]bool {
	const check = CheckOutcomeIDs
	causes := map[string]bool{}
	type seen struct {
		k   outcomeKey
		off src
	}
	ids := map[string]seen{}
	for _, r := range sorted(a.in.Outcomes) {
		v := Violation{Topic: a.in.Topics.Outcomes, Partition: r.Partition, Offset: r.Offset, Key: string(r.Key)}
		o, err := schemas.DecodeOutcome(r)
		if err != nil {
			v.Message = fmt.Sprintf("undecodable outcome event: %v", err)
			a.violate(check, v)
			continue
		}
		causes[o.CausationID] = true
		if !a.isChecked(o.Record.Command.Partition) {
			continue
		}
		a.counts.Outcomes++
		k := outcomeKey{causation: o.CausationID, key: o.Record.IdempotencyKey, status: o.Record.Status}
		v.Key = k.key
		if want := schemas.OutcomeID(k.key, k.status, k.causation); o.ID != want {
			v.Message = fmt.Sprintf("id %s is not the deterministic id %s of (key, status %s, causation %q)", o.ID, want, k.status, k.causation)
			a.violate(check, v)
		}
		prev, dup := ids[o.ID]
		switch {
		case !dup:
			ids[o.ID] = seen{k, src{r.Partition, r.Offset}}
		case prev.k == k:
			a.counts.Republications++
		default:
			v.Message = fmt.Sprintf("id %s also names (causation %q, status %s, key %q) at partition %d offset %d; here (causation %q, status %s, key %q)",
				o.ID, prev.k.causation, prev.k.status, prev.k.key, prev.off.p, prev.off.off, k.causation, k.status, k.key)
			a.violate(check, v)
		}
	}
	return causes
}

// answered checks G4: every command of a checked partition has its answer —
// an outcome with its id as causation; for an undecodable record, its
// deadletter copy; for a misrouted one, its forwarded copy (checked in turn
// as a command where it landed), or a deadletter copy and an outcome when
// the copy would not fit; nothing for the reconciler's internal
// requests. Commands at or above the group's committed offset may still be
// in flight and count as pending instead.
func (a *auditor) answered(causes map[string]bool) {
	dead := map[src]bool{}
	for _, r := range a.in.Deadletter {
		if t, ok := header(r, schemas.HeaderSourceTopic); ok && t != a.in.Topics.Commands {
			continue
		}
		if s, ok := sourceOf(r, schemas.HeaderSourcePartition, schemas.HeaderSourceOffset); ok {
			dead[s] = true
		}
	}
	cmds := sorted(a.in.Commands)
	fwd := map[src]bool{}
	for _, r := range cmds {
		if s, ok := sourceOf(r, outbox.HeaderForwardedFromPartition, outbox.HeaderForwardedFromOffset); ok {
			fwd[s] = true
		}
	}
	n := a.in.CommandPartitions
	for _, r := range cmds {
		if !a.isChecked(r.Partition) {
			continue
		}
		a.counts.Commands++
		here := src{r.Partition, r.Offset}
		v := Violation{Topic: a.in.Topics.Commands, Partition: r.Partition, Offset: r.Offset, Key: string(r.Key)}
		var ok bool
		var want string
		cmd, err := schemas.DecodeCommand(r, a.in.MaxDataBytes)
		switch {
		case err != nil:
			ok = dead[here]
			want = fmt.Sprintf("undecodable (%v) but has no copy on %s", err, a.in.Topics.Deadletter)
			if ok {
				a.counts.Deadlettered++
			}
		case n > 0 && partitioner.ForEntity(cmd.Subject, n) != r.Partition:
			to := partitioner.ForEntity(cmd.Subject, n)
			// Forwarded, or — when its copy would not fit the commands
			// topic — deadlettered and answered too_large.
			ok = fwd[here]
			want = fmt.Sprintf("misrouted (entity %q belongs on partition %d) but has no forwarded copy there, nor a deadletter copy and an outcome", cmd.Subject, to)
			if ok {
				a.counts.Forwarded++
			} else if ok = dead[here] && causes[cmd.ID]; ok {
				a.counts.Deadlettered++
			}
		case cmd.Type == consumer.TypeReconcile:
			continue // the reconciler's internal request: no outcome by design
		default:
			ok = causes[cmd.ID]
			want = fmt.Sprintf("command %q (key %q) has no outcome with causationid %q", cmd.ID, cmd.IdempotencyKey, cmd.ID)
		}
		if ok {
			continue
		}
		committed, has := a.in.Committed[r.Partition]
		if !has || r.Offset >= committed {
			a.counts.Pending++
			continue
		}
		v.Message = fmt.Sprintf("%s, yet it is below the group's committed offset %d", want, committed)
		a.violate(CheckAnswered, v)
	}
	if n := a.counts.Pending; n > 0 {
		a.notef("%d command(s) at or above the group's committed offsets are not answered yet (pending, not checked)", n)
	}
}

// sourceOf reads a partition/offset header pair pointing back at a command.
func sourceOf(r *kgo.Record, pHeader, oHeader string) (src, bool) {
	ps, ok1 := header(r, pHeader)
	os, ok2 := header(r, oHeader)
	if !ok1 || !ok2 {
		return src{}, false
	}
	p, err1 := strconv.ParseInt(ps, 10, 32)
	o, err2 := strconv.ParseInt(os, 10, 64)
	if err1 != nil || err2 != nil {
		return src{}, false
	}
	return src{int32(p), o}, true
}
