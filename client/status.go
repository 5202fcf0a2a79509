package client

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/twmb/franz-go/pkg/kgo"

	internal "github.com/onceflight/onceflight/internal/client"
	"github.com/onceflight/onceflight/internal/wire"
	"github.com/onceflight/onceflight/schemas"
)

// ErrNoRecord is returned (wrapped) by Status when the journal has no
// record of the key: it was never executed, or retention removed it.
var ErrNoRecord = errors.New("no execution record")

// ErrAmbiguous is returned (wrapped) by Status when no entity is given and
// the key has records for several entities: keys are scoped to their
// entity (docs/events.md#execution-records), so the caller must say which.
var ErrAmbiguous = errors.New("key has records for several entities")

// Status returns the current execution record of idempotency key key of
// entity, read from the journal, the executor's source of truth (as
// `onceflight status` does): every partition from its start to the end
// taken when the call begins, so it answers "as of now" and terminates
// while executors keep writing. An empty entity accepts the key's only
// entity. It costs a full read of the journal: it is for operators and
// reconciliation jobs, not for a request path, where Wait already
// returns the record.
func (c *Client) Status(ctx context.Context, key, entity string) (schemas.Record, error) {
	recs, err := c.KeyRecords(ctx, key)
	if err != nil {
		return schemas.Record{}, err
	}
	if entity != "" {
		recs = slices.DeleteFunc(recs, func(r schemas.Record) bool { return r.Entity != entity })
	}
	switch {
	case len(recs) == 0 && entity != "":
		return schemas.Record{}, fmt.Errorf("key %q of entity %q: %w", key, entity, ErrNoRecord)
	case len(recs) == 0:
		return schemas.Record{}, fmt.Errorf("key %q: %w", key, ErrNoRecord)
	case len(recs) > 1:
		ents := make([]string, len(recs))
		for i, r := range recs {
			ents[i] = r.Entity
		}
		return schemas.Record{}, fmt.Errorf("key %q: %w (%s); name the entity", key, ErrAmbiguous, strings.Join(ents, ", "))
	}
	return recs[0], nil
}

// KeyRecords returns the current record of idempotency key key for every
// entity that used it (normally one; a key is scoped to its entity), in
// entity order, and none if the journal has no record of it. It reads the
// journal like Status.
func (c *Client) KeyRecords(ctx context.Context, key string) ([]schemas.Record, error) {
	latest := map[string]schemas.Record{} // entity -> latest record of key
	err := c.scanJournal(ctx, func(k []byte) bool { return string(k) == key }, func(jk string, r *schemas.Record) {
		if r == nil { // a tombstone forgets the key, as compaction would
			clear(latest)
			return
		}
		latest[r.Entity] = *r
	})
	if err != nil {
		return nil, err
	}
	out := make([]schemas.Record, 0, len(latest))
	for _, e := range slices.Sorted(maps.Keys(latest)) {
		out = append(out, latest[e])
	}
	return out, nil
}

// Records returns the current record of every (entity, key) whose status is
// one of statuses, sorted by key and entity: e.g. the unresolved and held
// records waiting for an operator. It reads the journal like Status and
// holds only the records that match.
func (c *Client) Records(ctx context.Context, statuses ...schemas.Status) ([]schemas.Record, error) {
	type ek struct{ entity, key string }
	keep := map[ek]schemas.Record{}
	err := c.scanJournal(ctx, func([]byte) bool { return true }, func(jk string, r *schemas.Record) {
		if r == nil {
			maps.DeleteFunc(keep, func(k ek, _ schemas.Record) bool { return k.key == jk })
			return
		}
		id := ek{r.Entity, r.IdempotencyKey}
		if slices.Contains(statuses, r.Status) {
			keep[id] = *r
		} else {
			delete(keep, id)
		}
	})
	if err != nil {
		return nil, err
	}
	out := slices.Collect(maps.Values(keep))
	slices.SortFunc(out, func(a, b schemas.Record) int {
		return cmp.Or(cmp.Compare(a.IdempotencyKey, b.IdempotencyKey), cmp.Compare(a.Entity, b.Entity))
	})
	return out, nil
}

// scanJournal calls fn, in journal order per partition, with every
// execution record whose journal key (the idempotency key) passes want,
// and with nil for a tombstone. Other entries (epoch markers, anything
// unmarked) are skipped, as are unwanted keys without decoding them. A
// record that cannot be decoded fails the scan: it could be the latest
// state of its key, and answering with an older one would be a lie.
func (c *Client) scanJournal(ctx context.Context, want func([]byte) bool, fn func(key string, r *schemas.Record)) error {
	if c.closed() {
		return fmt.Errorf("scan journal %s: %w", c.topics.Journal, ErrClosed)
	}
	err := internal.Read(ctx, c.cl, c.topics.Journal, true, false, func(rec *kgo.Record) error {
		if !want(rec.Key) || wire.JournalKind(rec) != schemas.KindRecord {
			return nil
		}
		if rec.Value == nil {
			fn(string(rec.Key), nil)
			return nil
		}
		r, err := schemas.UnmarshalRecord(rec.Value)
		if err != nil {
			return fmt.Errorf("journal partition %d offset %d: %w", rec.Partition, rec.Offset, err)
		}
		fn(string(rec.Key), &r)
		return nil
	})
	if err != nil {
		return fmt.Errorf("scan journal %s: %w", c.topics.Journal, err)
	}
	return nil
}
