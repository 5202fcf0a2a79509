package audit

import (
	"cmp"
	"crypto/sha256"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/onceflight/onceflight/internal/decide"
	"github.com/onceflight/onceflight/internal/outbox"
	"github.com/onceflight/onceflight/partitioner"
	"github.com/onceflight/onceflight/schemas"
)

// Input is everything Check needs: the records as read, and the few facts
// about the cluster that the records do not carry themselves. Tests build
// it by hand; Run streams the same records from Kafka instead of holding
// them.
type Input struct {
	Topics schemas.Topics
	// CommandPartitions is the commands topic's partition count: the
	// canonical entity -> partition mapping depends on it (docs/guarantees.md).
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
	// long after its final record was forgotten, by design (docs/events.md#execution-records), so
	// it is noted rather than counted against G2. 0: schemas.DefaultKeyMemory.
	KeyMemory time.Duration
	// ControlKeys, if set, verify the signatures of accepted operator
	// decisions (CheckDecisionsSigned).
	ControlKeys *schemas.ControlKeys
	// MaxViolations bounds the violations listed per check (all are
	// counted). 0 lists none.
	MaxViolations int
}

// Check runs every check over in and returns the report. It never fails:
// what cannot be decoded is itself a violation. It feeds the records, sorted
// by partition and offset, through the same streaming checker as Run, so a
// test of Check is a test of what Run decides.
func Check(in Input) Report {
	a := newAuditor(in)
	for _, r := range sorted(in.Journal) {
		a.journalRecord(r)
	}
	for _, r := range sorted(in.Outcomes) {
		a.outcome(r)
	}
	for _, r := range in.Deadletter {
		a.deadletter(r)
	}
	for _, r := range sorted(in.Commands) {
		a.command(r)
	}
	return a.finish()
}

// digest is a 128-bit stand-in for an id the checks only compare: what the
// audit keeps per outcome event instead of the event (see the package doc
// for the memory bound). Truncated SHA-256, so two different ids collide
// with negligible probability at any realistic number of events.
type digest [16]byte

