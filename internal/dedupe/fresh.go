package dedupe

import (
	"github.com/bits-and-blooms/bloom/v3"
)

// freshMaxBits bounds a Fresh filter's memory (2 MiB: ~1.7 M keys and
// entities at 1 %; partitions restore four at a time, so 8 MiB at most).
// Past that, its false-positive rate rises, which costs only the reads it
// was meant to save, never a wrong answer.
const freshMaxBits = 2 << 20 * 8

// Fresh is what one catch-up of a partition has written, for a partition
// the store held nothing of when the catch-up began (an empty data dir, or
// a partition this data dir never owned): every earlier version of a key
// or an entity it meets can then only be one it wrote itself.
//
// A catch-up writes every record it reads, and writing a record means
// first reading the key's previous version (to move its index entries)
// and its entity's state. Into an empty partition almost every key is new,
// so those reads find nothing, yet each costs a seek through every level's
// filters and, as the tree grows, data blocks — measured at 10 % of a
// restore's CPU. A Bloom filter of the keys and entities written so far
// answers "certainly never written" without Pebble; "maybe written" falls
// back to the read, so a false positive costs a seek and nothing else.
//
// A Fresh is used by one catch-up's batches, one after another; it is not
// safe for concurrent use.
type Fresh struct {
	f *bloom.BloomFilter
	// buf is the scope byte and the name being tested, reused so that a
	// test costs no allocation per restored record (a Fresh has one user
	// at a time).
	buf []byte
}

// NewFresh returns a Fresh sized for about records journal records (each
// adds its key and, at most, its entity), at a 1 % false-positive rate,
// capped at 2 MiB.
func NewFresh(records int64) *Fresh {
	n := uint(max(records, 1024)) * 2
	m, k := bloom.EstimateParameters(n, 0.01)
	m = min(m, freshMaxBits)
	return &Fresh{f: bloom.New(m, k)}
}

// UseFresh makes the batch trust f: a key or entity f has never seen is
// taken as absent from the store without reading it. Only for a partition
// the store held nothing of when f was made (see Fresh), and only with the
// same f for every batch of that catch-up, or a key written by an earlier
// batch would be taken as new and its old index entries left behind.
func (b *Batch) UseFresh(f *Fresh) { b.fresh = f }

// seenKey reports whether the batch's Fresh may have written scope key
// before, and records that it writes it now. Without a Fresh, always true.
func (b *Batch) seenKey(key string) bool {
	if b.fresh == nil {
		return true
	}
	return b.fresh.seen('k', key)
}

// seenEntity is seenKey for an entity's state.
func (b *Batch) seenEntity(entity string) bool {
	if b.fresh == nil {
		return true
	}
	return b.fresh.seen('e', entity)
}

// seen tests scope+name and adds it.
func (f *Fresh) seen(scope byte, name string) bool {
	f.buf = append(append(f.buf[:0], scope), name...)
	return f.f.TestOrAdd(f.buf)
}
