package audit

import (
	"encoding/hex"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/onceflight/onceflight/internal/decide"
	"github.com/onceflight/onceflight/schemas"
)

// outcomes_match: every outcome event states what the journal states.
//
// The executor publishes a journal record's bytes as its outcome's data
// (docs/events.md#replays): the record of a new execution in the
// transaction that journals it, and for a repeat the key's record as it
// is at that point, byte for byte. So an outcome whose record has a hash
// claims to be a journal record of its partition (the entity's), and is
// judged against the journal by that hash:
//
//   - its contents hash to its hash (or its bytes are a journal record's),
//     so the hash stands for every member: status, result, error, data;
//   - the journal partition holds a record of the key with that hash;
//   - that record was the key's current one when the outcome was
//     published: no later record of the key (a settlement, a release, a
//     new execution after a release) was journaled before it. "Before"
//     is the journal order: every outcome carrying a record at journal
//     offset j was published after j was written, so the outcomes of a
//     partition read so far show the journal written at least up to the
//     highest such offset (the watermark), and the key's current record
//     at an outcome is its latest record at or below it. The executor
//     writes a partition's journal records and outcomes in the same
//     transactions, in order, so a record below the watermark was
//     visible to the command the outcome answers;
//   - the event's type, subject and idempotencykey restate the record's
//     status, entity and key.
//
// An outcome whose record has no hash was never journaled by design: a
// rejection that keeps the key's record (idempotency_key_reused,
// key_expired), the too_large answer of a command too large to forward
// and the invalid_command answer of an undecodable one (both on the
// deadletter topic, which is checked), and an executor_error answered
// without overwriting the key's record. Anything else without a hash is
// a violation. An outcome whose record retention deleted from the journal
// (the partition starts above 0 and the record is not found) is counted
// and noted, not judged.
//
// Memory: per key, the hash digest, offset and status of each of its
// records but in_progress ones (pubRec, 32 bytes, usually one); per
// partition, a watermark. Run reads a partition's journal and outcomes
// together: an outcome whose record has not been read yet waits in a
// queue (outQueued), and every outcome of the partition after it, so
// that the watermark is the same whatever the interleaving; in a healthy
// history that is the few outcomes a fetch of outcomes runs ahead of the
// journal. The queue is judged as the partition ends.

// pubRec is what outcomes_match keeps of one of a key's journal records
// that an outcome may carry (every status but in_progress).
type pubRec struct {
	hash   digest
	off    int64
	status uint8 // statusCode
}

// statuses are the statuses pubRec codes; 0: another.
var statuses = [...]schemas.Status{"", schemas.StatusInProgress, schemas.StatusSucceeded, schemas.StatusFailed,
	schemas.StatusUnresolved, schemas.StatusRejected, schemas.StatusHeld}

func statusCode(s schemas.Status) uint8 {
	for i, c := range statuses {
		if i > 0 && s == c {
			return uint8(i)
		}
	}
	return 0
}

func statusOf(c uint8) schemas.Status {
	if int(c) < len(statuses) && c > 0 {
		return statuses[c]
	}
	return "(another status)"
}

// outQueued is an outcome waiting for its record to be read.
type outQueued struct {
	keyID, hash digest
	actual      digest // what its contents hash to, when !hashOK
	off         int64
	ts          time.Time
	key         string
	status      schemas.Status
	hashOK      bool
}

// showHash names a hash digest in messages.
func showHash(d digest) string { return "sha256:" + hex.EncodeToString(d[:8]) + "…" }

// addPub records journal record rec at off (decoded d) in its key's
// state ks for outcomes_match: called in journal order. A record with a
// release gets a second entry (statusUnreleased): what it hashes to
// without its release, which is what a command before the release,
// consumed again, is answered with (decide.Named drops the release).
func addPub(ks *keyState, off int64, rec *schemas.Record, d *decoded) {
	if rec.Status == schemas.StatusInProgress {
		return
	}
	ks.pubs = append(ks.pubs, pubRec{hash: d.recHash, off: off, status: statusCode(rec.Status)})
	if d.hasUnreleased {
		ks.pubs = append(ks.pubs, pubRec{hash: d.unreleased, off: off, status: statusUnreleased})
	}
}