func digestOf(parts ...string) digest {
	h := sha256.New()
	for _, p := range parts {
		// Length-prefixed so ("ab","c") and ("a","bc") differ.
		fmt.Fprintf(h, "%d:%s", len(p), p)
	}
	var d digest
	copy(d[:], h.Sum(nil))
	return d
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

// chainState is what G5 needs per journal partition while it is read in
// offset order.
type chainState struct {
	prev     string // hash of the previous record
	prevOff  int64  // its offset; -1 before the first record
	havePrev bool   // false when the predecessor is unknown (retention, undecodable)
	epoch    int64  // highest epoch marker seen so far
}

// finalRef is what G2 remembers of a key's last final record: not the
// record, only what a violation message names.
type finalRef struct {
	status   schemas.Status
	off      int64
	finished *time.Time
	// freeAfter, when set, is the position in the commands partition
	// after which the key is new work again: a release's position, or the
	// position of a command whose rejection is not final for the key
	// (decide.Seen). -1: a release written before releases had positions.
	freeAfter *int64
	releaseAt int64 // journal offset of the release, for messages; -1 none
}

// keyState is what G2 needs to remember about one key's history.
type keyState struct {
	latest      schemas.Status
	final       *finalRef // last succeeded/failed/rejected record, until re-executed
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

// idSeen is what the outcome-id check remembers of an id's first use.
type idSeen struct {
	tuple digest // of (causation, status, key)
	at    src
}

// misrouted is a command on the wrong partition, judged once every
// command has been read (its forwarded copy may come later).
type misrouted struct {
	at        src
	key       string
	causation digest
	want      string
}

// note categories, in report order: the notes of one kind are grouped
// whatever order the partitions were read in.
const (
	noteScope = iota
	noteRetention
	noteKeyMemory
	notePending
	noteDecisions
	nNoteKinds
)

// auditor checks records as they stream past. Journal records must come in
// offset order per partition (partitions may interleave), and every outcome
// and deadletter record before the first command: the commands check
// matches commands against the answers seen. What it keeps is per
// partition, per key, per entity and per answer id; never a record.
type auditor struct {
	in      Input // the record slices are not used
	checked map[int32]bool
	results map[string]*CheckResult
	counts  Counts
	notes   [nNoteKinds][]string

	chains map[int32]*chainState
	keys   map[pk]*keyState
	ents   map[pk]*entityState

	causes    map[digest]uint8  // causation ids answered by an outcome: causeAnswered | causeSucceeded
	answers   map[digest]answer // (causation, entity, key) -> its latest answer
	ids       map[digest]idSeen // outcome id -> its first use
	dead      map[src]struct{}  // commands copied to the deadletter topic
	fwd       map[src]struct{}  // commands forwarded to their partition
	misrouted []misrouted
}

var checkOrder = []string{CheckHashChain, CheckAnswered, CheckOutcomeIDs, CheckOncePerKey, CheckSingleFlight, CheckDecisionsSigned, CheckEvidence}

func newAuditor(in Input) *auditor {
	if in.KeyMemory <= 0 {
		in.KeyMemory = schemas.DefaultKeyMemory
	}
	if in.Topics == (schemas.Topics{}) {
		in.Topics = schemas.DefaultTopics()
	}
	in.Commands, in.Journal, in.Outcomes, in.Deadletter = nil, nil, nil, nil
	a := &auditor{
		in: in, results: map[string]*CheckResult{},
		chains: map[int32]*chainState{}, keys: map[pk]*keyState{}, ents: map[pk]*entityState{},
		causes: map[digest]uint8{}, answers: map[digest]answer{}, ids: map[digest]idSeen{}, dead: map[src]struct{}{}, fwd: map[src]struct{}{},
	}
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
		a.notef(noteScope, "only command and journal partitions %v were checked", ps)
	}
	for _, name := range checkOrder {
		a.results[name] = &CheckResult{Name: name, Guarantee: guarantees[name], OK: true}
	}
	return a
}

// finish judges what could only be judged after the last record and
// returns the report.
func (a *auditor) finish() Report {
	for _, m := range a.misrouted {
		if _, ok := a.dead[m.at]; ok {
			if _, ok := a.causes[m.causation]; ok {
				a.counts.Deadlettered++
				continue
			}
		}
		if _, ok := a.fwd[m.at]; ok {
			a.counts.Forwarded++
			continue
		}
		a.unanswered(m.at, m.key, m.want)
	}
	a.counts.Keys = len(a.keys)
	for _, ks := range a.keys {
		if ks.latest == schemas.StatusUnresolved {
			a.counts.UnresolvedKeys++
		}
	}
	if n := a.counts.Pending; n > 0 {
		a.notef(notePending, "%d command(s) at or above the group's committed offsets are not answered yet (pending, not checked)", n)
	}
	rep := Report{Counts: a.counts}
	for _, ns := range a.notes {
		rep.Notes = append(rep.Notes, ns...)
	}
	for _, name := range checkOrder {
		if name == CheckDecisionsSigned && a.in.ControlKeys == nil {
			continue // not checked without keys (a note says so)
		}
		rep.Checks = append(rep.Checks, *a.results[name])
	}
	return rep
}

func (a *auditor) isChecked(p int32) bool { return a.checked == nil || a.checked[p] }

func (a *auditor) notef(kind int, format string, args ...any) {
	a.notes[kind] = append(a.notes[kind], fmt.Sprintf(format, args...))
}

// violate counts v against check and lists it if it is among the first
// MaxViolations by partition and offset. Listing by position rather than by
// arrival keeps the report the same however the fetches of different
// partitions interleave.
func (a *auditor) violate(check string, v Violation) {
	r := a.results[check]
	r.OK = false
	r.Count++
	if a.in.MaxViolations <= 0 {
		return
	}
	// After equal positions: one record's violations keep their order.
	i, _ := slices.BinarySearchFunc(r.Violations, v, func(x, y Violation) int {
		if c := cmp.Or(cmp.Compare(x.Partition, y.Partition), cmp.Compare(x.Offset, y.Offset)); c != 0 {
			return c
		}
		return -1
	})
	if i >= a.in.MaxViolations {
		return
	}
	r.Violations = slices.Insert(r.Violations, i, v)
	if len(r.Violations) > a.in.MaxViolations {
		r.Violations = r.Violations[:a.in.MaxViolations]
	}
}

// sorted returns rs ordered by partition and offset, the order the checks
// reason in, whatever order they were collected in.
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

// journalRecord checks one journal record, in offset order within its
// partition: G5 (every record entry names its predecessor's hash as
// prev_hash, and its own hash is what its contents hash to; epoch markers
// are not chained), then G2 and G1 over the decoded record.
func (a *auditor) journalRecord(r *kgo.Record) {
	if !a.isChecked(r.Partition) {
		return
	}
	cs := a.chains[r.Partition]
	if cs == nil {
		cs = &chainState{havePrev: true, prevOff: -1}
		a.chains[r.Partition] = cs
		if start := a.in.JournalStart[r.Partition]; start > 0 {
			// Retention took the beginning: the first record's
			// predecessor is gone, not missing.
			cs.havePrev = false
			a.notef(noteRetention, "journal partition %d starts at offset %d (retention): its chain is checked from there", r.Partition, start)
		}
	}
	switch kind, _ := header(r, schemas.HeaderKind); kind {
	case schemas.KindEpoch:
		cs.epoch = max(cs.epoch, markerEpoch(r))
		return
	case schemas.KindRecord:
	default:
		return // unknown kinds are skipped, as restore does
	}
	a.counts.JournalRecords++
	v := Violation{Topic: a.in.Topics.Journal, Partition: r.Partition, Offset: r.Offset, Key: string(r.Key)}
	rec, err := schemas.UnmarshalRecord(r.Value)
	if err != nil {
		v.Message = fmt.Sprintf("undecodable record, chain cannot be verified across it: %v", err)
		a.violate(CheckHashChain, v)
		cs.havePrev = false
		return
	}
	var problems []string
	if cs.havePrev && rec.PrevHash != cs.prev {
		if cs.prevOff < 0 {
			problems = append(problems, fmt.Sprintf("first record of the partition has prev_hash %s, want \"\"", short(rec.PrevHash)))
		} else {
			problems = append(problems, fmt.Sprintf("prev_hash %s, but the previous record (offset %d) has hash %s: a record is missing, inserted or reordered",
				short(rec.PrevHash), cs.prevOff, short(cs.prev)))
		}
	}
	// The hash is over the record's own bytes in RFC 8785 form, as any
	// JCS library computes it; journals written before the change carry
	// the round-1 hash, which is accepted too.
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
		a.violate(CheckHashChain, v)
	}
	cs.prev, cs.prevOff, cs.havePrev = rec.Hash, r.Offset, true

	v = Violation{Topic: a.in.Topics.Journal, Partition: r.Partition, Offset: r.Offset, Key: rec.IdempotencyKey}
	if rec.Epoch < cs.epoch {
		// Restore ignores such a record; that it is visible at all
		// means a replaced owner's write got through the fence.
		v.Message = fmt.Sprintf("%s record written under epoch %d after the epoch %d marker: a replaced owner's write is visible", rec.Status, rec.Epoch, cs.epoch)
		a.violate(CheckSingleFlight, v)
	}
	// A key is scoped to its entity (docs/events.md#execution-records): one key of two entities is
	// two histories.
	if rec.Status != schemas.StatusInProgress {
		if rec.EstablishedBy == "" {
			a.counts.WithoutEstablishedBy++
		} else if msg := EvidenceProblem(&rec); msg != "" {
			ev := v
			ev.Message = msg
			a.violate(CheckEvidence, ev)
		}
	}
	a.onceKey(pk{r.Partition, rec.Entity + "\x00" + rec.IdempotencyKey}, r.Offset, &rec, v)
	a.singleFlight(pk{r.Partition, rec.Entity}, r.Offset, &rec, v)
}

