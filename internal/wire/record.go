package wire

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/onceflight/onceflight/internal/jcs"
	"github.com/onceflight/onceflight/schemas"
)

// A record is encoded once, directly in its RFC 8785 (JCS) canonical form:
// those bytes are the journal value, the Pebble value and the outcome
// event's data, and the record's hash is SHA-256 over the same bytes
// without the "hash" member. Nothing decodes a record to hash it, and any
// JCS library can verify a hash from the journal alone (RecordHash).
//
// The encoder writes the members of Record in JCS key order by hand: it is
// the hot path of the executor (reflection-based encoding/json and the
// canonicalization of its output were most of the CPU of a command).

// appendRecordJSON appends rec as JCS JSON, hash included as rec.Hash says.
func appendRecordJSON(dst []byte, rec *schemas.Record) ([]byte, error) {
	out, _, err := appendRecord(dst, rec, true)
	return out, err
}

// MarshalRecord encodes a record as the journal value and the outcome
// event's data: its RFC 8785 canonical JSON (appendRecordJSON), hash included as
// rec.Hash says. Strings are not HTML-escaped, so HTML-heavy data or results
// do not grow 6× on their way to the journal (issue 7).
func MarshalRecord(rec schemas.Record) ([]byte, error) {
	return appendRecordJSON(nil, &rec)
}

// SealRecord computes rec's hash over its contents (prev_hash included, so
// the hash chains), stores it in rec.Hash, and returns the record's bytes.
func SealRecord(rec *schemas.Record) ([]byte, error) {
	// One buffer for the body and, after hashing it, the hash member
	// spliced in place: sized so that neither the encoder nor the splice
	// grows it for a record of the usual shape (the executor seals one per
	// answer; a second buffer and the growths were a fifth of its
	// allocations).
	return appendSealed(make([]byte, 0, sealedCap(rec)), rec)
}

// sealedCap is room for rec sealed: sealedSize and its hash member.
func sealedCap(rec *schemas.Record) int {
	return sealedSize(rec) + len(hashMember) + hashLen + 1
}

const (
	hashMember = `,"hash":"` // + hashLen bytes of "sha256:<hex>" + `"`
	hashLen    = 7 + 64
)

// appendSealed appends rec sealed (SealRecord) to dst: the hash covers
// the record's bytes only, whatever dst held before them.
func appendSealed(dst []byte, rec *schemas.Record) ([]byte, error) {
	start := len(dst)
	body, at, err := appendRecord(dst, rec, false)
	if err != nil {
		return nil, err
	}
	sum := sha256.Sum256(body[start:])
	var h [hashLen]byte
	copy(h[:], "sha256:")
	hex.Encode(h[7:], sum[:])
	rec.Hash = string(h[:])
	n := len(hashMember) + hashLen + 1
	body = slices.Grow(body, n)[:len(body)+n]
	copy(body[at+n:], body[at:len(body)-n])
	copy(body[at:], hashMember)
	copy(body[at+len(hashMember):], h[:])
	body[at+n-1] = '"'
	return body, nil
}

// sealedSize is a close upper estimate of rec's encoded size without the
// hash member: the sealed bytes are kept (staged, then in Pebble's batch)
// until the transaction commits, so the buffer should neither grow nor
// carry much slack.
func sealedSize(rec *schemas.Record) int {
	n := 640 + len(rec.IdempotencyKey) + len(rec.Entity) + len(rec.Action) + len(rec.Fingerprint) +
		len(rec.Executor) + len(rec.TraceParent) + len(rec.UniqueKey) + len(rec.PrevHash) +
		len(rec.Command.ID) + len(rec.Command.Source) + len(rec.Data) + len(rec.Result)
	if rec.Error != nil {
		n += 64 + len(rec.Error.Message)
	}
	for _, r := range []*schemas.Resolution{rec.Resolution, rec.Release} {
		if r != nil {
			n += 256 + len(r.Reason) + len(r.By)
		}
	}
	for _, ev := range rec.Evidence {
		n += 160 + len(ev.Detail) + len(ev.By)
	}
	return n
}

