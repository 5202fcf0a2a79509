package audit

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"

	"github.com/onceflight/onceflight/schemas"
)

// recordMemo keeps what an outcome event needs of the journal records
// decoded lately, found by a tag of their exact bytes. The executor
// publishes a journal record's bytes as its outcome's data (a repeat's
// outcome too), so most outcomes carry a record the audit has decoded
// from the journal; one found here takes that record's fields instead of
// being decoded again (BENCHMARKS.md "Round 14 (audit)" and "Round 15
// (audit)": decoding outcomes' records was the largest item of the
// audit's CPU).
//
// # Why a tag stands for the bytes
//
// A record's tag is its GMAC: the 128-bit tag AES-GCM computes over the
// bytes as additional data, under a key drawn from crypto/rand when the
// memo is made and a fixed nonce. Two tags under one key and nonce are
// equal exactly when GHASH, a polynomial in the secret H = AES_K(0) whose
// coefficients are the bytes' 16-byte blocks and length, agrees on them.
// For two different byte strings of at most L blocks the difference is
// a non-zero polynomial of degree at most L+1, which has at most L+1
// roots: they share a tag for at most L+1 of the 2^128 values of H, which
// is as good as uniform with AES a pseudorandom permutation (GHASH is
// (L+1)/2^128-almost-universal; McGrew and Viega, "The security and
// performance of the Galois/Counter Mode", 2004). That bound holds for
// bytes chosen without knowing H, and the audited bytes are: they are
// below end offsets read before the key is drawn, and nothing computed
// from the key leaves the process. For the executor's records (L ≈ 70)
// and 10^9 outcomes an audit accepts changed bytes with probability at
// most about 2^-91. Unlike a 64-bit seeded maphash, which has no such
// bound (a shaped collision was the reason round 14 compared the bytes),
// a tag equal to a kept one stands for the same bytes, so a tampered
// outcome (any byte changed) is decoded and judged by its own bytes; the
// facts taken are exactly those decoding the bytes gives.
//
// A tag costs about 0.25 µs per KB (AES-NI and carry-less multiply), and
// keeps 16 bytes instead of a copy of the record: the memo can hold a
// whole partition's journal records in a few MB, so a repeat's outcome,
// a partition after its record, is found too.
//
// # Bound
//
// Two generations (the latest records and the ones before them), each of
// at most memoEntries entries and memoBytes of what the entries keep
// (their strings; an error's or a resolution's): at most 2 × (3 MB +
// 1 MiB) whatever the number of keys (docs/memory.md#audit).
//
// It is written between decoding passes (add, on one goroutine) and only
// read while records are decoded on every core (tagOf, find).
type recordMemo struct {
	gcm   cipher.AEAD
	nonce [12]byte
	gen   [2]memoGen // gen[0] the latest records, gen[1] the ones before
}

// memoTag is a record's GMAC under the memo's key (recordMemo).
type memoTag [16]byte

// memoGen is one generation of the memo. Its map and entries are made
// for memoEntries when first used and then reused.
type memoGen struct {
	at    map[memoTag]int32 // a record's tag -> its entry
	ents  []memoEntry
	bytes int // memoCost of the entries
}

// memoEntry is the fields of a journal record that factsOf reads.
type memoEntry struct {
	key        string
	entity     string
	status     schemas.Status // interned
	cmdID      string         // the command id when resolution is set (SettlementDecision reads it), else ""
	partition  int32          // the command partition
	err        *schemas.Error
	resolution *schemas.Resolution
	hash       digest // hashDigest of the record's hash, for outcomes_match
	hashed     bool   // the record has a hash
	keyID      digest // the journal record's keyID (decoded), when keyed
	jpart      int32  // its journal partition; -1: not keyed
}

// memoEntries and memoBytes bound each generation: at most memoEntries
// entries (136 bytes each and their tag in the map: about 3 MB for
// 16 384) keeping at most memoBytes of strings and what err and
// resolution point at (memoCost). Variables so that a test can make the
// memo turn over. 16 384 entries hold a partition of the bench's topics
// (8 300 journal records, about 40 bytes of key and entity each).
var (
	memoEntries = 1 << 14
	memoBytes   = 1 << 20
)