// markerEpoch reads an epoch marker's epoch as restore does.
func markerEpoch(r *kgo.Record) int64 { return schemas.DecodeEpochMarker(r).Epoch }

// onceKey checks G2 for one record of a key: no in_progress after a final
// succeeded, failed or rejected record (unresolved may be reconciled, which
// starts a new attempt), and attempt numbers never go down.
func (a *auditor) onceKey(id pk, off int64, rec *schemas.Record, v Violation) {
	ks := a.keys[id]
	if ks == nil {
		ks = &keyState{}
		a.keys[id] = ks
	}
	ks.latest = rec.Status
	if rel := rec.Release; rel != nil {
		// An operator released the key (docs/events.md#release): the
		// next execution is new work, not a repeat — for a command after
		// the release only. A command consumed before it and consumed
		// again must not execute (decide.Seen).
		free := int64(-1)
		if rel.Offset != nil {
			free = *rel.Offset
		}
		ks.final = &finalRef{status: rec.Status, off: off, finished: rec.FinishedAt, freeAfter: &free, releaseAt: off}
		return
	}
	switch rec.Status {
	case schemas.StatusSucceeded, schemas.StatusFailed, schemas.StatusRejected:
		ks.final = &finalRef{status: rec.Status, off: off, finished: rec.FinishedAt, releaseAt: -1}
		if rec.Status == schemas.StatusRejected && rec.Resolution == nil && rec.Error != nil && !decide.RejectionFinal(rec.Error.Code) {
			// Never started, and not final for the key: a later
			// command with it is new work (docs/guarantees.md#decision-table).
			free := rec.Command.Offset
			ks.final.freeAfter = &free
		}
	case schemas.StatusInProgress:
		if f := ks.final; f != nil && f.freeAfter != nil && (*f.freeAfter < 0 || rec.Command.Offset > *f.freeAfter) {
			ks.final, ks.attempts = nil, 0
		}
		if f := ks.final; f != nil && f.releaseAt >= 0 {
			ks.final = nil
			v.Message = fmt.Sprintf("in_progress for the command at offset %d, which precedes the release at commands offset %d (journal offset %d) that freed the key: a command consumed before the release executed again",
				rec.Command.Offset, *f.freeAfter, f.releaseAt)
			a.violate(CheckOncePerKey, v)
		}
		if f := ks.final; f != nil {
			ks.final = nil // one report per re-execution, not per attempt
			gap, known := reexecutionGap(f.finished, rec.StartedAt)
			if known && gap >= a.in.KeyMemory {
				a.notef(noteKeyMemory, "key %q (journal partition %d) executed again at offset %d, %s after its final record at offset %d: beyond key_memory %s, so forgotten by design (not checked)",
					rec.IdempotencyKey, id.p, off, gap.Round(time.Second), f.off, a.in.KeyMemory)
				ks.attempts = 0
			} else {
				v.Message = fmt.Sprintf("in_progress (attempt %d) after the key's final %s record at offset %d", rec.Attempts, f.status, f.off)
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
			ks.attempts, ks.attemptsOff = rec.Attempts, off
		}
	}
}

// reexecutionGap is the time between a final record and a later start of
// the same key, when both records carry the times.
func reexecutionGap(finished, started *time.Time) (time.Duration, bool) {
	if finished == nil || started == nil {
		return 0, false
	}
	return started.Sub(*finished), true
}

// singleFlight checks G1 for one record of an entity: while one key of the
// entity is in_progress, no other key starts; and fencing tokens never go
// back (they strictly increase across keys; one key's retries may reuse its
// token).
func (a *auditor) singleFlight(id pk, off int64, rec *schemas.Record, v Violation) {
	es := a.ents[id]
	if es == nil {
		es = &entityState{inflight: map[string]int64{}, tokOff: -1}
		a.ents[id] = es
	}
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
	es.inflight[rec.IdempotencyKey] = off
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
		es.tok, es.tokKey, es.tokOff = t, rec.IdempotencyKey, off
	}
}