// RecordHash is what the hash of the record whose JSON is raw must be:
// "sha256:" + hex SHA-256 of the RFC 8785 canonical form of raw without
// its top-level "hash" member. An auditor can compute it with any JCS
// library; a duplicate key inside data or result keeps its last value.
func RecordHash(raw []byte) (string, error) {
	canon, err := jcs.AppendCanonical(make([]byte, 0, len(raw)), raw, jcs.Mode{JCS: true, DropHash: true})
	if err != nil {
		return "", fmt.Errorf("canonicalize record: %w", err)
	}
	sum := sha256.Sum256(canon)
	return "sha256:" + hex.EncodeToString(sum[:]), nil
}

// appendRecord writes rec's members in JCS order. With withHash false the
// "hash" member is left out and hashAt is where it belongs.
func appendRecord(b []byte, rec *schemas.Record, withHash bool) (out []byte, hashAt int, err error) {
	b = append(b, `{"action":`...)
	b = jcs.AppendString(b, rec.Action)
	b = append(b, `,"attempts":`...)
	b = appendJCSInt(b, int64(rec.Attempts))
	b = append(b, `,"command":{"id":`...)
	b = jcs.AppendString(b, rec.Command.ID)
	b = append(b, `,"offset":`...)
	b = appendJCSInt(b, rec.Command.Offset)
	b = append(b, `,"partition":`...)
	b = appendJCSInt(b, int64(rec.Command.Partition))
	b = append(b, `,"source":`...)
	b = jcs.AppendString(b, rec.Command.Source)
	b = append(b, '}')
	if len(rec.Data) > 0 {
		b = append(b, `,"data":`...)
		if b, err = appendJCS(b, rec.Data); err != nil {
			return nil, 0, fmt.Errorf("encode record %q: data: %w", rec.IdempotencyKey, err)
		}
	}
	if rec.Deadline != nil {
		if b, err = appendTimeMember(b, `,"deadline":`, *rec.Deadline); err != nil {
			return nil, 0, err
		}
	}
	b = append(b, `,"entity":`...)
	b = jcs.AppendString(b, rec.Entity)
	b = append(b, `,"entity_version":`...)
	b = appendJCSInt(b, rec.EntityVersion)
	b = append(b, `,"epoch":`...)
	b = appendJCSInt(b, rec.Epoch)
	b = append(b, `,"error":`...)
	if rec.Error == nil {
		b = append(b, "null"...)
	} else {
		b = append(b, `{"code":`...)
		b = jcs.AppendString(b, rec.Error.Code)
		b = append(b, `,"message":`...)
		b = jcs.AppendString(b, rec.Error.Message)
		b = append(b, '}')
	}
	if rec.EstablishedBy != "" {
		b = append(b, `,"established_by":`...)
		b = jcs.AppendString(b, rec.EstablishedBy)
	}
	if len(rec.Evidence) > 0 {
		b = append(b, `,"evidence":[`...)
		for i := range rec.Evidence {
			if i > 0 {
				b = append(b, ',')
			}
			if b, err = appendEvidence(b, &rec.Evidence[i]); err != nil {
				return nil, 0, err
			}
		}
		b = append(b, ']')
	}
	if rec.EvidenceDropped != 0 {
		b = append(b, `,"evidence_dropped":`...)
		b = appendJCSInt(b, int64(rec.EvidenceDropped))
	}
	b = append(b, `,"executor":`...)
	b = jcs.AppendString(b, rec.Executor)
	if rec.FencingToken != 0 {
		b = append(b, `,"fencing_token":`...)
		b = appendJCSInt(b, rec.FencingToken)
	}
	b = append(b, `,"fingerprint":`...)
	b = jcs.AppendString(b, rec.Fingerprint)
	if rec.FinishedAt != nil {
		if b, err = appendTimeMember(b, `,"finished_at":`, *rec.FinishedAt); err != nil {
			return nil, 0, err
		}
	}
	hashAt = len(b)
	if withHash {
		b = append(b, `,"hash":`...)
		b = jcs.AppendString(b, rec.Hash)
	}
	b = append(b, `,"idempotency_key":`...)
	b = jcs.AppendString(b, rec.IdempotencyKey)
	b = append(b, `,"prev_hash":`...)
	b = jcs.AppendString(b, rec.PrevHash)
	if r := rec.Release; r != nil {
		if b, err = appendResolution(b, `,"release":{"as":`, r); err != nil {
			return nil, 0, err
		}
	}
	if r := rec.Resolution; r != nil {
		if b, err = appendResolution(b, `,"resolution":{"as":`, r); err != nil {
			return nil, 0, err
		}
	}
	b = append(b, `,"result":`...)
	if len(rec.Result) == 0 {
		b = append(b, "null"...)
	} else if b, err = appendJCS(b, rec.Result); err != nil {
		return nil, 0, fmt.Errorf("encode record %q: result: %w", rec.IdempotencyKey, err)
	}
	if rec.StartedAt != nil {
		if b, err = appendTimeMember(b, `,"started_at":`, *rec.StartedAt); err != nil {
			return nil, 0, err
		}
	}
	b = append(b, `,"status":`...)
	b = jcs.AppendString(b, string(rec.Status))
	if rec.TraceParent != "" {
		b = append(b, `,"traceparent":`...)
		b = jcs.AppendString(b, rec.TraceParent)
	}
	if rec.UniqueKey != "" {
		b = append(b, `,"unique_key":`...)
		b = jcs.AppendString(b, rec.UniqueKey)
	}
	return append(b, '}'), hashAt, nil
}

