package client

import (
	"context"
	"fmt"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/onceflight/onceflight/schemas"
)

// Journal record headers. The journal carries execution records and, beside
// them, the executor's own markers (epochs); only the former are records.
const (
	KindHeader = schemas.HeaderKind
	KindRecord = schemas.KindRecord
)

// ScanJournal returns the latest record of the idempotency key key in
// journalTopic, and whether there is one. It reads every partition from its
// start to the end taken when the scan begins, so it answers "as of now"
// and terminates even while executors keep writing. It costs a full read of
// the journal; it is meant for operators, not for hot paths.
func ScanJournal(ctx context.Context, cl *kgo.Client, journalTopic, key string) (schemas.Record, bool, error) {
	recs, err := scanJournal(ctx, cl, journalTopic, func(k []byte) bool { return string(k) == key })
	if err != nil {
		return schemas.Record{}, false, err
	}
	rec, ok := recs[key]
	return rec, ok, nil
}

// JournalLatest returns the latest record of every key in journalTopic, read
// the same way as ScanJournal.
func JournalLatest(ctx context.Context, cl *kgo.Client, journalTopic string) (map[string]schemas.Record, error) {
	return scanJournal(ctx, cl, journalTopic, func([]byte) bool { return true })
}

// scanJournal reads journalTopic up to its current last stable offsets and
// keeps, per wanted key, the last record: the journal appends every state
// change of a key, so the last one is the current state. Records whose
// onceflight-kind header is not "record" (epoch markers, and anything
// unmarked) are skipped, as are other keys without decoding them. A
// tombstone (nil value) forgets the key, as compaction would.
func scanJournal(ctx context.Context, cl *kgo.Client, topic string, want func(key []byte) bool) (map[string]schemas.Record, error) {
	out := make(map[string]schemas.Record)
	err := Read(ctx, cl, topic, true, false, func(rec *kgo.Record) error {
		return keep(out, rec, want)
	})
	if err != nil {
		return nil, fmt.Errorf("scan journal: %w", err)
	}
	return out, nil
}

// keep folds one journal record into out.
func keep(out map[string]schemas.Record, rec *kgo.Record, want func([]byte) bool) error {
	if rec.Attrs.IsControl() || !want(rec.Key) || kind(rec) != KindRecord {
		return nil
	}
	if rec.Value == nil {
		delete(out, string(rec.Key))
		return nil
	}
	r, err := schemas.UnmarshalRecord(rec.Value)
	if err != nil {
		// A record we cannot read could be the latest state of the
		// key; answering with an older one would be a lie.
		return fmt.Errorf("partition %d offset %d: %w", rec.Partition, rec.Offset, err)
	}
	out[string(rec.Key)] = r
	return nil
}

func kind(r *kgo.Record) string {
	for _, h := range r.Headers {
		if h.Key == KindHeader {
			return string(h.Value)
		}
	}
	return ""
}