// outcome checks one outcome event: its id stands for exactly one
// (causation, status, key) and is the deterministic id of them (docs/events.md#execution-records);
// the same id again is a republication (allowed, consumers drop it). It
// records the causation id as answered, for the G4 check of the commands.
func (a *auditor) outcome(r *kgo.Record) {
	const check = CheckOutcomeIDs
	v := Violation{Topic: a.in.Topics.Outcomes, Partition: r.Partition, Offset: r.Offset, Key: string(r.Key)}
	o, err := schemas.DecodeOutcome(r)
	if err != nil {
		v.Message = fmt.Sprintf("undecodable outcome event: %v", err)
		a.violate(check, v)
		return
	}
	c := a.causes[digestOf(o.CausationID)] | causeAnswered
	if o.Record.Status == schemas.StatusSucceeded {
		c |= causeSucceeded
	}
	a.causes[digestOf(o.CausationID)] = c
	if !a.isChecked(o.Record.Command.Partition) {
		return
	}
	a.counts.Outcomes++
	key, status, causation := o.Record.IdempotencyKey, o.Record.Status, o.CausationID
	v.Key = key
	decision := schemas.SettlementDecision(&o.Record, causation)
	if want := schemas.OutcomeIDOf(&o.Record, causation); o.ID != want {
		basis := fmt.Sprintf("causation %q", causation)
		if decision != "" {
			basis = fmt.Sprintf("decision %q", decision)
		}
		v.Message = fmt.Sprintf("id %s is not the deterministic id %s of (key, status %s, %s)", o.ID, want, status, basis)
		a.violate(check, v)
	}
	a.sameAnswer(&o, v)
	id, tuple := digestOf(o.ID), digestOf(causation, string(status), key, decision)
	prev, dup := a.ids[id]
	switch {
	case !dup:
		a.ids[id] = idSeen{tuple, src{r.Partition, r.Offset}}
	case prev.tuple == tuple:
		a.counts.Republications++
	default:
		v.Message = fmt.Sprintf("id %s also names another (causation, status, key) at partition %d offset %d; here (causation %q, status %s, key %q)",
			o.ID, prev.at.p, prev.at.off, causation, status, key)
		a.violate(check, v)
	}
}