// useMemo gives a the recordMemo Run decodes with (none where AES-GCM is
// not available, as in FIPS 140-only mode: every record is then decoded).
func (a *auditor) useMemo() { a.memo = newRecordMemo() }

func newRecordMemo() *recordMemo {
	m := &recordMemo{}
	key := make([]byte, 16)
	rand.Read(key) // never fails (crypto/rand)
	blk, err := aes.NewCipher(key)
	if err != nil {
		return nil
	}
	if m.gcm, err = cipher.NewGCM(blk); err != nil {
		return nil
	}
	return m
}

// tagOf sets *t to the tag of raw. t is the caller's (a decoded record's
// field): the tag is written there, not into a new buffer.
func (m *recordMemo) tagOf(raw []byte, t *memoTag) {
	m.gcm.Seal(t[:0], m.nonce[:], nil, raw)
}

// memoCost is what keeping rec costs a generation beyond its entry:
// the strings the entry keeps (each rounded up to a word) and what its
// error and resolution hold.
func memoCost(rec *schemas.Record) int {
	str := func(s string) int { return (len(s) + 7) &^ 7 }
	n := str(rec.IdempotencyKey) + str(rec.Entity)
	if e := rec.Error; e != nil {
		n += 32 + str(e.Code) + str(e.Message)
	}
	if r := rec.Resolution; r != nil {
		n += 96 + str(r.By) + str(r.Reason) + str(string(r.As)) + str(r.DecisionID) + str(rec.Command.ID)
	}
	return n
}

// add keeps rec, decoded from the bytes whose tag is t. A record costing
// more than a generation is not kept; a tag already kept keeps its first
// record (the same bytes).
func (m *recordMemo) add(t *memoTag, rec *schemas.Record) { m.addKeyed(t, rec, digest{}, -1) }

// addKeyed is add for a journal record of partition p whose keyID is
// id: an outcome carrying it takes its key's digest from the memo
// instead of hashing it again.
func (m *recordMemo) addKeyed(t *memoTag, rec *schemas.Record, id digest, p int32) {
	c := memoCost(rec)
	if c > memoBytes {
		return
	}
	g := &m.gen[0]
	if g.bytes+c > memoBytes || len(g.ents) >= memoEntries {
		m.gen[0], m.gen[1] = m.gen[1], m.gen[0]
		g = &m.gen[0]
		clear(g.ents)
		g.ents, g.bytes = g.ents[:0], 0
		clear(g.at)
	}
	if g.at == nil {
		g.at = make(map[memoTag]int32, memoEntries)
		g.ents = make([]memoEntry, 0, memoEntries)
	}
	if _, ok := g.at[*t]; ok {
		return
	}
	g.at[*t] = int32(len(g.ents))
	e := memoEntry{key: rec.IdempotencyKey, entity: rec.Entity, status: intern(rec.Status),
		partition: rec.Command.Partition, err: rec.Error, resolution: rec.Resolution,
		hash: hashDigest(rec.Hash), hashed: rec.Hash != "", keyID: id, jpart: p}
	if rec.Resolution != nil {
		e.cmdID = rec.Command.ID
	}
	g.ents = append(g.ents, e)
	g.bytes += c
}

// find returns the fields factsOf reads of the journal record whose
// bytes are raw (their tag, which find writes to *t), if the memo has it.
func (m *recordMemo) find(raw []byte, t *memoTag) (schemas.Record, bool) {
	e, ok := m.lookup(raw, t)
	if !ok {
		return schemas.Record{}, false
	}
	return e.record(), true
}

// lookup is find's entry.
func (m *recordMemo) lookup(raw []byte, t *memoTag) (*memoEntry, bool) {
	if m == nil {
		return nil, false
	}
	m.tagOf(raw, t)
	for i := range m.gen {
		g := &m.gen[i]
		if j, ok := g.at[*t]; ok {
			return &g.ents[j], true
		}
	}
	return nil, false
}

// record is the fields factsOf reads of e's record.
func (e *memoEntry) record() schemas.Record {
	return schemas.Record{IdempotencyKey: e.key, Entity: e.entity, Status: e.status,
		Command: schemas.CommandRef{ID: e.cmdID, Partition: e.partition}, Error: e.err, Resolution: e.resolution}
}
