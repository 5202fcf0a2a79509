package consumer

import (
	"context"
	"errors"
	"slices"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/onceflight/onceflight/internal/wire"
	"github.com/onceflight/onceflight/schemas"
)

// errReaderStopped is a read-ahead that ended before its target without
// a reason (it does not happen: it ends early only when its context does).
var errReaderStopped = errors.New("journal read-ahead stopped")

// journalChunk is what one poll of a catch-up's journal reader returned,
// with the index fields of its records decoded ahead (readAhead).
type journalChunk struct {
	records []*kgo.Record
	// decoded[i] is records[i]'s UnmarshalRecordIndex when it is a
	// record (wire.JournalKind), zero otherwise.
	decoded []decodedRecord
	// errs are the fetch errors of the poll, logged by the catch-up.
	errs []error
	// err ends the reading: the catch-up's context ended before target.
	err error
}

// decodedRecord is a journal record's index fields, or why they could not
// be decoded.
type decodedRecord struct {
	rec schemas.Record
	err error
}

// readAhead polls rd for the catch-up of a partition from offset from
// until it has read past target-1, on its own goroutine, and decodes the
// index fields of every record it read (schemas.UnmarshalRecordIndex)
// before handing the poll over: while the catch-up applies one poll's
// records and writes its tables, the next poll is fetched and decoded
// beside it. Decoding was a fifth of a restore's CPU, on the one
// goroutine that also builds and writes the batches.
//
// It stops exactly where the loop it replaces did (after the poll whose
// last offset reaches target), so the reader can be used again by the
// next catch-up; it holds at most one decoded poll ahead of the one being
// applied, and gives back the slices of applied ones (done). stop ends it
// early and waits for its goroutine, so rd is never polled by two.
//
// decode false leaves decoded nil: a catch-up that checks seals applies
// records only once a seal covers them, possibly polls later, and decodes
// them then.
func readAhead(ctx context.Context, rd *kgo.Client, from, target int64, decode bool) (chunks <-chan journalChunk, done func(journalChunk), stop func()) {
	ctx, cancel := context.WithCancel(ctx)
	out := make(chan journalChunk)
	free := make(chan []decodedRecord, 2)
	exited := make(chan struct{})
	go func() {
		defer close(exited)
		defer close(out)
		for read := from; read < target; {
			fetches := rd.PollFetches(ctx)
			if err := ctx.Err(); err != nil {
				select {
				case out <- journalChunk{err: err}:
				case <-ctx.Done():
				}
				return
			}
			var c journalChunk
			fetches.EachError(func(_ string, _ int32, err error) { c.errs = append(c.errs, err) })
			c.records = fetches.Records()
			if decode {
				select {
				case c.decoded = <-free:
				default:
				}
				c.decoded = decodeRecords(c.decoded, c.records)
			}
			if n := len(c.records); n > 0 {
				read = c.records[n-1].Offset + 1
			}
			select {
			case out <- c:
			case <-ctx.Done():
				return
			}
		}
	}()
	done = func(c journalChunk) {
		if c.decoded == nil {
			return
		}
		clear(c.decoded) // drop the records' strings while it waits
		select {
		case free <- c.decoded:
		default:
		}
	}
	stop = func() {
		cancel()
		<-exited
	}
	return out, done, stop
}

// decodeRecords decodes the index fields of records into dst (reused if
// large enough), one per record (zero for what is not a record).
func decodeRecords(dst []decodedRecord, records []*kgo.Record) []decodedRecord {
	dst = slices.Grow(dst[:0], len(records))[:len(records)]
	clear(dst)
	for i, r := range records {
		if r.Attrs.IsControl() || wire.JournalKind(r) != schemas.KindRecord {
			continue
		}
		dst[i].rec, dst[i].err = schemas.UnmarshalRecordIndex(r.Value)
	}
	return dst
}