// answer is what the audit remembers of a command's latest answer.
type answer struct {
	status schemas.Status
	code   string
	at     src
}

// sameAnswer checks that a command consumed again is answered as it was
// the first time (docs/guarantees.md#decision-table): a second outcome for
// the same (causation, entity, key) has the same status and error code,
// unless the first left the key unresolved or held and this one settles it.
func (a *auditor) sameAnswer(o *schemas.Outcome, v Violation) {
	code := ""
	if o.Record.Error != nil {
		code = o.Record.Error.Code
	}
	d := digestOf(o.CausationID, o.Record.Entity, o.Record.IdempotencyKey)
	now := answer{status: o.Record.Status, code: code, at: src{v.Partition, v.Offset}}
	prev, seen := a.answers[d]
	a.answers[d] = now
	if !seen || (prev.status == now.status && prev.code == now.code) ||
		prev.status == schemas.StatusUnresolved || prev.status == schemas.StatusHeld {
		return
	}
	v.Message = fmt.Sprintf("command %q answered %s %s at outcomes partition %d offset %d, then %s %s: a command consumed again must get its first answer",
		o.CausationID, prev.status, prev.code, prev.at.p, prev.at.off, now.status, now.code)
	a.violate(CheckOncePerKey, v)
}

// deadletter notes which command a deadletter copy stands for.
func (a *auditor) deadletter(r *kgo.Record) {
	if t, ok := header(r, schemas.HeaderSourceTopic); ok && t != a.in.Topics.Commands {
		return
	}
	if s, ok := sourceOf(r, schemas.HeaderSourcePartition, schemas.HeaderSourceOffset); ok {
		a.dead[s] = struct{}{}
	}
}