// appendJCS writes the JSON text raw in its RFC 8785 form: as it is when it
// is in that form already (jcs.IsCanonical), else canonicalized.
func appendJCS(b, raw []byte) ([]byte, error) {
	if jcs.IsCanonical(raw) {
		return append(b, raw...), nil
	}
	return jcs.AppendCanonical(b, raw, jcs.Mode{JCS: true})
}

// appendResolution writes an operator decision's members (JCS order) after
// head, which opens the object up to its "as" member.
func appendResolution(b []byte, head string, r *schemas.Resolution) ([]byte, error) {
	b = append(b, head...)
	b = jcs.AppendString(b, string(r.As))
	b, err := appendTimeMember(b, `,"at":`, r.At)
	if err != nil {
		return nil, err
	}
	b = append(b, `,"by":`...)
	b = jcs.AppendString(b, r.By)
	if r.DecisionID != "" {
		b = append(b, `,"decision_id":`...)
		b = jcs.AppendString(b, r.DecisionID)
	}
	if r.Offset != nil {
		b = append(b, `,"offset":`...)
		b = appendJCSInt(b, *r.Offset)
	}
	b = append(b, `,"reason":`...)
	b = jcs.AppendString(b, r.Reason)
	return append(b, '}'), nil
}

// appendEvidence writes one evidence entry's members in JCS order.
func appendEvidence(b []byte, ev *schemas.Evidence) ([]byte, error) {
	b = append(b, `{"answer":`...)
	b = jcs.AppendString(b, ev.Answer)
	b, err := appendTimeMember(b, `,"at":`, ev.At)
	if err != nil {
		return nil, err
	}
	b = append(b, `,"attempt":`...)
	b = appendJCSInt(b, int64(ev.Attempt))
	if ev.By != "" {
		b = append(b, `,"by":`...)
		b = jcs.AppendString(b, ev.By)
	}
	if ev.Detail != "" {
		b = append(b, `,"detail":`...)
		b = jcs.AppendString(b, ev.Detail)
	}
	if ev.EndedAt != nil {
		if b, err = appendTimeMember(b, `,"ended_at":`, *ev.EndedAt); err != nil {
			return nil, err
		}
	}
	if ev.FencingToken != 0 {
		b = append(b, `,"fencing_token":`...)
		b = appendJCSInt(b, ev.FencingToken)
	}
	b = append(b, `,"kind":`...)
	b = jcs.AppendString(b, ev.Kind)
	return append(b, '}'), nil
}

// appendJCSInt writes an integer; beyond 2^53, where JSON numbers stop
// being exact doubles, as the double JCS makes of it.
func appendJCSInt(b []byte, v int64) []byte {
	const exact = 1 << 53
	if v > exact || v < -exact {
		return jcs.AppendES6Number(b, float64(v))
	}
	return strconv.AppendInt(b, v, 10)
}

// appendTimeMember writes name and t as encoding/json writes a time.Time
// (RFC 3339 with nanoseconds), refusing the years it refuses.
func appendTimeMember(b []byte, name string, t time.Time) ([]byte, error) {
	if y := t.Year(); y < 0 || y > 9999 {
		return nil, fmt.Errorf("encode record: time %v: year outside [0,9999]", t)
	}
	b = append(b, name...)
	b = append(b, '"')
	b = appendTime(b, t)
	return append(b, '"'), nil
}

