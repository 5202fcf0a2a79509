package dedupe

import (
	"sync"
	"time"

	"github.com/onceflight/onceflight/schemas"
)

// Every command reads its entity's state and, when its records are
// written, the previous index entries of its key; a Pebble point read
// costs more than everything else the executor does for a command (an
// iterator per read). Two write-through caches answer most of those reads
// from memory:
//
//   - entities: the state of recently written entities, read by Entity;
//   - metas: the index-relevant fields (status, partition, finished_at) of
//     recently written records that are not final, read by PutRecord to
//     know which index entries to move when their final record follows
//     (rememberMeta).
//
// Both are filled by Batch.Commit, under Store.mu, after the Pebble commit
// succeeded, so they never hold a value Pebble does not. Entity also
// remembers what it read from Pebble — most often "no such entity", for
// an entity's first command — but only when no write reached the cache
// while it read (putIfQuiet): a read that a commit overtook could keep the
// older value. Prune deletes
// entity states under the same mutex and drops them from the cache;
// the metas stay right across pruning, because a stub keeps status,
// partition and finished_at, and a forgotten record's stale metas only
// cost a tombstone for an index entry already gone.
//
// Each cache holds at most 2 × WithEntryCache entries (default
// DefaultEntryCacheEntries), so their memory is bounded by configuration
// whatever the number of keys (docs/memory.md).

// genCache is a bounded map with two generations: when the current one is
// full it becomes the old one and the older is dropped; a hit in the old
// generation moves the entry forward. At most 2 × max entries, recently
// used ones kept.
type genCache[V any] struct {
	// mu guards the fields below (max is read-only). A leaf lock
	// (DESIGN.md#lock-order).
	mu       sync.Mutex
	cur, old map[string]V
	max      int
	// writes counts puts and deletes, so that a value read from Pebble
	// can be added only if nothing was written since the read began
	// (putIfQuiet).
	writes uint64
}

func newGenCache[V any](max int) *genCache[V] {
	return &genCache[V]{cur: make(map[string]V), max: max}
}

func (c *genCache[V]) get(k string) (V, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.getLocked(k)
}

func (c *genCache[V]) getLocked(k string) (V, bool) {
	if v, ok := c.cur[k]; ok {
		return v, true
	}
	if v, ok := c.old[k]; ok {
		delete(c.old, k)
		c.putLocked(k, v)
		return v, true
	}
	var zero V
	return zero, false
}

func (c *genCache[V]) put(k string, v V) {
	c.mu.Lock()
	c.putLocked(k, v)
	c.mu.Unlock()
}

// lookup is get, and on a miss the write count to give putIfQuiet after
// reading Pebble: one lock per read on the hot path.
func (c *genCache[V]) lookup(k string) (V, bool, uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if v, ok := c.getLocked(k); ok {
		return v, true, 0
	}
	var zero V
	return zero, false, c.writes
}

// putIfQuiet adds a value read from Pebble unless a write happened since
// version v: then the read may predate it, and the cache must not keep it.
func (c *genCache[V]) putIfQuiet(k string, val V, v uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.writes == v {
		c.cur[k] = val
		if len(c.cur) >= c.max {
			c.old, c.cur = c.cur, make(map[string]V, c.max)
		}
	}
}

// del drops k from both generations (a final record's key from metas:
// rememberMeta).
func (c *genCache[V]) del(k string) {
	c.mu.Lock()
	c.writes++
	delete(c.cur, k)
	delete(c.old, k)
	c.mu.Unlock()
}

// clear drops every entry (the store was emptied: BindJournal).
func (c *genCache[V]) clear() {
	c.mu.Lock()
	c.writes++
	c.cur, c.old = make(map[string]V), nil
	c.mu.Unlock()
}

func (c *genCache[V]) putLocked(k string, v V) {
	c.writes++
	c.cur[k] = v
	if len(c.cur) >= c.max {
		c.old, c.cur = c.cur, make(map[string]V, c.max)
	}
}

// entityEntry is a cached entity state, or the knowledge that there is
// none (found false).
type entityEntry struct {
	es    EntityState
	found bool
}

// rememberMeta keeps a committed record's index fields for its key's next
// write, if one is expected soon: a record that is not final (an intent, a
// held command) is followed by its final record, while a final record is
// written again only by an operator's decision or a prune, rare enough to
// read Pebble for (PutRecord does, for a key the cache lacks). Caching
// final records too kept the latest 16–32 Ki new keys of a backlog, none
// of them read again: ~7 MB of a noop drain's ~35 MB live heap, and twice
// that resident under GOGC=100 (BENCHMARKS.md, "Round 8 (mem)"). A final
// record drops its key's entry, which would be stale.
func rememberMeta(c *genCache[recMeta], key string, rec *schemas.Record) {
	if rec.Status.Final() {
		c.del(key)
		return
	}
	c.put(key, metaOf(rec))
}

// recMeta is what writeIndex needs of a key's previous record.
type recMeta struct {
	status     schemas.Status
	partition  int32
	finishedAt *time.Time
	action     string
	uniqueKey  string
	released   bool
}

func metaOf(rec *schemas.Record) recMeta {
	return recMeta{status: rec.Status, partition: rec.Command.Partition, finishedAt: rec.FinishedAt,
		action: rec.Action, uniqueKey: rec.UniqueKey, released: rec.Release != nil}
}

func (m recMeta) record(entity, key string) schemas.Record {
	r := schemas.Record{IdempotencyKey: key, Entity: entity, Action: m.action, UniqueKey: m.uniqueKey,
		Status: m.status, Command: schemas.CommandRef{Partition: m.partition}, FinishedAt: m.finishedAt}
	if m.released {
		r.Release = &schemas.Resolution{}
	}
	return r
}
