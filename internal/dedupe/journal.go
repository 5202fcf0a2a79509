package dedupe

import (
	"encoding/hex"
	"encoding/json"
	"fmt"

	"github.com/cockroachdb/pebble/v2"
)

// journalMeta names the journal a store is the cache of, at keyJournal.
type journalMeta struct {
	Topic string `json:"topic"`
	// ID is the topic's id (hex), "" when the brokers gave none.
	ID string `json:"id,omitempty"`
}

// same reports whether m and o name one journal. Ids are compared only
// when both are known: a broker that gives none (or a store that got none)
// is trusted by name.
func (m journalMeta) same(o journalMeta) bool {
	return m.Topic == o.Topic && (m.ID == "" || o.ID == "" || m.ID == o.ID)
}

// BindJournal makes the store the cache of journal topic (id: the topic's
// id, all zero when the brokers give none), and reports whether it emptied
// the store to do so.
//
// Progress holds offsets of one journal. Read in another — new topics, a
// journal deleted and created again, or one copied to another cluster, all
// under the same data dir — a restore would go on from an offset of the
// old journal: skip the new one's records below it (their keys forgotten,
// a repeat executed again: G2), or find the journal behind it. So a store
// bound to another journal (another name, or another id where both are
// known) is emptied, as Open empties a store of another key layout, and
// restore rebuilds it from the new journal's start. A store without a
// binding is bound as it is when it holds no Progress (new), or when it
// was written by a build before the binding (adopted: nothing tells).
//
// Call it before anything reads the store (the executor: once it knows
// the topics, before it joins its group). It forgets the entry caches,
// but not the presence filter (which only says "maybe": a key it still
// names is looked up and not found) nor a prefetch under way, and a read
// under way while it empties may still see the old content: only a store
// nothing has read yet is safe to empty.
func (s *Store) BindJournal(topic string, id [16]byte) (emptied bool, err error) {
	if err := s.enter(); err != nil {
		return false, err
	}
	defer s.leave()
	want := journalMeta{Topic: topic}
	if id != ([16]byte{}) {
		want.ID = hex.EncodeToString(id[:])
	}
	var have journalMeta
	found, err := s.get(s.db, []byte(keyJournal), &have)
	if err != nil {
		return false, err
	}
	if found && have.same(want) && want.ID == "" {
		want.ID = have.ID // the id stays known when brokers give none
	}
	val, _ := json.Marshal(want)
	switch {
	case found && have == want:
		return false, nil
	case found && have.same(want), !found:
		if !found {
			progress, err := s.hasPrefix(prefixProgress)
			if err != nil {
				return false, err
			}
			if progress {
				s.log.Info("dedupe: store written before it named its journal; taken as the cache of this one", "journal", topic)
			}
		}
		if err := s.guard(func() error { return s.db.Set([]byte(keyJournal), val, pebble.Sync) }); err != nil {
			return false, fmt.Errorf("dedupe: write journal binding: %w", err)
		}
		return false, nil
	}
	s.log.Warn("dedupe: store is the cache of another journal; emptied, restore rebuilds it from this one",
		"found_topic", have.Topic, "found_id", have.ID, "journal", want.Topic, "id", want.ID)
	s.pruneMu.Lock()
	defer s.pruneMu.Unlock()
	s.mu.Lock()
	defer s.mu.Unlock()
	b := s.db.NewBatch()
	defer b.Close()
	prune, _ := json.Marshal(pruneMeta{Indexed: true})
	err = s.guard(func() error {
		if err := b.DeleteRange([]byte{}, []byte{0xff}, nil); err != nil {
			return err
		}
		// Set after the range deletion in one batch: later sequence
		// numbers, so they survive it, and a crash leaves either the
		// old store with its old binding or the empty one with the new.
		for _, kv := range [][2][]byte{{[]byte(keyFormat), []byte(formatVersion)},
			{[]byte(keyPruneMeta), prune}, {[]byte(keyJournal), val}} {
			if err := b.Set(kv[0], kv[1], nil); err != nil {
				return err
			}
		}
		return b.Commit(pebble.Sync)
	})
	if err != nil {
		return false, fmt.Errorf("dedupe: empty the store of another journal: %w", err)
	}
	s.prune = pruneState{indexed: true}
	s.entities.clear()
	s.metas.clear()
	return true, nil
}

// hasPrefix reports whether the store holds a key with prefix.
func (s *Store) hasPrefix(prefix string) (bool, error) {
	lower := []byte(prefix)
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: lower, UpperBound: prefixEnd(lower)})
	if err != nil {
		return false, fmt.Errorf("dedupe: new iterator: %w", err)
	}
	found := it.First()
	if err := it.Close(); err != nil {
		return false, fmt.Errorf("dedupe: scan %s: %w", prefix, err)
	}
	return found, nil
}
