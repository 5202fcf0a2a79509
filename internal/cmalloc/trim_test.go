package cmalloc

import (
	"io"
	"log/slog"
	"testing"
)

// TestTrimmerReturnsHoles: 64 MiB of C blocks with all but every eighth
// freed stay resident (the arena cannot shrink past the live blocks); a
// Trimmer that expects less gives the holes back, one that expects more
// leaves them.
func TestTrimmerReturnsHoles(t *testing.T) {
	if !trimmable() {
		t.Skip("not glibc with cgo: nothing to trim")
	}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	release := fragment(4096, 16<<10, 8)
	defer release()
	before, err := rssAnon()
	if err != nil {
		t.Fatal(err)
	}
	c, err := cResident()
	if err != nil {
		t.Fatal(err)
	}
	if trimmed, err := (Trimmer{Expected: func() int64 { return c + 64<<20 }, Log: log}).check(); err != nil || trimmed {
		t.Fatalf("a trimmer expecting more than the C memory trimmed (%v, %v)", trimmed, err)
	}
	if after, _ := rssAnon(); before-after > 16<<20 {
		t.Fatalf("RssAnon fell by %d MiB without a trim: the holes were not resident", (before-after)>>20)
	}
	if trimmed, err := (Trimmer{Expected: func() int64 { return 0 }, Log: log}).check(); err != nil || !trimmed {
		t.Fatalf("a trimmer expecting nothing did not trim (%v, %v)", trimmed, err)
	}
	after, err := rssAnon()
	if err != nil {
		t.Fatal(err)
	}
	// 56 MiB of holes, less the pages at each hole's edges.
	if got := before - after; got < 40<<20 {
		t.Fatalf("the trim gave back %d MiB of the 56 MiB of holes, want at least 40", got>>20)
	}
}

func TestRssAnonReads(t *testing.T) {
	n, err := rssAnon()
	if err != nil {
		t.Skipf("no /proc/self/status here: %v", err)
	}
	if n <= 0 {
		t.Fatalf("RssAnon %d", n)
	}
}
