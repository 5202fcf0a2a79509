package dedupe

import (
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"syscall"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
)

// ErrCorrupt is wrapped by Open's error when the index's files are damaged
// (a truncated or missing table or MANIFEST, a checksum mismatch found
// earlier) and WithRebuildOnCorruption was not given.
var ErrCorrupt = errors.New("dedupe: index corrupted")

// corruptMarker is written into the directory when Pebble finds damaged
// data while running, so that the next Open treats the directory as
// corrupted even though Pebble itself would open it again.
const corruptMarker = "ONCEFLIGHT-CORRUPT"

// WithRebuildOnCorruption makes Open move a corrupted index aside (to
// dir.corrupt-TIME, with a WARN naming the damage and the new path) and
// start an empty one. The index is a cache of the journal: the executor's
// restore rebuilds it, replaying each partition's journal from its start.
// Without it Open returns an error wrapping ErrCorrupt, which is what
// tools that only read the index want.
func WithRebuildOnCorruption() Option {
	return func(c *Settings) { c.rebuild = true }
}

// corrupted says whether Open's error means damaged files, which a
// rebuild cures, rather than a fault of the disk or of the setup (no
// space, an I/O error, permissions, a lock held by another process), which
// it does not: moving a directory aside for those would only throw the
// index away. Pebble marks checksum failures ErrCorruption; a table the
// MANIFEST names but the directory lacks, or of another size, and a
// malformed MANIFEST are reported without the mark, so their messages are
// matched.
func corrupted(err error) bool {
	if errors.Is(err, ErrCorrupt) || pebble.IsCorruptionError(err) {
		return true
	}
	for _, e := range []error{syscall.ENOSPC, syscall.EIO, syscall.EROFS, syscall.EAGAIN, os.ErrPermission} {
		if errors.Is(err, e) {
			return false
		}
	}
	msg := err.Error()
	for _, s := range []string{
		"object size mismatch",          // a table shorter or longer than the MANIFEST says
		"unknown to the objstorage",     // a table the MANIFEST names is missing
		"malformed manifest",            // a MANIFEST cut in its middle
		"corrupt",                       // "corrupt manifest", "corruption", ...
		"checksum mismatch",             // a damaged block
		"invalid table",                 // a table whose footer is damaged
		"bad magic number",              // idem
		"unable to read manifest",       // idem, for the MANIFEST
		"no such file or directory",     // the MANIFEST CURRENT points to is gone
		"pebble: database is corrupted", // some versions' wording
	} {
		if strings.Contains(msg, s) {
			return true
		}
	}
	return false
}

// moveAside renames a corrupted index directory out of the way.
func moveAside(dir string, cfg *Settings, cause error) error {
	aside := dir + ".corrupt-" + time.Now().UTC().Format("20060102T150405.000Z")
	if err := cfg.FS.Rename(dir, aside); err != nil {
		return fmt.Errorf("dedupe: index in %s corrupted (%w), and moving it aside failed: %w", dir, cause, err)
	}
	cfg.logger.Warn("dedupe: the index's files are damaged; moved them aside and started an empty index, which restore rebuilds from the journal. Delete the old directory once you have looked at it",
		"dir", dir, "moved_to", aside, "damage", cause.Error())
	return nil
}

// checkCorruptMarker fails with ErrCorrupt if an earlier run found damaged
// data in dir (corruptionListener).
func checkCorruptMarker(fs vfs.FS, dir string) error {
	f, err := fs.Open(fs.PathJoin(dir, corruptMarker))
	if err != nil {
		return nil // no marker (or no directory yet)
	}
	defer f.Close()
	what, _ := io.ReadAll(io.LimitReader(f, 4<<10))
	return fmt.Errorf("%w: %s (found by an earlier run, %s)", ErrCorrupt, strings.TrimSpace(string(what)), fs.PathJoin(dir, corruptMarker))
}

// corruptionListener handles damage Pebble finds while running (a block
// whose checksum fails on a read or in a compaction). Pebble's default
// calls Logger.Fatalf, which on a background compaction would stop the
// process; instead the store is failed (nothing more is answered from it)
// and a marker makes the next start rebuild it.
func corruptionListener(cfg *Settings, dir string, fail *failure) *pebble.EventListener {
	var l pebble.EventListener
	l = pebble.EventListener{
		DataCorruption: func(info pebble.DataCorruptionInfo) {
			msg := fmt.Sprintf("data corruption in %s: %v", info.Path, info.Details)
			cfg.logger.Error("dedupe: "+msg, "component", "pebble")
			fail.set(msg)
			if f, err := cfg.FS.Create(cfg.FS.PathJoin(dir, corruptMarker), vfs.WriteCategoryUnspecified); err == nil {
				_, _ = io.WriteString(f, msg+"\n")
				_ = f.Sync()
				_ = f.Close()
			}
		},
		WriteStallBegin: func(info pebble.WriteStallBeginInfo) {
			cfg.logger.Debug("dedupe: write stall", "component", "pebble", "reason", info.Reason)
		},
		WriteStallEnd: func() {
			cfg.logger.Debug("dedupe: write stall ended", "component", "pebble")
		},
		BackgroundError: func(err error) {
			cfg.logger.Error("dedupe: background error", "component", "pebble", "err", err)
			// A compaction that met a damaged block of a blob file:
			// Pebble reports that only as the compaction's error
			// (store.go, reportCorrupt).
			if pebble.IsCorruptionError(err) {
				l.DataCorruption(pebble.DataCorruptionInfo{Path: dir, Details: err})
			}
		},
	}
	return &l
}
