package audit

import (
	"bytes"
	"sync"

	"github.com/onceflight/onceflight/internal/wire"
	"github.com/onceflight/onceflight/schemas"
)

// recordHash is wire.RecordHash(raw) for the record rec decoded from
// raw, without canonicalizing raw when it does not need to (sealedHash).
func recordHash(rec *schemas.Record, raw []byte) (string, error) {
	if h, ok := sealedHash(rec, raw); ok {
		return h, nil
	}
	return wire.RecordHash(raw)
}

// sealedHash returns the hash of raw, the bytes rec was decoded from,
// when raw is exactly what wire.SealRecord writes for rec: the
// executor writes every record that way, so sealing the decoded record
// again and finding raw's bytes proves that raw is canonical and that its
// hash member is the hash of the rest, which is what RecordHash would
// compute. Re-encoding a decoded record costs a fraction of parsing,
// re-ordering and re-escaping raw, which was the largest single item of
// the audit's CPU. Anything else (another writer's member order,
// whitespace, a changed hash, members the decoder does not know) seals to
// other bytes: false, and recordHash hashes raw as before (FuzzRecordHash).
func sealedHash(rec *schemas.Record, raw []byte) (string, bool) {
	// Nesting deeper than the canonicalizer allows is an error of
	// RecordHash that the data member alone, canonicalized one level
	// higher by SealRecord, may not hit: leave such records, which
	// need hundreds of brackets, to RecordHash.
	if bytes.Count(raw, []byte("{"))+bytes.Count(raw, []byte("[")) >= maxFastNesting {
		return "", false
	}
	bp := sealScratch.Get().(*[]byte)
	b, h, ok := wire.IsSealed(*bp, rec, raw)
	if cap(b) <= maxScratch {
		*bp = b
		sealScratch.Put(bp)
	}
	// raw's hash member is the hash of its body; rec.Hash, decoded from
	// raw, is that member's value (compared without a copy).
	if !ok || rec.Hash != string(h) {
		return "", false
	}
	return rec.Hash, true
}

// sealScratch holds the buffers sealedHash encodes a record into, one per
// decoding worker at a time: a record's encoding is compared and dropped,
// so a buffer is reused for the next one instead of allocating its size
// (~1 KB) per journal record.
// A buffer grown past maxScratch by a large record is dropped.
var sealScratch = sync.Pool{New: func() any { return new([]byte) }}

const maxScratch = 64 << 10

// maxFastNesting bounds the brackets of a record sealedHash seals: well
// below the canonicalizer's nesting limit (512), so that a record sealed
// whole can never be one RecordHash refuses as too deep.
const maxFastNesting = 256