// statusUnreleased marks a pubRec that is the record before it without
// its release.
const statusUnreleased = 255

// matchOutcome runs outcomes_match on outcome r (decoded d), in offset
// order within its partition.
func (a *auditor) matchOutcome(r *kgo.Record, d *decoded) {
	p := r.Partition
	if !a.isChecked(p) {
		return
	}
	o, x := &d.o, &d.x
	v := Violation{Topic: a.in.Topics.Outcomes, Partition: p, Offset: r.Offset, Key: o.key}
	if x.attr != "" {
		w := v
		w.Message = "the event says " + x.attr
		a.violate(CheckOutcomesMatch, w)
	}
	if !x.journaled {
		a.unjournaled(o, x, v)
		return
	}
	q := outQueued{keyID: d.keyID, hash: x.hash, actual: x.actual, off: r.Offset, ts: r.Timestamp, key: o.key, status: o.status, hashOK: x.hashOK}
	if len(a.outQ[p]) == 0 && a.tryMatch(p, &q, false) {
		return
	}
	a.outQ[p] = append(a.outQ[p], q)
}

// tryMatch judges queued outcome q of partition p if its record was read
// (or cannot be: the journal was read whole, or retention deleted it),
// and reports whether it did.
func (a *auditor) tryMatch(p int32, q *outQueued, ended bool) bool {
	ks, ok := a.keys.get(q.keyID)
	i := -1
	if ok {
		i = slices.IndexFunc(ks.pubs, func(x pubRec) bool { return x.hash == q.hash && x.status != statusUnreleased })
	}
	if i >= 0 {
		a.judgeMatch(p, q, ks.pubs, i)
		return true
	}
	cs := a.chains[p]
	past := a.in.JournalStart[p] > 0 && cs != nil && q.ts.Before(cs.firstTS)
	if !ended && !a.journalsDone && !past {
		return false
	}
	a.unmatched(p, q, ks.pubs)
	return true
}

// judgeMatch judges outcome q, whose record is pubs[i] of its key.
func (a *auditor) judgeMatch(p int32, q *outQueued, pubs []pubRec, i int) {
	w := max(a.outW[p], pubs[i].off)
	a.outW[p] = w
	v := Violation{Topic: a.in.Topics.Outcomes, Partition: p, Offset: q.off, Key: q.key}
	c := i
	for j := i + 1; j < len(pubs) && pubs[j].off <= w; j++ {
		if pubs[j].status != statusUnreleased {
			c = j
		}
	}
	// The record of a release without it: what a command before the
	// release, consumed again, is answered with.
	unreleased := i+1 < len(pubs) && pubs[i+1].status == statusUnreleased && pubs[i+1].hash == q.actual
	switch {
	case !q.hashOK && !unreleased:
		v.Message = fmt.Sprintf("the outcome says %s with the hash of the key's journal record at offset %d, which says %s, but its contents do not hash to it: the outcome's record was changed",
			q.status, pubs[i].off, statusOf(pubs[i].status))
	case c != i:
		v.Message = fmt.Sprintf("the outcome carries the key's journal record at offset %d (%s), but the key's current record was then the one at offset %d (%s), journaled before an outcome published earlier: a command is answered with its key's current record",
			pubs[i].off, statusOf(pubs[i].status), pubs[c].off, statusOf(pubs[c].status))
	default:
		return
	}
	a.violate(CheckOutcomesMatch, v)
}