// command checks G4 for one command: it has its answer — an outcome with
// its id as causation; for an undecodable record, its deadletter copy; for
// a misrouted one, its forwarded copy (checked in turn as a command where
// it landed), or a deadletter copy and an outcome when the copy would not
// fit (judged in finish, since the copy may be read later); nothing for the
// reconciler's internal requests. Commands at or above the group's
// committed offset may still be in flight and count as pending instead.
func (a *auditor) command(r *kgo.Record) {
	if s, ok := sourceOf(r, outbox.HeaderForwardedFromPartition, outbox.HeaderForwardedFromOffset); ok {
		a.fwd[s] = struct{}{}
	}
	if !a.isChecked(r.Partition) {
		return
	}
	a.counts.Commands++
	here := src{r.Partition, r.Offset}
	cmd, err := schemas.DecodeCommand(r, a.in.MaxDataBytes)
	n := a.in.CommandPartitions
	switch {
	case err != nil:
		if _, ok := a.dead[here]; ok {
			a.counts.Deadlettered++
			return
		}
		a.unanswered(here, string(r.Key), fmt.Sprintf("undecodable (%v) but has no copy on %s", err, a.in.Topics.Deadletter))
	case n > 0 && partitioner.ForEntity(cmd.Subject, n) != r.Partition:
		a.misrouted = append(a.misrouted, misrouted{at: here, key: string(r.Key), causation: digestOf(cmd.ID),
			want: fmt.Sprintf("misrouted (entity %q belongs on partition %d) but has no forwarded copy there, nor a deadletter copy and an outcome",
				cmd.Subject, partitioner.ForEntity(cmd.Subject, n))})
	case cmd.Type == schemas.TypeReconcile:
		// The reconciler's internal request: no outcome by design.
	case schemas.IsDecision(cmd.Type):
		a.decision(r, &cmd)
		fallthrough
	default:
		if _, ok := a.causes[digestOf(cmd.ID)]; ok {
			return
		}
		a.unanswered(here, string(r.Key), fmt.Sprintf("command %q (key %q) has no outcome with causationid %q", cmd.ID, cmd.IdempotencyKey, cmd.ID))
	}
}

const (
	causeAnswered  uint8 = 1 << iota // an outcome names it as causation
	causeSucceeded                   // one of them is succeeded
)

// decision checks an operator decision's signature. One the executor
// refused (not_allowed) broke nothing and is counted; one it accepted
// without a valid signature of a known key is a violation: someone able
// to write the commands topic decided for an operator.
func (a *auditor) decision(r *kgo.Record, cmd *schemas.Command) {
	a.counts.Decisions++
	if a.in.ControlKeys == nil {
		if a.counts.Decisions == 1 {
			a.notef(noteDecisions, "operator decisions' signatures were not checked: give the control key file (--control-key-file) to check them")
		}
		return
	}
	err := a.in.ControlKeys.VerifyControl(cmd)
	if err == nil {
		return
	}
	if a.causes[digestOf(cmd.ID)]&causeSucceeded == 0 {
		a.counts.RefusedDecisions++
		return
	}
	a.violate(CheckDecisionsSigned, Violation{Topic: a.in.Topics.Commands, Partition: r.Partition, Offset: r.Offset, Key: string(r.Key),
		Message: fmt.Sprintf("%s %q (key %q, entity %q) was accepted, but its signature does not verify: %v", cmd.Type, cmd.ID, cmd.IdempotencyKey, cmd.Subject, err)})
}

