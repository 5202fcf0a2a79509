package dedupe

import (
	"errors"
	"fmt"

	"github.com/cockroachdb/pebble/v2"

	"github.com/onceflight/onceflight/schemas"
)

// Unresolved lists the unresolved records of the given partitions, in
// partition order then key order, at most limit in total (limit <= 0: all).
// The reconciler and the API use it; it reads the "u/" index so it never
// scans records.
func (s *Store) Unresolved(partitions []int32, limit int) ([]schemas.Record, error) {
	prefixes := make([]string, len(partitions))
	for i, p := range partitions {
		prefixes[i] = unresolvedPrefix(p)
	}
	return s.listIndex(prefixes, schemas.StatusUnresolved, limit)
}

// ByStatus lists records with the given status, in key order, at most limit
// (limit <= 0: all). It backs GET /v1/executions?status=, the reconciler
// (in_progress) and governance (held).
//
// Every status but succeeded is read from its "s/" index. Succeeded is
// not indexed (statusIndexed): it is most records, and its entries were
// one more entry per key for every compaction to rewrite. Listing it
// scans the records, reading each record's value until limit are found:
// about as many reads as records listed while most records succeeded,
// but the whole store when few did and limit is not reached (seconds for
// a few million records).
func (s *Store) ByStatus(status schemas.Status, limit int) ([]schemas.Record, error) {
	if !statusIndexed(status) {
		return s.scanStatus(status, limit)
	}
	return s.listIndex([]string{statusPrefix(status)}, status, limit)
}

// statusIndexed reports whether records of status st have an "s/" entry.
func statusIndexed(st schemas.Status) bool { return st != schemas.StatusSucceeded }

// scanStatus is ByStatus for a status without an index: a scan of r/.
func (s *Store) scanStatus(status schemas.Status, limit int) ([]schemas.Record, error) {
	if err := s.enter(); err != nil {
		return nil, err
	}
	defer s.leave()
	if err := s.usable(); err != nil {
		return nil, err
	}
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: recordSpan.start, UpperBound: recordSpan.end})
	if err != nil {
		return nil, fmt.Errorf("dedupe: new iterator: %w", err)
	}
	defer it.Close()
	var out []schemas.Record
	for ok := it.First(); ok && (limit <= 0 || len(out) < limit); ok = it.Next() {
		rec, err := s.iterRecord(it)
		if err != nil {
			return nil, err
		}
		if rec.Status == status {
			out = append(out, rec)
		}
	}
	if err := it.Error(); err != nil {
		return nil, fmt.Errorf("dedupe: scan records for %s: %w", status, s.reportCorrupt(err))
	}
	return out, nil
}

// listIndex walks index prefixes and loads each record by point lookup. Index
// and records are read from one snapshot, so a batch committed meanwhile is
// either wholly seen or not at all.
func (s *Store) listIndex(prefixes []string, status schemas.Status, limit int) ([]schemas.Record, error) {
	if err := s.enter(); err != nil {
		return nil, err
	}
	defer s.leave()
	if err := s.usable(); err != nil {
		return nil, err
	}
	snap := s.db.NewSnapshot()
	defer snap.Close()

	var out []schemas.Record
	for _, prefix := range prefixes {
		if limit > 0 && len(out) >= limit {
			break
		}
		var err error
		out, err = s.scanPrefix(snap, prefix, status, limit, out)
		if err != nil {
			return nil, err
		}
	}
	return out, nil
}

func (s *Store) scanPrefix(snap *pebble.Snapshot, prefix string, status schemas.Status, limit int, out []schemas.Record) ([]schemas.Record, error) {
	lower := []byte(prefix)
	it, err := snap.NewIter(&pebble.IterOptions{LowerBound: lower, UpperBound: prefixEnd(lower)})
	if err != nil {
		return nil, fmt.Errorf("dedupe: new iterator: %w", err)
	}
	defer it.Close()
	for ok := it.First(); ok; ok = it.Next() {
		if limit > 0 && len(out) >= limit {
			break
		}
		key := string(it.Key()[len(prefix):])
		rec, found, err := s.lookupIn(snap, key)
		if err != nil {
			return nil, err
		}
		// Index and record are committed in one batch, so a mismatch means a
		// bug (two writers on one key). Skip it rather than fail the listing.
		if !found || rec.Status != status {
			s.log.Warn("dedupe: stale index entry", "index", prefix, "key", key, "found", found, "status", rec.Status)
			continue
		}
		out = append(out, rec)
	}
	if err := it.Error(); err != nil {
		return nil, fmt.Errorf("dedupe: scan %q: %w", prefix, err)
	}
	return out, nil
}

// prefixEnd is the smallest key greater than every key starting with prefix.
// Index prefixes end in '/', so incrementing the last byte never overflows.
func prefixEnd(prefix []byte) []byte {
	end := append([]byte(nil), prefix...)
	end[len(end)-1]++
	return end
}

// CountUnresolved counts the unresolved records of the given partitions
// from the "u/" index alone: a gauge needs the number, not the records.
func (s *Store) CountUnresolved(partitions []int32) (int, error) {
	if err := s.enter(); err != nil {
		return 0, err
	}
	defer s.leave()
	if err := s.usable(); err != nil {
		return 0, err
	}
	n := 0
	for _, p := range partitions {
		lower := []byte(unresolvedPrefix(p))
		it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: lower, UpperBound: prefixEnd(lower)})
		if err != nil {
			return 0, fmt.Errorf("dedupe: new iterator: %w", err)
		}
		for ok := it.First(); ok; ok = it.Next() {
			n++
		}
		if err := errors.Join(it.Error(), it.Close()); err != nil {
			return 0, fmt.Errorf("dedupe: count unresolved: %w", err)
		}
	}
	return n, nil
}