// unmatched judges outcome q, whose record is not on journal partition
// p: a violation, or, when retention deleted the start of the partition,
// counted and noted.
func (a *auditor) unmatched(p int32, q *outQueued, pubs []pubRec) {
	if start := a.in.JournalStart[p]; start > 0 {
		a.counts.OutcomesPastRetention++
		if !a.retentionNoted[p] {
			a.retentionNoted[p] = true
			a.notef(noteRetention, "journal partition %d starts at offset %d (retention): outcomes whose record is not in it were counted (outcomes_past_retention), not compared with the journal", p, start)
		}
		return
	}
	journal := "the journal has no record of the key" // but in_progress ones, which pubs leaves out
	if len(pubs) > 0 {
		c := pubs[len(pubs)-1]
		if c.status == statusUnreleased {
			c = pubs[len(pubs)-2]
		}
		journal = fmt.Sprintf("the journal's latest record of the key (offset %d) says %s", c.off, statusOf(c.status))
	}
	a.violate(CheckOutcomesMatch, Violation{Topic: a.in.Topics.Outcomes, Partition: p, Offset: q.off, Key: q.key,
		Message: fmt.Sprintf("the outcome says %s with a record (hash %s) that journal partition %d does not hold; %s", q.status, showHash(q.hash), p, journal)})
}

// drainOut judges the queued outcomes of partition p, in order, as far
// as their records have been read (all of them when ended).
func (a *auditor) drainOut(p int32, ended bool) {
	qs := a.outQ[p]
	n := 0
	for n < len(qs) && a.tryMatch(p, &qs[n], ended) {
		n++
	}
	if n == len(qs) {
		delete(a.outQ, p)
		return
	}
	clear(qs[:n])
	a.outQ[p] = qs[n:]
}

// endOutcomes judges every queued outcome: the journal partitions they
// are on are read.
func (a *auditor) endOutcomes() {
	for _, p := range slices.Sorted(maps.Keys(a.outQ)) {
		a.drainOut(p, true)
	}
	clear(a.outW)
}

// unjournaled judges an outcome whose record has no hash: only the
// answers the executor gives without a journal record may lack one.
func (a *auditor) unjournaled(o *outcomeFacts, x *outcomeMatch, v Violation) {
	ok := true
	switch {
	case o.status == schemas.StatusRejected && (o.code == schemas.CodeKeyReused || o.code == schemas.CodeKeyExpired):
		// The key's record belongs to another command, or retention
		// dropped its result: the rejection does not overwrite it.
	case o.status == schemas.StatusUnresolved && o.code == decide.CodeExecutorError:
		// A panic answered without overwriting the key's record.
	case o.status == schemas.StatusRejected && o.code == schemas.CodeTooLarge:
		// A misrouted command too large to forward: deadlettered by
		// reference.
		if _, dead := a.dead[src{o.partition, x.cmdOff}]; !dead {
			v.Message = fmt.Sprintf("the outcome says rejected too_large without a journal record, but the command at commands partition %d offset %d it answers has no deadletter copy", o.partition, x.cmdOff)
			ok = false
		}
	case o.status == schemas.StatusRejected && o.code == schemas.CodeInvalidCommand && strings.HasPrefix(o.key, "invalid/"):
		// An undecodable command: its causation names where it was read.
		s, named := undecodableSource(o.causation, a.in.Topics.Commands)
		if _, dead := a.dead[s]; !named || !dead {
			v.Message = fmt.Sprintf("the outcome says rejected invalid_command for the undecodable command %q, which has no deadletter copy", o.causation)
			ok = false
		}
	default:
		code := o.code
		if code == "" {
			code = "(no error)"
		}
		v.Message = fmt.Sprintf("the outcome says %s %s with a record that has no hash, so was never journaled: only idempotency_key_reused, key_expired, too_large and invalid_command rejections and executor_error are answered without a journal record",
			o.status, code)
		ok = false
	}
	if !ok {
		a.violate(CheckOutcomesMatch, v)
		return
	}
	a.counts.UnjournaledOutcomes++
}

// undecodableSource reads "topic/partition/offset", the command id the
// executor gives an undecodable command of topic.
func undecodableSource(ref, topic string) (src, bool) {
	rest, ok := strings.CutPrefix(ref, topic+"/")
	if !ok {
		return src{}, false
	}
	ps, os, ok := strings.Cut(rest, "/")
	if !ok {
		return src{}, false
	}
	return parseSrc(ps, os)
}