// unanswered reports the command at s (Kafka key key), lacking want, as a
// violation if it is below the group's committed offset, else counts it as
// pending.
func (a *auditor) unanswered(s src, key, want string) {
	committed, has := a.in.Committed[s.p]
	if !has || s.off >= committed {
		a.counts.Pending++
		return
	}
	a.violate(CheckAnswered, Violation{Topic: a.in.Topics.Commands, Partition: s.p, Offset: s.off, Key: key,
		Message: fmt.Sprintf("%s, yet it is below the group's committed offset %d", want, committed)})
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

// EvidenceProblem says what rec's evidence lacks for the way its status
// claims to have been established (docs/events.md#evidence), or "" when
// nothing. An attempt or confirmation older than the record keeps
// (evidence_dropped) may be what is missing, so only the latest entries
// are required.
func EvidenceProblem(rec *schemas.Record) string {
	var lastAttempt, lastConfirm *schemas.Evidence
	for i := range rec.Evidence {
		switch ev := &rec.Evidence[i]; ev.Kind {
		case schemas.EvidenceAttempt:
			lastAttempt = ev
		case schemas.EvidenceConfirm:
			lastConfirm = ev
		}
	}
	claim := fmt.Sprintf("%s established by %s", rec.Status, rec.EstablishedBy)
	switch rec.EstablishedBy {
	case schemas.EstablishedByRule:
		return ""
	case schemas.EstablishedByOperator:
		if rec.Resolution == nil || rec.Resolution.As != rec.Status {
			return claim + " without an operator's resolution as " + string(rec.Status)
		}
		return ""
	case schemas.EstablishedByAnswer:
		switch {
		case lastAttempt == nil:
			return claim + " without an attempt's answer"
		case rec.Status == schemas.StatusSucceeded && lastAttempt.Answer != schemas.AnswerSucceeded:
			return fmt.Sprintf("%s, but the last attempt answered %s", claim, lastAttempt.Answer)
		case rec.Status == schemas.StatusFailed && lastAttempt.Answer == schemas.AnswerSucceeded:
			return claim + ", but the last attempt answered succeeded"
		}
		return ""
	case schemas.EstablishedByConfirmation, schemas.EstablishedByReconciler:
		if lastConfirm == nil {
			if rec.EstablishedBy == schemas.EstablishedByReconciler && lastAttempt != nil {
				return "" // re-executed without confirming (idempotent_by_key)
			}
			return claim + " without a confirmation"
		}
		// The confirmation asks about an attempt whose answer was
		// ambiguous, or that never answered (its executor stopped).
		for _, ev := range rec.Evidence {
			if ev.Kind == schemas.EvidenceAttempt && ev.Attempt == lastConfirm.Attempt && ev.Answer != schemas.AnswerAmbiguous && ev.At.Before(lastConfirm.At) {
				return fmt.Sprintf("%s, but attempt %d answered %s: nothing to confirm", claim, ev.Attempt, ev.Answer)
			}
		}
		switch {
		case rec.Status == schemas.StatusSucceeded && lastConfirm.Answer != schemas.AnswerFound && (lastAttempt == nil || lastAttempt.Answer != schemas.AnswerSucceeded):
			return fmt.Sprintf("%s, but the confirmation answered %s", claim, lastConfirm.Answer)
		case rec.EstablishedBy == schemas.EstablishedByConfirmation && rec.Status == schemas.StatusUnresolved && lastConfirm.Answer != schemas.AnswerUnknown:
			return fmt.Sprintf("%s, but the confirmation answered %s", claim, lastConfirm.Answer)
		}
		return ""
	}
	return fmt.Sprintf("established_by %q is not one of answer, confirmation, reconciler, operator, rule", rec.EstablishedBy)
}
