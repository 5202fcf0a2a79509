package consumer_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/onceflight/onceflight/internal/dedupe"
	"github.com/onceflight/onceflight/onceflighttest"
	"github.com/onceflight/onceflight/schemas"
)

// A record past dedupe_retention is pruned to a stub: its result, data and
// hash are gone. The executor relied on answering key_expired from the
// same retention Prune used, so that a stub was never replayed; but
// dedupe_retention is configuration, and a stub written under a shorter
// one (or before the wall clock stepped back) was replayed as the key's
// recorded outcome after it was raised: status succeeded, no result, no
// hash (G2: a repeat gets the recorded result, or key_expired). A stub is
// never replayed: its key is answered key_expired.
func TestStubNeverReplayedAfterRetentionRaised(t *testing.T) {
	h := onceflighttest.New(t)
	retention := func(keep, memory string) {
		h.UseConfig(fmt.Sprintf("dedupe_retention: %s\nkey_memory: %s\nactions:\n  noop.ping:\n    connector: noop\n    effects_file: %s\n", keep, memory, h.Effects))
	}
	dir := t.TempDir()
	retention("1s", "2h")
	h.Start(dir)
	seen := map[string][]schemas.Outcome{}
	h.Submit("c1", "order-1", "k1", `{"amount":7}`)
	h.Outcomes(1, seen, nil)
	orig := seen["c1"][0].Record
	if orig.Status != schemas.StatusSucceeded || orig.Hash == "" {
		t.Fatalf("first: %+v", orig)
	}
	h.Stop()

	// The executor's own prune, as it runs a minute later with
	// dedupe_retention 1s: k1 becomes a stub.
	s, err := dedupe.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	st, err := s.Prune(context.Background(), time.Now().Add(time.Minute), time.Second, 2*time.Hour)
	if cerr := s.Close(); err == nil {
		err = cerr
	}
	if err != nil || st.Stubbed == 0 {
		t.Fatalf("prune: %+v %v", st, err)
	}

	// dedupe_retention raised: k1 is within it again, but only its stub
	// is kept.
	retention("30m", "1h")
	h.Start(dir)
	h.Submit("c2", "order-1", "k1", `{"amount":7}`)
	h.Outcomes(2, seen, nil)
	o := seen["c2"][0]
	switch {
	case o.Record.Status == schemas.StatusRejected && o.Record.Error != nil && o.Record.Error.Code == schemas.CodeKeyExpired:
	case o.Replayed && o.Record.Hash == orig.Hash:
	default:
		t.Fatalf("repeat of a pruned key: replayed %v, status %s, hash %q, result %s; want key_expired (or the recorded outcome, hash %q)",
			o.Replayed, o.Record.Status, o.Record.Hash, o.Record.Result, orig.Hash)
	}
	if n := h.EffectsOf("order-1", "k1"); n != 1 {
		t.Fatalf("k1 took effect %d times", n)
	}
}
