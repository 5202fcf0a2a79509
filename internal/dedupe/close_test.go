package dedupe

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/onceflight/onceflight/schemas"
)

// TestCloseWaitsForCallsInside (issue 19): Close while the executor's
// chores — prune, the gauges' ByStatus and CountUnresolved, lookups, a
// batch commit — are inside the store. Before Close waited for them,
// Pebble panicked "pebble: closed" under them, or Close failed on their open snapshots.
// Every call either finishes or returns ErrClosed; none panics (run it
// under -race too).
func TestCloseWaitsForCallsInside(t *testing.T) {
	for i := range 50 {
		s, err := Open(t.TempDir())
		if err != nil {
			t.Fatal(err)
		}
		old := time.Now().Add(-48 * time.Hour)
		var recs []schemas.Record
		for k := range 50 {
			r := rec(fmt.Sprintf("k%d", k), "order-1", schemas.StatusSucceeded, 0)
			r.FinishedAt = &old
			recs = append(recs, r)
		}
		putTB(t, s, recs...)
		var wg sync.WaitGroup
		calls := []func() error{
			func() error { _, err := s.Prune(context.Background(), time.Now(), time.Hour, 2*time.Hour); return err },
			func() error { _, err := s.ByStatus(schemas.StatusSucceeded, 0); return err },
			func() error { _, err := s.CountUnresolved([]int32{0}); return err },
			func() error { _, _, err := s.Lookup("order-1", "k7"); return err },
			func() error { _, err := s.LookupKey("k8"); return err },
			func() error { _, _, err := s.Entity("order-1"); return err },
			func() error {
				b := s.NewBatch()
				defer b.Close()
				if _, _, err := b.Lookup("order-1", "k9"); err != nil {
					return err
				}
				b.PutRecord(rec("new", "order-2", schemas.StatusSucceeded, 0))
				return b.Commit()
			},
		}
		// Each chore loops until the store refuses it; Close comes once
		// every one of them is running.
		errs := make(chan error, len(calls))
		var running sync.WaitGroup
		running.Add(len(calls))
		for _, call := range calls {
			wg.Add(1)
			go func() {
				defer wg.Done()
				first := true
				defer func() {
					if r := recover(); r != nil {
						errs <- fmt.Errorf("panic: %v", r)
					}
					if first {
						running.Done()
					}
				}()
				for {
					err := call()
					if first {
						first = false
						running.Done()
					}
					if errors.Is(err, ErrClosed) {
						return
					}
					if err != nil {
						errs <- err
						return
					}
				}
			}()
		}
		running.Wait()
		if err := s.Close(); err != nil {
			t.Fatalf("round %d: close: %v", i, err)
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatalf("round %d: a call racing Close: %v", i, err)
		}
	}
}