// headerContentType is the CloudEvents Kafka binding's content-type header,
// which marks a structured-mode event (schemas reads it by the same name).
const headerContentType = "content-type"

// EncodeOutcomeData is EncodeOutcome for a record whose bytes (appendRecordJSON
// or SealRecord) are already at hand: they become the event's data as they
// are, and the CloudEvent around them is written directly (structured mode),
// as the sdk-go writer would write it, without a second encoding.
func EncodeOutcomeData(rec *schemas.Record, data []byte, causationID string, replayed bool) *kgo.Record {
	v := make([]byte, 0, len(data)+outcomeHeadSize(rec, causationID))
	v = appendOutcomeHead(v, rec, causationID, replayed)
	v = append(v, data...)
	return outcomeRecord(rec, append(v, '}'))
}

// OutcomeHead starts rec's outcome event for SealOutcome: the
// CloudEvent up to its data, in a buffer with room for rec sealed after
// it and for the event's key. It reads none of what sealing sets (epoch,
// prev_hash, hash), so the executor writes it before it takes the lock
// that orders the hash chain, and only the seal is done under it.
func OutcomeHead(rec *schemas.Record, causationID string, replayed bool) []byte {
	return AppendOutcomeHead(make([]byte, 0, OutcomeSize(rec, causationID)), rec, causationID, replayed)
}

// OutcomeSize is the room OutcomeHead gives an outcome event: its head,
// the record sealed (SealOutcome) and the event's key (OutcomeRecord)
// fit in it without growing it.
func OutcomeSize(rec *schemas.Record, causationID string) int {
	// prev_hash is set after the head is written, when the record is
	// chained: room for one is added.
	return outcomeHeadSize(rec, causationID) + sealedCap(rec) + hashLen + len(rec.Entity)
}

// AppendOutcomeHead is OutcomeHead into dst, for a caller that reuses
// event buffers: dst should be empty with room for OutcomeSize bytes.
func AppendOutcomeHead(dst []byte, rec *schemas.Record, causationID string, replayed bool) []byte {
	return appendOutcomeHead(dst, rec, causationID, replayed)
}

// SealOutcome is SealRecord and EncodeOutcomeData in one buffer, for a
// record that is its own outcome's data (a new key's answer): the record
// is sealed straight into its outcome event, after head (OutcomeHead of
// rec), instead of being copied there (a ~0.7 KiB copy and allocation per
// new key). raw is the sealed record, a slice of event capped at its end;
// event is the outcome event's value for OutcomeRecord. Both hold the
// same bytes as SealRecord and EncodeOutcomeData would, the event's time
// aside when rec has no FinishedAt (now, read by OutcomeHead).
func SealOutcome(head []byte, rec *schemas.Record) (event, raw []byte, err error) {
	start := len(head)
	v, err := appendSealed(head, rec)
	if err != nil {
		return nil, nil, err
	}
	raw = v[start:len(v):len(v)]
	return append(v, '}'), raw, nil
}

// OutcomeRecord is the Kafka record of the outcome event SealOutcome
// wrote for rec. Each call builds a new record around the same bytes (a
// transaction retried after an abort produces records of its own).
func OutcomeRecord(rec *schemas.Record, event []byte) *kgo.Record {
	return outcomeRecord(rec, event)
}

// OutcomeMessage is room for an outcome event's Kafka record, for a
// caller that reuses it (OutcomeRecordIn) once the producer is done with
// the record.
type OutcomeMessage = outcomeMessage

// OutcomeRecordIn is OutcomeRecord built in m: every field of m's record
// is set anew.
func OutcomeRecordIn(m *OutcomeMessage, rec *schemas.Record, event []byte) *kgo.Record {
	return outcomeRecordIn(m, rec, event)
}

// outcomeHeadSize is room for the CloudEvent around a record's data and
// its closing brace.
func outcomeHeadSize(rec *schemas.Record, causationID string) int {
	return 384 + len(rec.IdempotencyKey) + len(causationID) + len(rec.Entity) + len(rec.TraceParent)
}

