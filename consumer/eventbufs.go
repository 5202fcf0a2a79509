package consumer

import (
	"math/bits"
	"sync"
	"sync/atomic"

	"github.com/onceflight/onceflight/internal/outbox"
)

// eventBuf is the buffer of a new key's outcome event (wire.OutcomeHead,
// then wire.SealOutcome): the event, the journal record's bytes (a slice
// of it) and the event's Kafka key all live in it. It was a fifth of the
// bytes serve allocated per new key (a 2 KiB object for ~1.35 KB used;
// BENCHMARKS.md, round 16 (newkey)), so it is reused once nothing can
// read it any more: the committer gives it back at the end of apply, when
// the transaction that carried it
//
//   - was produced (ProduceSync returned: franz-go holds a record's Value
//     until its promise fires, and all of them have) and committed,
//   - is in Pebble (CommitSyncLater returned: the Pebble batch copied the
//     journal bytes, and the dedupe batch holding them is closed), and
//   - has been hashed by the sealer and the checkpointer (they keep
//     hashes, not bytes).
//
// Nothing else may keep emit.buf.b or emit.raw, or a slice of them, past
// apply: the overlay and the caches keep records, whose fields never
// point into the buffer (the record's hash is a string of its own). A
// transaction that is aborted or fails keeps its buffers (its items are
// put back, or dropped to the garbage collector with the client).
//
// The Kafka records of the journal record and of the event (msgs) are
// reused with it: they too are the producer's until the transaction was
// produced, and are built anew by every encode (a transaction retried
// after an abort builds them again, after the aborted one's produce
// returned).
type eventBuf struct {
	b    []byte
	msgs outbox.Messages
}

const (
	eventBufMinShift = 10 // the smallest class: 1 KiB
	eventBufClasses  = 5  // 1, 2, 4, 8 and 16 KiB; larger events are not reused
)

// eventBufPools holds free buffers by class: a class-c buffer has a
// capacity of exactly 1 KiB << c. A sync.Pool lets the entity workers
// (stage) and the committer (apply) take and give without a lock of
// their own, and frees what a burst left behind after two collections.
var eventBufPools [eventBufClasses]sync.Pool

// poisonEventBufs makes putEventBuf overwrite a buffer before it is
// reused, so that a read of a released buffer sees garbage at once
// rather than only when the buffer happens to be reused (tests).
var poisonEventBufs bool

// eventBufsPoisoned counts the buffers poisoned (released while
// poisonEventBufs is on): a test's proof that reuse happened.
var eventBufsPoisoned atomic.Int64

// eventBufClass is the smallest class whose buffers hold n bytes, or -1
// when none does.
func eventBufClass(n int) int {
	if n <= 1<<eventBufMinShift {
		return 0
	}
	c := bits.Len(uint(n-1)) - eventBufMinShift
	if c >= eventBufClasses {
		return -1
	}
	return c
}

// getEventBuf is an empty buffer with room for n bytes.
func getEventBuf(n int) *eventBuf {
	c := eventBufClass(n)
	if c < 0 {
		return &eventBuf{b: make([]byte, 0, n)}
	}
	if v := eventBufPools[c].Get(); v != nil {
		eb := v.(*eventBuf)
		eb.b = eb.b[:0]
		return eb
	}
	return &eventBuf{b: make([]byte, 0, 1<<(eventBufMinShift+c))}
}

// putEventBuf gives eb back for reuse: its bytes must not be read again.
func putEventBuf(eb *eventBuf) {
	c := eventBufClass(cap(eb.b))
	if c < 0 || cap(eb.b) != 1<<(eventBufMinShift+c) {
		return // not one of the classes' (too large): left to the collector
	}
	if poisonEventBufs {
		b := eb.b[:cap(eb.b)]
		for i := range b {
			b[i] = 0xEE
		}
		eb.msgs = outbox.Messages{} // a record produced after this has no topic
		eventBufsPoisoned.Add(1)
	}
	eb.b = eb.b[:0]
	eventBufPools[c].Put(eb)
}
