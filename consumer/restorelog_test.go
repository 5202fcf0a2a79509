package consumer

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"testing"
)

// A restore fenced by a rebalance is the group at work: it must not be
// logged as an error (alerts, the benchmark's log check), while any other
// failed restore must.
func TestRestoreFailureLevel(t *testing.T) {
	for _, c := range []struct {
		err  error
		want slog.Level
	}{
		{errFenced, slog.LevelInfo},
		{fmt.Errorf("restore partition 9: %w", errFenced), slog.LevelInfo},
		{context.DeadlineExceeded, slog.LevelError},
		{errors.New("journal read: broker gone"), slog.LevelError},
		{errJournalGap, slog.LevelError},
	} {
		if got := restoreFailureLevel(c.err); got != c.want {
			t.Errorf("restoreFailureLevel(%v) = %v, want %v", c.err, got, c.want)
		}
		if fenced := restoreFailureMsg(c.err) != "restore failed; rejoining the group"; fenced != (c.want == slog.LevelInfo) {
			t.Errorf("restoreFailureMsg(%v) = %q", c.err, restoreFailureMsg(c.err))
		}
	}
}