// appendOutcomeHead writes rec's outcome event up to its data member's
// value: time is rec.FinishedAt, or now for records without one.
func appendOutcomeHead(v []byte, rec *schemas.Record, causationID string, replayed bool) []byte {
	t := time.Now()
	if rec.FinishedAt != nil {
		t = *rec.FinishedAt
	}
	// The id is a UUID (hex digits and dashes): its JSON string is the
	// id between quotes.
	v = append(v, `{"specversion":"1.0","id":"`...)
	v = appendOutcomeIDOf(v, rec, causationID)
	v = append(v, `","source":`...)
	v = jcs.AppendString(v, schemas.OutcomeSource)
	v = append(v, `,"type":`...)
	v = jcs.AppendString(v, schemas.OutcomeTypePrefix+string(rec.Status))
	if rec.Entity != "" {
		v = append(v, `,"subject":`...)
		v = jcs.AppendString(v, rec.Entity)
	}
	v = append(v, `,"datacontenttype":"application/json","time":"`...)
	v = appendTime(v, t.UTC())
	v = append(v, '"')
	if causationID != "" {
		v = append(v, `,"`+schemas.ExtCausationID+`":`...)
		v = jcs.AppendString(v, causationID)
	}
	if rec.IdempotencyKey != "" {
		v = append(v, `,"`+schemas.ExtIdempotencyKey+`":`...)
		v = jcs.AppendString(v, rec.IdempotencyKey)
	}
	v = append(v, `,"`+schemas.ExtReplayed+`":`...)
	v = strconv.AppendBool(v, replayed)
	if rec.TraceParent != "" {
		v = append(v, `,"`+schemas.ExtTraceParent+`":`...)
		v = jcs.AppendString(v, rec.TraceParent)
	}
	return append(v, `,"data":`...)
}

// contentTypeEvent is the content-type header's value of every outcome
// event, shared by all of them: nothing writes into a header's value.
var contentTypeEvent = []byte(event.ApplicationCloudEventsJSON)

// outcomeMessage is an outcome event's Kafka record with room for its one
// header: one heap object for both.
type outcomeMessage struct {
	r kgo.Record
	h [1]kgo.RecordHeader
}

// outcomeRecord is the Kafka record of an outcome event whose value is v.
// Every repeat's answer is one: the record and its header are one
// object, the header's value is shared, and the key is written in v's
// spare room when it fits there (v's size is an upper estimate), each
// slice capped so that an append to one cannot write into the other —
// three heap objects fewer per outcome.
func outcomeRecord(rec *schemas.Record, v []byte) *kgo.Record {
	return outcomeRecordIn(&outcomeMessage{}, rec, v)
}

func outcomeRecordIn(m *outcomeMessage, rec *schemas.Record, v []byte) *kgo.Record {
	*m = outcomeMessage{}
	m.h[0] = kgo.RecordHeader{Key: headerContentType, Value: contentTypeEvent}
	m.r.Headers = m.h[:]
	n := len(v)
	m.r.Value = v[:n:n]
	if rec.Entity != "" {
		if cap(v)-n >= len(rec.Entity) {
			m.r.Key = append(v[n:n], rec.Entity...)
			m.r.Key = m.r.Key[:len(m.r.Key):len(m.r.Key)]
		} else {
			m.r.Key = []byte(rec.Entity)
		}
	}
	return &m.r
}

// MaxEvidence is how many evidence entries a record keeps (the latest);
// older ones are counted in EvidenceDropped, so a record stays small.
const MaxEvidence = 16

// MaxEvidenceDetail bounds an entry's detail, in bytes.
const MaxEvidenceDetail = 200

// AddEvidence appends ev to rec's evidence, keeping the latest
// MaxEvidence entries and counting the ones it drops.
func AddEvidence(rec *schemas.Record, ev schemas.Evidence) {
	ev.Detail = TruncateDetail(ev.Detail)
	rec.Evidence = append(rec.Evidence, ev)
	if over := len(rec.Evidence) - MaxEvidence; over > 0 {
		rec.Evidence = append([]schemas.Evidence(nil), rec.Evidence[over:]...)
		rec.EvidenceDropped += over
	}
}

// TruncateDetail cuts s to MaxEvidenceDetail bytes at a rune boundary.
func TruncateDetail(s string) string {
	if len(s) <= MaxEvidenceDetail {
		return s
	}
	return truncUTF8(s, MaxEvidenceDetail-len("…")) + "…"
}
