package dedupe

import (
	"context"
	"fmt"
	"log/slog"
	"strings"

	"github.com/cockroachdb/pebble/v2"
)

// logTree writes Pebble's view of the index at Debug: the shape of the
// tree (files and bytes per level, L0 sublevels, compaction debt) and what
// was written since Open (WAL, flushes, compactions, per level and in
// total). At Open it tells what a start inherits (an L0 left behind by a
// drain is compacted by the next process, on its CPU); at Close, what the
// process's writes cost in flushes and compactions per byte written, and
// how many block reads the cache saved and did not (a lookup's reads per
// key), which profile shares cannot say. Cheap (Pebble's counters under its mutex), and
// nothing is computed unless Debug is on.
func (s *Store) logTree(msg string) {
	if !s.log.Enabled(context.Background(), slog.LevelDebug) {
		return
	}
	s.log.Debug(msg, treeAttrs(s.db.Metrics())...)
}

// treeAttrs are the figures logTree writes. Bytes are Pebble's: flushed and
// compacted count tables and blob files (records) apart, compacted blob
// bytes being records rewritten by compactions; write_amp is (flushed +
// compacted) / WAL bytes in.
func treeAttrs(m *pebble.Metrics) []any {
	var flushT, flushB, compT, compB uint64
	var levels strings.Builder
	for i := range m.Levels {
		l := &m.Levels[i]
		flushT += l.TableBytesFlushed
		flushB += l.BlobBytesFlushed
		compT += l.TableBytesCompacted
		compB += l.BlobBytesCompacted
		if l.TablesCount == 0 && l.TableBytesCompacted == 0 && l.TableBytesFlushed == 0 {
			continue
		}
		if levels.Len() > 0 {
			levels.WriteByte(' ')
		}
		// L<n>:files/MiB[/sublevels]+MiB of tables+MiB of blob files
		// written into the level since Open (flushes and compactions)
		fmt.Fprintf(&levels, "L%d:%d/%.1fMiB", i, l.TablesCount, mib(uint64(l.TablesSize)))
		if i == 0 {
			fmt.Fprintf(&levels, "/%dsub", l.Sublevels)
		}
		fmt.Fprintf(&levels, "+%.1f+%.1fMiB", mib(l.TableBytesFlushed+l.TableBytesCompacted), mib(l.BlobBytesCompacted))
	}
	// Pebble counts a flush's blob files in BlobBytesCompacted too.
	compB -= min(flushB, compB)
	amp := 0.0
	if m.WAL.BytesIn > 0 {
		amp = float64(flushT+flushB+compT+compB) / float64(m.WAL.BytesIn)
	}
	return []any{
		"wal_bytes_in", m.WAL.BytesIn,
		"flushes", m.Flush.Count,
		"flushed_table_bytes", flushT,
		"flushed_blob_bytes", flushB,
		"compactions", m.Compact.Count,
		"compacted_table_bytes", compT,
		"compacted_blob_bytes", compB,
		"compactions_in_progress", m.Compact.NumInProgress,
		"write_amp", fmt.Sprintf("%.2f", amp),
		"l0_files", m.Levels[0].TablesCount,
		"l0_sublevels", m.Levels[0].Sublevels,
		"compaction_debt_bytes", m.Compact.EstimatedDebt,
		"blob_files", m.BlobFiles.LiveCount,
		"cache_hits", m.BlockCache.Hits,
		"cache_misses", m.BlockCache.Misses,
		"cache_bytes", m.BlockCache.Size,
		"cache_blocks", m.BlockCache.Count,
		"memtable_bytes", m.MemTable.Size,
		"memtables", m.MemTable.Count,
		"zombie_memtable_bytes", m.MemTable.ZombieSize,
		"zombie_memtables", m.MemTable.ZombieCount,
		"table_iters", m.TableIters,
		"levels", levels.String(),
	}
}

func mib(b uint64) float64 { return float64(b) / (1 << 20) }
