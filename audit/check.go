package audit

import (
	"cmp"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/onceflight/onceflight/internal/decide"
	"github.com/onceflight/onceflight/internal/trustlog"
	"github.com/onceflight/onceflight/internal/wire"
	"github.com/onceflight/onceflight/partitioner"
	"github.com/onceflight/onceflight/schemas"
	"github.com/onceflight/onceflight/trust"
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
	// CommandsStart is each commands partition's log start offset. Above
	// 0, retention deleted the operator decisions that were there, so a
	// record naming one of them cannot be matched (a note, not a
	// violation).
	CommandsStart map[int32]int64
	// Committed is the executors' group's committed offset per commands
	// partition (absent: none). Commands at or above it may legitimately
	// be unanswered still; they count as pending.
	Committed map[int32]int64
	// Group names the group Committed was read from. When set, Committed
	// empty while the journal holds records fails CheckAnswered: every
	// executor transaction commits its group's offsets, so the offsets
	// read are not the executors' (another group, or expired), and every
	// command would count as pending, the check checking nothing.
	Group string
	// MaxDataBytes is the executor's --max-data-bytes: what it could not
	// decode, the audit must not expect an outcome for. 0: the default.
	MaxDataBytes int
	// KeyMemory is the executor's key_memory: a key executed again this
	// long after its final record was forgotten, by design (docs/events.md#execution-records), so
	// it is noted rather than counted against G2. 0: wire.DefaultKeyMemory.
	KeyMemory time.Duration
	// ControlKeys, if set, verify the signatures of accepted operator
	// decisions (CheckDecisionsSigned).
	ControlKeys *schemas.ControlKeys
	// Trusted, if set, are the executors' public keys: every journal
	// record must be covered by a transaction seal one of them signed
	// (CheckJournalSigned, docs/trust.md#signed-transactions).
	Trusted *trust.TrustedKeys
	// OriginPrefix names the journal's partitions in seals; default
	// "onceflight/" + the journal topic.
	OriginPrefix string
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
	a.endJournals()
	a.journalsDone = true
	// Deadletters before outcomes, as Run reads them: outcomes_match
	// looks an undecodable command's answer up in them.
	for _, r := range in.Deadletter {
		a.deadletter(r)
	}
	for _, r := range sorted(in.Outcomes) {
		a.outcome(r)
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
	var buf [256]byte
	b := buf[:0]
	for _, p := range parts {
		// Length-prefixed so ("ab","c") and ("a","bc") differ.
		b = strconv.AppendInt(b, int64(len(p)), 10)
		b = append(b, ':')
		b = append(b, p...)
	}
	sum := sha256.Sum256(b)
	var d digest
	copy(d[:], sum[:])
	return d
}

// src names a record by where it was consumed: how deadletters and
// forwarded copies point back at their command.
type src struct {
	p   int32
	off int64
}

// chainState is what G5 needs per journal partition while it is read in
// offset order.
type chainState struct {
	prev     string // hash of the previous record
	prevOff  int64  // its offset; -1 before the first record
	havePrev bool   // false when the predecessor is unknown (retention, undecodable)
	epoch    int64  // highest epoch marker seen so far
	// firstTS is the timestamp of the partition's first entry read: an
	// outcome before it, whose record is not found, carries a record
	// retention deleted (outcomes_match).
	firstTS time.Time
}

// finalRef is what G2 remembers of a key's last final record: not the
// record, only what a violation message names. A value, not pointers,
// and packed: it lives in every key's state.
type finalRef struct {
	status schemas.Status // interned
	off    int64
	// finished is the record's finished_at (finishedSec, finishedNsec:
	// exact for any time, unlike UnixNano), when hasFinished.
	finishedSec int64
	// freeAfter, when hasFree, is the position in the commands partition
	// after which the key is new work again: a release's position, or the
	// position of a command whose rejection is not final for the key
	// (decide.Seen). -1: a release written before releases had positions.
	freeAfter    int64
	releaseAt    int64 // journal offset of the release, for messages; -1 none
	finishedNsec int32
	hasFinished  bool
	hasFree      bool
}

// finished returns f's finish time.
func (f finalRef) finished() time.Time { return time.Unix(f.finishedSec, int64(f.finishedNsec)) }

// keyState is what G2 needs to remember about one key's history, and
// outcomes_match its records an outcome may carry: about 104 bytes and
// 32 per such record, usually one (docs/memory.md#audit).
type keyState struct {
	final       finalRef // last succeeded/failed/rejected record, until re-executed
	attempts    int
	attemptsOff int64
	hasFinal    bool
	unresolved  bool // the key's latest record is unresolved
	// pubs are the key's records an outcome may carry, in journal
	// order (outcomes_match).
	pubs []pubRec
}

// inflightKey is a key of an entity in progress, and the offset of its
// latest in_progress record, with that record's deadline (UnixNano, 0:
// none) and epoch.
type inflightKey struct {
	key      string
	off      int64
	deadline int64
	epoch    int64
}

// entityState is what G1 needs to remember about one entity. An entity
// has at most one key in progress unless G1 is already broken, so a slice
// is smaller than a map.
type entityState struct {
	inflight []inflightKey
	tok      int64 // highest fencing token seen
	tokKey   string
	tokOff   int64
	// inherited is the attempt of a replaced owner that a newer epoch
	// settled, until the entity's next key starts: that start must come
	// after the attempt's deadline (docs/guarantees.md#g1-single-flight,
	// deadlines). Nil for all but entities just taken over.
	inherited *inflightKey
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
	answered  bool // an outcome answers it (looked up as partitions end)
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
//
// Run streams a partition at a time and tells the auditor when a
// partition's journal and outcomes are read (endAnswers) and when its
// commands are (endCommands), so that what only that partition needed is
// dropped and memory follows the largest partition, not the topics
// (docs/memory.md#audit). Check calls neither and keeps everything to the
// end; both judge by the same code.
//
// Every field is the checking goroutine's (the one that calls check, in
// offset order): Run's decoding workers only write their own decoded
// slot and read memo, and no field is locked.
type auditor struct {
	in      Input // the record slices are not used
	checked map[int32]bool
	results map[string]*CheckResult
	counts  Counts
	notes   [nNoteKinds][]string

	chains map[int32]*chainState
	// seals are the journal partitions' seal checks (Input.Trusted),
	// ended with the partition (endJournal).
	seals map[int32]*trustlog.SealScan
	// keys and ents are the journal partitions' keys (entity NUL key)
	// and entities; Run reads one journal partition at a time, and
	// dropping them ends that partition's G1 and G2.
	keys *spill[keyState]    // digest of (partition, entity, key)
	ents *spill[entityState] // digest of (partition, entity)

	// causes: per command partition the outcome names (Record.Command
	// .Partition), the causation ids answered: causeAnswered |
	// causeSucceeded. late holds answers to a partition already judged
	// and dropped (an outcome on another partition than its entity's).
	causes map[int32]*spill[uint8]
	late   map[digest]uint8
	judged map[int32]bool // command partitions dropped by endCommands

	answers *spill[answer]    // (causation, entity, key) -> its latest answer
	ids     map[digest]idSeen // outcome id -> its first use
	// idStore, in Run, holds the first use of every outcome id of the
	// outcome partitions already read, on disk; ids holds the current
	// partition's, or its latest once there were more than maxMem. The
	// spills (keys, ents, answers, causes) write their entries to the
	// same store past maxMem.
	idStore *idStore
	maxMem  int
	err     error // the first failure of idStore; Run returns it

	dead      map[src]struct{} // commands copied to the deadletter topic
	fwd       map[src]struct{} // commands forwarded to their partition
	misrouted []misrouted
	// deferred are commands below the committed offset found unanswered
	// when their partition was judged; an answer on a partition read
	// later (misplaced, or a causation id reused) still counts, as it
	// did when the whole outcomes topic was read first.
	deferred []deferredCmd

	// dbuf holds the records' decodings: dbuf[heldBuf] the held chunk's,
	// the other the chunk being decoded. held, heldBuf and ended belong to
	// the goroutine that feeds (stream's, or records'); the decoding
	// goroutines feed starts write only the other dbuf, and feed waits for
	// them before it swaps.
	dbuf [2][]decoded
	// held is the chunk feed decoded last and has not checked (flush
	// does), its decodings in dbuf[heldBuf].
	held    []*kgo.Record
	heldBuf int
	// ended is what flush runs after checking held (afterHeld): the end
	// of the step held belongs to.
	ended func()
	// memo, in Run, has the journal records decoded lately, for the
	// outcomes that carry them (recordMemo); nil in Check, which decodes
	// one record at a time.
	memo     *recordMemo
	memoHits int // outcomes whose record was found in memo

	// decisions are the operator decisions read (with ControlKeys), by
	// id; claims are the records established by an operator, judged in
	// finish against them. Both hold operator actions only: few.
	decisions map[digest]decisionSeen
	claims    []operatorClaim

	// outQ are the outcomes of each partition waiting for their record
	// (outcomes_match), outW each partition's watermark: the highest
	// journal offset of a record its outcomes read so far published.
	// journalsDone: every journal record was read before the outcomes
	// (Check). retentionNoted: partitions noted for records deleted.
	outQ           map[int32][]outQueued // no empty queue: drainOut deletes it
	outW           map[int32]int64
	journalsDone   bool
	retentionNoted map[int32]bool

	// Keys seen, and keys whose latest record is unresolved, for Counts:
	// counted as they change, since a spill cannot list its entries.
	nKeys, nUnresolved int
	// live is the number of per-key, per-entity and per-answer entries
	// held now, peak the most at once: what the memory bound is about.
	live, peak int
}

// decisionSeen is what the evidence check keeps of one operator decision.
type decisionSeen struct {
	signed bool   // its signature verifies with one of the control keys
	says   digest // of (entity, key, as) it decides
	// notAfter is the decision's signed not_after, zero if none (an
	// earlier build's): a record applying it later is a violation.
	notAfter time.Time
}

// operatorClaim is a record that claims an operator's decision: a status
// established_by operator, whose resolution must name a signed resolve on
// the commands topic that decided this key of this entity as this status;
// or a release or an approval, which must name a signed release or
// approve of this key of this entity. Judged in finish, since commands
// are read after the journal.
type operatorClaim struct {
	v        Violation // the record; Message is filled in when it fails
	claim    string    // "succeeded established by operator"
	decision string    // the resolution's decision_id
	at       time.Time // when the record says the decision was applied
	want     digest    // decisionSays of what the record says was decided
	p        int32     // the commands partition the decision is on
}

// deferredCmd is a command found unanswered, awaiting finish.
type deferredCmd struct {
	at        src
	causation digest
	key, want string
}

var checkOrder = []string{CheckHashChain, CheckJournalSigned, CheckAnswered, CheckOutcomeIDs, CheckOutcomesMatch, CheckOncePerKey, CheckSingleFlight, CheckDecisionsSigned, CheckEvidence}

func newAuditor(in Input) *auditor {
	if in.KeyMemory <= 0 {
		in.KeyMemory = wire.DefaultKeyMemory
	}
	in.Topics = in.Topics.WithDefaults()
	if in.OriginPrefix == "" {
		in.OriginPrefix = "onceflight/" + in.Topics.Journal
	}
	in.Commands, in.Journal, in.Outcomes, in.Deadletter = nil, nil, nil, nil
	a := &auditor{
		in: in, results: map[string]*CheckResult{},
		chains: map[int32]*chainState{}, seals: map[int32]*trustlog.SealScan{},
		causes: map[int32]*spill[uint8]{}, late: map[digest]uint8{}, judged: map[int32]bool{},
		ids: map[digest]idSeen{}, dead: map[src]struct{}{}, fwd: map[src]struct{}{},
		decisions: map[digest]decisionSeen{},
		outQ:      map[int32][]outQueued{}, outW: map[int32]int64{}, retentionNoted: map[int32]bool{},
	}
	a.keys = newSpill(a, spillKeys, encKey, decKey)
	a.ents = newSpill(a, spillEnts, encEnt, decEnt)
	a.answers = newSpill(a, spillAnswers, encAnswer, decAnswer)
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
	a.endJournals()
	a.endOutcomes()
	for _, d := range a.deferred {
		if _, ok := a.cause(d.at.p, d.causation); !ok {
			a.unanswered(d.at, d.key, d.want)
		}
	}
	a.deferred = nil
	a.judgeClaims()
	for _, m := range a.misrouted {
		if _, ok := a.dead[m.at]; ok {
			if m.answered || a.answered(m.at.p, m.causation) {
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
	a.counts.Keys, a.counts.UnresolvedKeys = a.nKeys, a.nUnresolved
	if a.in.Group != "" && len(a.in.Committed) == 0 && a.counts.JournalRecords > 0 {
		a.violate(CheckAnswered, Violation{Topic: a.in.Topics.Commands, Partition: -1, Offset: -1,
			Message: fmt.Sprintf("group %q has no committed offset on %s, yet the journal holds %d execution records, and every executor transaction commits its group's offsets: --group names another group than the executors' (or their offsets expired, offsets.retention.minutes); without them no command can be told pending from unanswered",
				a.in.Group, a.in.Topics.Commands, a.counts.JournalRecords)})
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
		if name == CheckJournalSigned && a.in.Trusted == nil {
			continue // not checked without trusted keys
		}
		rep.Checks = append(rep.Checks, *a.results[name])
	}
	return rep
}

// useStore makes the auditor keep its state in st past maxMem entries
// per map (spill), and the first uses of outcome ids there.
func (a *auditor) useStore(st *idStore, maxMem int) {
	a.idStore, a.maxMem = st, maxMem
	storeSpill(a, a.keys)
	storeSpill(a, a.ents)
	storeSpill(a, a.answers)
}

// storeSpill sets m to spill to the auditor's store, if it has one.
func storeSpill[V any](a *auditor, m *spill[V]) {
	if a.idStore == nil {
		return
	}
	m.st, m.max = a.idStore, a.maxMem
	m.failed = func(err error) {
		if a.err == nil {
			a.err = err
		}
	}
}

// grow counts n new live entries (n < 0: entries dropped).
func (a *auditor) grow(n int) {
	a.live += n
	a.peak = max(a.peak, a.live)
}

// endAnswers ends the journal partition and the outcomes partition that
// Run has just read whole (the same number p; either may not exist): G1
// and G2 of its keys and entities are judged, the answers of its outcomes
// are compared, and its outcome ids go to the id store, so all of that is
// dropped. Only the causation ids stay, until endCommands of the command
// partition they answer.
func (a *auditor) endAnswers() {
	a.endOutcomes()
	a.keys.reset()
	a.ents.reset()
	a.answers.reset()
	a.storeIDs()
}

// storeIDs moves the outcome ids in memory to the store (Run), where
// lookups find them as they find those of the partitions before.
func (a *auditor) storeIDs() {
	if a.idStore == nil {
		return
	}
	if a.err == nil {
		a.err = a.idStore.add(a.ids)
	}
	a.live -= len(a.ids)
	a.ids = map[digest]idSeen{}
}

// endCommands ends command partition p, whose commands Run has read
// whole: its answered causation ids are dropped once the commands still
// waiting for an answer (a misrouted one, one found unanswered) have been
// looked up in them.
func (a *auditor) endCommands(p int32) {
	if cs := a.causes[p]; cs != nil {
		for i := range a.misrouted {
			if m := &a.misrouted[i]; !m.answered {
				_, m.answered = cs.get(m.causation)
			}
		}
		kept := a.deferred[:0]
		for _, d := range a.deferred {
			if _, ok := cs.get(d.causation); !ok {
				kept = append(kept, d)
			}
		}
		a.deferred = kept
		cs.reset()
	}
	delete(a.causes, p)
	a.judged[p] = true
}

// addCause records that an outcome answers causation c of command
// partition p.
func (a *auditor) addCause(p int32, c digest, flags uint8) {
	if a.judged[p] {
		a.late[c] |= flags
		return
	}
	cs := a.causes[p]
	if cs == nil {
		cs = newSpill(a, spillCauses, encCause, decCause)
		// One spill per partition, under its own generation.
		cs.gen = uint32(p)
		a.causes[p] = cs
	}
	f, _ := cs.get(c)
	cs.set(c, f|flags)
}

// cause returns the flags of causation c, looked up first among the
// answers to command partition p, then among every other partition's: an
// outcome answers the command of its causation id wherever either is.
func (a *auditor) cause(p int32, c digest) (uint8, bool) {
	var f uint8
	var ok bool
	if cs := a.causes[p]; cs != nil {
		if f, ok = cs.get(c); ok && f&causeSucceeded != 0 {
			return f, true
		}
	}
	for q, cs := range a.causes {
		if q == p {
			continue
		}
		if g, found := cs.get(c); found {
			f, ok = f|g, true
		}
	}
	if g, found := a.late[c]; found {
		f, ok = f|g, true
	}
	return f, ok
}

func (a *auditor) answered(p int32, c digest) bool {
	_, ok := a.cause(p, c)
	return ok
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
	var d decoded
	a.decode(r, &d)
	a.checkJournal(r, &d)
}

// checkJournal is journalRecord for a record decoded already. With
// trusted keys, a record is judged only once a trusted seal covers it,
// as restore applies it only then: a record no trusted seal covers is a
// violation of CheckJournalSigned and is not judged by the other checks.
func (a *auditor) checkJournal(r *kgo.Record, d *decoded) {
	if !a.isChecked(r.Partition) {
		return
	}
	if a.in.Trusted == nil {
		a.judgeJournal(r, d)
		return
	}
	sc := a.seals[r.Partition]
	if sc == nil {
		sc = trustlog.NewSealScan(trust.Origin(a.in.OriginPrefix, r.Partition), a.in.Trusted, a.in.JournalStart[r.Partition] > 0)
		a.seals[r.Partition] = sc
	}
	// d is reused for the next chunk: what the journal checks read is
	// copied.
	h := &heldJournal{r: r, d: decoded{err: d.err, kind: d.kind, rec: d.rec, hash: d.hash, hashErr: d.hashErr, keyID: d.keyID, entityID: d.entityID, recHash: d.recHash, unreleased: d.unreleased, hasUnreleased: d.hasUnreleased, misplaced: d.misplaced}}
	a.judgeHeld(sc.Add(r, h))
}

// heldJournal is a journal record waiting for a trusted seal.
type heldJournal struct {
	r *kgo.Record
	d decoded
}

func (a *auditor) judgeHeld(vs []any) {
	for _, v := range vs {
		h := v.(*heldJournal)
		a.judgeJournal(h.r, &h.d)
	}
}

// judgeJournal runs the journal checks on one record of a checked
// partition, in offset order within it.
func (a *auditor) judgeJournal(r *kgo.Record, d *decoded) {
	cs := a.chains[r.Partition]
	if cs == nil {
		cs = &chainState{havePrev: true, prevOff: -1, firstTS: r.Timestamp}
		a.chains[r.Partition] = cs
		if start := a.in.JournalStart[r.Partition]; start > 0 {
			// Retention took the beginning: the first record's
			// predecessor is gone, not missing.
			cs.havePrev = false
			a.notef(noteRetention, "journal partition %d starts at offset %d (retention): its chain is checked from there", r.Partition, start)
		}
	}
	switch d.kind {
	case schemas.KindEpoch:
		cs.epoch = max(cs.epoch, markerEpoch(r))
		return
	case schemas.KindRecord:
	default:
		return // unknown kinds are skipped, as restore does
	}
	a.counts.JournalRecords++
	v := Violation{Topic: a.in.Topics.Journal, Partition: r.Partition, Offset: r.Offset, Key: string(r.Key)}
	rec, err := &d.rec, d.err
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
	if h, err := d.hash, d.hashErr; err != nil {
		problems = append(problems, fmt.Sprintf("cannot hash: %v", err))
	} else if h != rec.Hash {
		if old, err := wire.LegacyHashRecord(rec.PrevHash, *rec); err != nil || old != rec.Hash {
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
		v.Message = fmt.Sprintf("%s record written under epoch %d after epoch %d's marker or records: a replaced owner's write is visible", rec.Status, rec.Epoch, cs.epoch)
		a.violate(CheckSingleFlight, v)
	}
	if d.misplaced {
		// Every record of an entity is written by the owner of its
		// partition: one elsewhere was not, and the keys and entities
		// of that partition are another history the checks of this one
		// cannot see (a key executed in both passes either).
		w := v
		w.Message = fmt.Sprintf("entity %q belongs on partition %d: its %s record on journal partition %d was written outside its single flight",
			rec.Entity, partitioner.ForEntity(rec.Entity, a.in.CommandPartitions), rec.Status, r.Partition)
		a.violate(CheckSingleFlight, w)
	}
	// The epoch is also taken from records, as restore takes it
	// (consumer applyJournal): once retention has deleted an epoch's
	// marker, its records are what still says a lower epoch is replaced.
	cs.epoch = max(cs.epoch, rec.Epoch)
	// A key is scoped to its entity (docs/events.md#execution-records): one key of two entities is
	// two histories.
	if rec.Status != schemas.StatusInProgress {
		if rec.EstablishedBy == "" {
			a.counts.WithoutEstablishedBy++
		} else if msg := evidenceProblem(rec); msg != "" {
			ev := v
			ev.Message = msg
			a.violate(CheckEvidence, ev)
		} else if rec.EstablishedBy == schemas.EstablishedByOperator {
			a.claimOperator(rec, v)
		}
	}
	if rec.Release != nil || rec.Resolution != nil {
		a.claimDecisions(rec, v)
	}
	a.onceKey(r.Partition, d, r.Offset, rec, v)
	a.singleFlight(d.entityID, r.Offset, rec, v)
}

// endJournals ends every journal partition still open.
func (a *auditor) endJournals() {
	for _, p := range slices.Sorted(maps.Keys(a.seals)) {
		a.endJournal(p)
	}
}

// endJournal judges journal partition p's seals after its last record:
// each stretch of records no trusted seal covers is a violation of
// CheckJournalSigned, named by its first offset and its range.
func (a *auditor) endJournal(p int32) {
	sc := a.seals[p]
	if sc == nil {
		return
	}
	delete(a.seals, p)
	released, us, skipped := sc.End()
	a.judgeHeld(released)
	for _, u := range us {
		a.violate(CheckJournalSigned, Violation{Topic: a.in.Topics.Journal, Partition: p, Offset: u.From, Message: u.Error()})
	}
	if skipped > 0 {
		a.notef(noteRetention, "journal partition %d: %d record(s) up to its first transaction seal follow records retention deleted; that seal covers deleted records too, so they were not signature-checked", p, skipped)
	}
}

// markerEpoch reads an epoch marker's epoch as restore does.
func markerEpoch(r *kgo.Record) int64 { return wire.DecodeEpochMarker(r).Epoch }

// onceKey checks G2 for one record of a key: no in_progress after a final
// succeeded, failed or rejected record (unresolved may be reconciled, which
// starts a new attempt), and attempt numbers never go down.
func (a *auditor) onceKey(p int32, d *decoded, off int64, rec *schemas.Record, v Violation) {
	id := d.keyID
	ks, ok := a.keys.get(id)
	if !ok {
		a.nKeys++
	}
	was := ks.unresolved
	a.onceKeyState(&ks, p, off, rec, v)
	addPub(&ks, off, rec, d)
	switch {
	case ks.unresolved && !was:
		a.nUnresolved++
	case was && !ks.unresolved:
		a.nUnresolved--
	}
	a.keys.set(id, ks)
	if len(a.outQ) > 0 && len(a.outQ[p]) > 0 { // the first: no map lookup when nothing waits
		a.drainOut(p, false)
	}
}

// onceKeyState is onceKey on the key's state ks.
func (a *auditor) onceKeyState(ks *keyState, p int32, off int64, rec *schemas.Record, v Violation) {
	ks.unresolved = rec.Status == schemas.StatusUnresolved
	if rel := rec.Release; rel != nil {
		// An operator released the key (docs/events.md#release): the
		// next execution is new work, not a repeat — for a command after
		// the release only. A command consumed before it and consumed
		// again must not execute (decide.Seen).
		free := int64(-1)
		if rel.Offset != nil {
			free = *rel.Offset
		}
		ks.final, ks.hasFinal = finalRefOf(rec, off), true
		ks.final.freeAfter, ks.final.hasFree, ks.final.releaseAt = free, true, off
		return
	}
	switch rec.Status {
	case schemas.StatusSucceeded, schemas.StatusFailed, schemas.StatusRejected:
		ks.final, ks.hasFinal = finalRefOf(rec, off), true
		if rec.Status == schemas.StatusRejected && rec.Resolution == nil && rec.Error != nil && !decide.RejectionFinal(rec.Error.Code) {
			// Never started, and not final for the key: a later
			// command with it is new work (docs/guarantees.md#decision-table).
			ks.final.freeAfter, ks.final.hasFree = rec.Command.Offset, true
		}
	case schemas.StatusInProgress:
		if f := &ks.final; ks.hasFinal && f.hasFree && (f.freeAfter < 0 || rec.Command.Offset > f.freeAfter) {
			ks.hasFinal, ks.attempts = false, 0
		}
		if f := ks.final; ks.hasFinal && f.releaseAt >= 0 {
			ks.hasFinal = false
			v.Message = fmt.Sprintf("in_progress for the command at offset %d, which precedes the release at commands offset %d (journal offset %d) that freed the key: a command consumed before the release executed again",
				rec.Command.Offset, f.freeAfter, f.releaseAt)
			a.violate(CheckOncePerKey, v)
		}
		if f := ks.final; ks.hasFinal {
			ks.hasFinal = false // one report per re-execution, not per attempt
			gap, known := reexecutionGap(f, rec.StartedAt)
			if known && gap >= a.in.KeyMemory {
				a.notef(noteKeyMemory, "key %q (journal partition %d) executed again at offset %d, %s after its final record at offset %d: beyond key_memory %s, so forgotten by design (not checked)",
					rec.IdempotencyKey, p, off, gap.Round(time.Second), f.off, a.in.KeyMemory)
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

// intern returns the constant for a known status, so that what the
// audit keeps per key does not hold on to the decoded record's string.
func intern(s schemas.Status) schemas.Status {
	for _, c := range [...]schemas.Status{schemas.StatusInProgress, schemas.StatusSucceeded, schemas.StatusFailed,
		schemas.StatusUnresolved, schemas.StatusRejected, schemas.StatusHeld} {
		if s == c {
			return c
		}
	}
	return s
}

// finalRefOf is what onceKey remembers of final record rec at off.
func finalRefOf(rec *schemas.Record, off int64) finalRef {
	f := finalRef{status: intern(rec.Status), off: off, releaseAt: -1}
	if rec.FinishedAt != nil {
		f.finishedSec, f.finishedNsec, f.hasFinished = rec.FinishedAt.Unix(), int32(rec.FinishedAt.Nanosecond()), true
	}
	return f
}

// reexecutionGap is the time between a final record and a later start of
// the same key, when both records carry the times.
func reexecutionGap(f finalRef, started *time.Time) (time.Duration, bool) {
	if !f.hasFinished || started == nil {
		return 0, false
	}
	return started.Sub(f.finished()), true
}

// singleFlight checks G1 for one record of an entity: while one key of the
// entity is in_progress, no other key starts; and fencing tokens never go
// back (they strictly increase across keys; one key's retries may reuse its
// token).
func (a *auditor) singleFlight(id digest, off int64, rec *schemas.Record, v Violation) {
	es, ok := a.ents.get(id)
	if !ok {
		es = entityState{tokOff: -1}
	}
	a.singleFlightState(&es, off, rec, v)
	a.ents.set(id, es)
}

// singleFlightState is singleFlight on the entity's state es.
func (a *auditor) singleFlightState(es *entityState, off int64, rec *schemas.Record, v Violation) {
	if rec.Status != schemas.StatusInProgress {
		es.inflight = slices.DeleteFunc(es.inflight, func(k inflightKey) bool {
			if k.key != rec.IdempotencyKey {
				return false
			}
			if k.deadline != 0 && k.epoch < rec.Epoch {
				// A new owner settled it: the old owner's attempt may
				// run until its deadline, whatever the new one wrote.
				es.inherited = &inflightKey{key: k.key, off: k.off, deadline: k.deadline, epoch: k.epoch}
			}
			return true
		})
		if len(es.inflight) == 0 {
			es.inflight = nil // most entities are idle: keep no array
		}
		return
	}
	if h := es.inherited; h != nil && h.key != rec.IdempotencyKey {
		// A new owner waits for an inherited attempt's deadline (plus
		// --clock-drift, by its own clock) before it settles that key,
		// so the entity's next key starts after the deadline; one that
		// starts before it may overlap the replaced owner's attempt.
		es.inherited = nil
		if rec.StartedAt != nil && rec.Epoch > h.epoch && rec.StartedAt.UnixNano() < h.deadline {
			w := v
			w.Message = fmt.Sprintf("entity %q: key %q starts at %s under epoch %d, before the deadline %s of key %q's attempt under epoch %d (offset %d): the replaced owner's attempt may still have been running",
				rec.Entity, rec.IdempotencyKey, rec.StartedAt.UTC().Format(time.RFC3339Nano), rec.Epoch, time.Unix(0, h.deadline).UTC().Format(time.RFC3339Nano), h.key, h.epoch, h.off)
			a.violate(CheckSingleFlight, w)
		}
	}
	others := make([]inflightKey, 0, len(es.inflight))
	mine := -1
	for i, k := range es.inflight {
		if k.key == rec.IdempotencyKey {
			mine = i
			continue
		}
		others = append(others, k)
	}
	slices.SortFunc(others, func(x, y inflightKey) int { return cmp.Compare(x.key, y.key) })
	for _, k := range others {
		w := v
		w.Message = fmt.Sprintf("entity %q: key %q starts (in_progress) while key %q is in_progress since offset %d",
			rec.Entity, rec.IdempotencyKey, k.key, k.off)
		a.violate(CheckSingleFlight, w)
	}
	var deadline int64
	if rec.Deadline != nil {
		deadline = rec.Deadline.UnixNano()
	}
	if mine >= 0 {
		k := &es.inflight[mine]
		k.off, k.deadline, k.epoch = off, deadline, rec.Epoch
	} else {
		es.inflight = append(es.inflight, inflightKey{rec.IdempotencyKey, off, deadline, rec.Epoch})
	}
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
	var d decoded
	a.decode(r, &d)
	a.checkOutcome(r, &d)
}

// checkOutcome is outcome for a record decoded already.
func (a *auditor) checkOutcome(r *kgo.Record, d *decoded) {
	const check = CheckOutcomeIDs
	v := Violation{Topic: a.in.Topics.Outcomes, Partition: r.Partition, Offset: r.Offset, Key: string(r.Key)}
	o, err := &d.o, d.err
	if err != nil {
		v.Message = fmt.Sprintf("undecodable outcome event: %v", err)
		a.violate(check, v)
		return
	}
	c := causeAnswered
	if o.status == schemas.StatusSucceeded {
		c |= causeSucceeded
	}
	a.addCause(o.partition, d.causation, c)
	if !a.isChecked(o.partition) {
		return
	}
	a.counts.Outcomes++
	key, status, causation := o.key, o.status, o.causation
	v.Key = key
	if !o.idOK {
		basis := fmt.Sprintf("causation %q", causation)
		if o.decision != "" {
			basis = fmt.Sprintf("decision %q", o.decision)
		}
		v.Message = fmt.Sprintf("id %s is not the deterministic id %s of (key, status %s, %s)", o.id, o.wantID, status, basis)
		a.violate(check, v)
	}
	a.sameAnswer(o, d.answer, v)
	a.matchOutcome(r, d)
	id, tuple := d.id, d.tuple
	prev, dup := a.ids[id]
	if !dup && a.idStore != nil && a.err == nil {
		// First use in an outcome partition read before?
		if prev, dup, a.err = a.idStore.get(id); dup {
			a.ids[id] = prev
			a.grow(1)
		}
	}
	switch {
	case !dup:
		a.ids[id] = idSeen{tuple, src{r.Partition, r.Offset}}
		a.grow(1)
		if a.maxMem > 0 && len(a.ids) > a.maxMem {
			a.storeIDs()
		}
	case prev.tuple == tuple:
		a.counts.Republications++
	default:
		v.Message = fmt.Sprintf("id %s also names another (causation, status, key) at partition %d offset %d; here (causation %q, status %s, key %q)",
			o.id, prev.at.p, prev.at.off, causation, status, key)
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
func (a *auditor) sameAnswer(o *outcomeFacts, d digest, v Violation) {
	now := answer{status: intern(o.status), code: o.code, at: src{v.Partition, v.Offset}}
	prev, seen := a.answers.get(d)
	a.answers.set(d, now)
	if !seen || (prev.status == now.status && prev.code == now.code) ||
		prev.status == schemas.StatusUnresolved || prev.status == schemas.StatusHeld {
		return
	}
	v.Message = fmt.Sprintf("command %q answered %s %s at outcomes partition %d offset %d, then %s %s: a command consumed again must get its first answer",
		o.causation, prev.status, prev.code, prev.at.p, prev.at.off, now.status, now.code)
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
	var d decoded
	a.decode(r, &d)
	a.checkCommand(r, &d)
}

// checkCommand is command for a record decoded already.
func (a *auditor) checkCommand(r *kgo.Record, d *decoded) {
	if s, ok := sourceOf(r, schemas.HeaderForwardedFromPartition, schemas.HeaderForwardedFromOffset); ok {
		a.fwd[s] = struct{}{}
	}
	if !a.isChecked(r.Partition) {
		return
	}
	a.counts.Commands++
	here := src{r.Partition, r.Offset}
	cmd, err := &d.cmd, d.err
	n := a.in.CommandPartitions
	switch {
	case err != nil:
		if _, ok := a.dead[here]; ok {
			a.counts.Deadlettered++
			return
		}
		a.unanswered(here, string(r.Key), fmt.Sprintf("undecodable (%v) but has no copy on %s", err, a.in.Topics.Deadletter))
	case n > 0 && partitioner.ForEntity(cmd.Subject, n) != r.Partition:
		c := d.causation
		a.misrouted = append(a.misrouted, misrouted{at: here, key: string(r.Key), causation: c, answered: a.answered(r.Partition, c),
			want: fmt.Sprintf("misrouted (entity %q belongs on partition %d) but has no forwarded copy there, nor a deadletter copy and an outcome",
				cmd.Subject, partitioner.ForEntity(cmd.Subject, n))})
	case cmd.Type == schemas.TypeReconcile:
		// The reconciler's internal request: no outcome by design.
	case schemas.IsDecision(cmd.Type):
		a.decision(r, cmd)
		fallthrough
	default:
		c := d.causation
		if a.answered(r.Partition, c) {
			return
		}
		want := fmt.Sprintf("command %q (key %q) has no outcome with causationid %q", cmd.ID, cmd.IdempotencyKey, cmd.ID)
		if committed, has := a.in.Committed[here.p]; has && here.off < committed {
			// Judged in finish: an answer may still be read.
			a.deferred = append(a.deferred, deferredCmd{at: here, causation: c, key: string(r.Key), want: want})
			return
		}
		a.unanswered(here, string(r.Key), want)
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
	var says schemas.Decision
	_ = json.Unmarshal(cmd.Data, &says) // undecodable: decides nothing a record can name
	if cmd.Type != schemas.TypeResolve {
		says.As = "" // only a resolve decides a status
	}
	a.decisions[digestOf(cmd.ID)] = decisionSeen{signed: err == nil, says: decisionSays(cmd.Type, cmd.Subject, says.Key, says.As), notAfter: says.NotAfter}
	if err == nil {
		return
	}
	if f, _ := a.cause(r.Partition, digestOf(cmd.ID)); f&causeSucceeded == 0 {
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
	return parseSrc(ps, os)
}

// parseSrc reads a command's position from its partition and offset.
func parseSrc(ps, os string) (src, bool) {
	p, err1 := strconv.ParseInt(ps, 10, 32)
	o, err2 := strconv.ParseInt(os, 10, 64)
	if err1 != nil || err2 != nil {
		return src{}, false
	}
	return src{int32(p), o}, true
}

// claimOperator remembers rec, established by an operator, to be matched
// with its decision in finish (judgeClaims). Without control keys a
// decision's signature cannot be checked (a note says so), and a record
// written before resolutions named their decision (2026-12-01) names none.
func (a *auditor) claimOperator(rec *schemas.Record, v Violation) {
	if rec.Resolution == nil {
		return
	}
	a.claimDecision(rec, v, fmt.Sprintf("%s established by %s", rec.Status, rec.EstablishedBy), rec.Resolution, schemas.TypeResolve, string(rec.Status))
}

// claimDecisions remembers the operator decisions rec carries besides a
// resolution of its status: a release, which makes the key's next
// command new work, and an approval, which ran a held command. Either
// must name a signed decision of its kind for this key, as a resolution
// must, or a record could free a key or run a duplicate on nobody's word.
func (a *auditor) claimDecisions(rec *schemas.Record, v Violation) {
	if r := rec.Release; r != nil {
		a.claimDecision(rec, v, "released by an operator", r, schemas.TypeRelease, "")
	}
	if r := rec.Resolution; r != nil && r.As == "approved" {
		a.claimDecision(rec, v, "approved by an operator", r, schemas.TypeApprove, "")
	}
}

// claimDecision remembers that rec names, in res, a decision of type typ
// that decided its key of its entity (as its verdict for a resolve), to
// be judged in finish.
func (a *auditor) claimDecision(rec *schemas.Record, v Violation, claim string, res *schemas.Resolution, typ, as string) {
	id := res.DecisionID
	if a.in.ControlKeys == nil || id == "" {
		return
	}
	p := rec.Command.Partition
	if n := a.in.CommandPartitions; n > 0 {
		p = partitioner.ForEntity(rec.Entity, n)
	}
	a.claims = append(a.claims, operatorClaim{v: v, claim: claim, decision: id, at: res.At, want: decisionSays(typ, rec.Entity, rec.IdempotencyKey, as), p: p})
}

// notAfterSlack is how long after its not_after a decision may be
// recorded as applied: the executor checks not_after, then stamps the
// record a lookup later, on its own clock.
const notAfterSlack = time.Minute

// decisionSays is what a decision decided: its type, entity, key and, for
// a resolve, the status.
func decisionSays(typ, entity, key, as string) digest { return digestOf(typ, entity, key, as) }

// judgeClaims checks that every record established by an operator names
// a decision the commands topic holds, signed by a control key, that
// decided this key of this entity as this status: a status an operator
// did not decide is not established by an operator, whatever the journal
// says (docs/events.md#evidence).
func (a *auditor) judgeClaims() {
	noted := map[int32]bool{}
	for _, c := range a.claims {
		d, ok := a.decisions[digestOf(c.decision)]
		v := c.v
		switch {
		case !ok && a.in.CommandsStart[c.p] > 0:
			if noted[c.p] {
				continue
			}
			noted[c.p] = true
			a.notef(noteRetention, "commands partition %d starts at offset %d (retention): records established by an operator whose decision was deleted are not matched with it", c.p, a.in.CommandsStart[c.p])
			continue
		case !ok:
			v.Message = fmt.Sprintf("%s, but its decision %q is not on the commands topic", c.claim, c.decision)
		case !d.signed:
			v.Message = fmt.Sprintf("%s, but the signature of its decision %q does not verify", c.claim, c.decision)
		case d.says != c.want:
			v.Message = fmt.Sprintf("%s, but its decision %q decided another key, entity or status, or is another kind of decision", c.claim, c.decision)
		case !d.notAfter.IsZero() && c.at.Sub(d.notAfter) > notAfterSlack:
			v.Message = fmt.Sprintf("%s at %s, but its decision %q expired at %s (not_after): an executor of this build refuses it (an earlier build's does not)",
				c.claim, c.at.UTC().Format(time.RFC3339), c.decision, d.notAfter.UTC().Format(time.RFC3339))
		default:
			continue
		}
		a.violate(CheckEvidence, v)
	}
	a.claims = nil
}

// evidenceProblem says what rec's evidence lacks for the way its status
// claims to have been established (docs/events.md#evidence), or "" when
// nothing. An attempt or confirmation older than the record keeps
// (evidence_dropped) may be what is missing, so only the latest entries
// are required.
func evidenceProblem(rec *schemas.Record) string {
	var lastAttempt, lastConfirm *schemas.Evidence
	for i := range rec.Evidence {
		switch ev := &rec.Evidence[i]; ev.Kind {
		case schemas.EvidenceAttempt:
			lastAttempt = ev
		case schemas.EvidenceConfirm:
			lastConfirm = ev
		}
	}
	// Built only for a problem: most records have none.
	claim := func() string { return fmt.Sprintf("%s established by %s", rec.Status, rec.EstablishedBy) }
	// failed promises the effect did not happen: after an ambiguous
	// attempt only a confirmation that found it not done can promise that
	// (G3; idempotent_by_key re-executes but never clears the doubt), so
	// the executor's rules end such a key unresolved. Only an operator
	// may decide failed without that confirmation.
	if rec.Status == schemas.StatusFailed && rec.EstablishedBy != schemas.EstablishedByOperator {
		if n, ok := unconfirmedAmbiguous(rec.Evidence); ok {
			return fmt.Sprintf("%s, but attempt %d answered ambiguous and no confirmation found it not done: it may have taken effect", claim(), n)
		}
	}
	switch rec.EstablishedBy {
	case schemas.EstablishedByRule:
		return ""
	case schemas.EstablishedByOperator:
		if rec.Resolution == nil || rec.Resolution.As != rec.Status {
			return claim() + " without an operator's resolution as " + string(rec.Status)
		}
		return ""
	case schemas.EstablishedByAnswer:
		switch {
		case lastAttempt == nil:
			return claim() + " without an attempt's answer"
		case rec.Status == schemas.StatusSucceeded && lastAttempt.Answer != schemas.AnswerSucceeded:
			return fmt.Sprintf("%s, but the last attempt answered %s", claim(), lastAttempt.Answer)
		case rec.Status == schemas.StatusFailed && lastAttempt.Answer == schemas.AnswerSucceeded:
			return claim() + ", but the last attempt answered succeeded"
		}
		return ""
	case schemas.EstablishedByConfirmation, schemas.EstablishedByReconciler:
		if lastConfirm == nil {
			if rec.EstablishedBy == schemas.EstablishedByReconciler && lastAttempt != nil {
				return "" // re-executed without confirming (idempotent_by_key)
			}
			return claim() + " without a confirmation"
		}
		// The confirmation asks about an attempt whose answer was
		// ambiguous, or that never answered (its executor stopped).
		for _, ev := range rec.Evidence {
			if ev.Kind == schemas.EvidenceAttempt && ev.Attempt == lastConfirm.Attempt && ev.Answer != schemas.AnswerAmbiguous && ev.At.Before(lastConfirm.At) {
				return fmt.Sprintf("%s, but attempt %d answered %s: nothing to confirm", claim(), ev.Attempt, ev.Answer)
			}
		}
		switch {
		case rec.Status == schemas.StatusSucceeded && lastConfirm.Answer != schemas.AnswerFound && (lastAttempt == nil || lastAttempt.Answer != schemas.AnswerSucceeded):
			return fmt.Sprintf("%s, but the confirmation answered %s", claim(), lastConfirm.Answer)
		case rec.EstablishedBy == schemas.EstablishedByConfirmation && rec.Status == schemas.StatusUnresolved && lastConfirm.Answer != schemas.AnswerUnknown:
			return fmt.Sprintf("%s, but the confirmation answered %s", claim(), lastConfirm.Answer)
		}
		return ""
	}
	return fmt.Sprintf("established_by %q is not one of answer, confirmation, reconciler, operator, rule", rec.EstablishedBy)
}

// unconfirmedAmbiguous returns the first attempt in evs that answered
// ambiguous with no later confirmation of it that answered not_found. The
// evidence keeps its latest entries, so a confirmation is never dropped
// while the attempt it asked about is kept.
func unconfirmedAmbiguous(evs []schemas.Evidence) (int, bool) {
	for i, ev := range evs {
		if ev.Kind != schemas.EvidenceAttempt || ev.Answer != schemas.AnswerAmbiguous {
			continue
		}
		if !slices.ContainsFunc(evs[i+1:], func(c schemas.Evidence) bool {
			return c.Kind == schemas.EvidenceConfirm && c.Attempt == ev.Attempt && c.Answer == schemas.AnswerNotFound
		}) {
			return ev.Attempt, true
		}
	}
	return 0, false
}
