package cmalloc

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"os"
	"runtime/metrics"
	"strconv"
	"time"
)

// Trimmer gives the free pages between the live blocks of glibc's arenas
// back to the system (malloc_trim) when the process's C memory is well
// above what it means to hold.
//
// Pebble's block cache allocates each block with malloc, in sizes that
// vary with the tables (4 KiB data blocks, 16 KiB value blocks, index and
// filter blocks), and frees it when the cache evicts it, in no order. An
// arena only gives memory back from its top, so the holes evicted blocks
// leave stay resident when the next blocks do not fit them: draining
// 300 000 repeats, glibc's arenas held 102 MB for 53 MB of blocks in use,
// 45 MB of them free, and the C memory kept growing with the backlog (peak
// RSS 197 MB at 1 M repeats, 169 MB draining 1 M new keys). A trim each
// second held those peaks at 164 and 131 MB (BENCHMARKS.md, "Round 16
// (lead)"). A trim holds each arena's lock while it walks the free chunks
// (1–20 ms when many holes wait, under 0.1 ms when few do), so it runs only
// when the holes are worth it (Slack), not on a clock alone.
//
// Outside glibc with cgo there is nothing to trim and Run returns at once.
type Trimmer struct {
	// Expected is the C memory the process holds in use now: the
	// blocks in Pebble's cache and its memtables.
	Expected func() int64
	// Slack is how far the C memory may rise above Expected before a
	// trim.
	Slack int64
	// Every is how often the C memory is estimated (a read of
	// /proc/self/status and of the Go runtime's metrics).
	Every time.Duration
	Log   *slog.Logger
}

// Run checks every t.Every until ctx is done.
func (t Trimmer) Run(ctx context.Context) {
	if !trimmable() {
		return
	}
	tick := time.NewTicker(t.Every)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		if _, err := t.check(); err != nil {
			t.Log.Warn("malloc trim: cannot estimate the C memory; no more trims", "err", err)
			return
		}
	}
}

// check trims if the C memory is above Expected + Slack, and says
// whether it did.
func (t Trimmer) check() (bool, error) {
	c, err := cResident()
	if err != nil {
		return false, err
	}
	want := t.Expected()
	if c <= want+t.Slack {
		return false, nil
	}
	start := time.Now()
	trim()
	took := time.Since(start)
	if t.Log.Enabled(context.Background(), slog.LevelDebug) {
		after, _ := cResident()
		t.Log.Debug("malloc trim", "c_bytes_before", c, "c_bytes_after", after, "in_use_bytes", want, "took", took)
	}
	return true, nil
}

// cResident estimates the C memory resident: the process's anonymous
// resident memory less what the Go runtime holds from the system and has
// not given back. The Go figure counts pages it mapped but never touched
// too, so the estimate errs low: a trim comes late, never needlessly.
func cResident() (int64, error) {
	anon, err := rssAnon()
	if err != nil {
		return 0, err
	}
	return anon - goResident(), nil
}

func goResident() int64 {
	s := []metrics.Sample{
		{Name: "/memory/classes/total:bytes"},
		{Name: "/memory/classes/heap/released:bytes"},
	}
	metrics.Read(s)
	return int64(s[0].Value.Uint64()) - int64(s[1].Value.Uint64())
}

// rssAnon is RssAnon of /proc/self/status, in bytes.
func rssAnon() (int64, error) {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0, fmt.Errorf("cmalloc: %w", err)
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		rest, ok := bytes.CutPrefix(sc.Bytes(), []byte("RssAnon:"))
		if !ok {
			continue
		}
		f := bytes.Fields(rest)
		if len(f) != 2 || string(f[1]) != "kB" {
			return 0, fmt.Errorf("cmalloc: /proc/self/status: RssAnon %q", rest)
		}
		kb, err := strconv.ParseInt(string(f[0]), 10, 64)
		if err != nil {
			return 0, fmt.Errorf("cmalloc: /proc/self/status: RssAnon: %w", err)
		}
		return kb << 10, nil
	}
	return 0, fmt.Errorf("cmalloc: /proc/self/status has no RssAnon")
}
