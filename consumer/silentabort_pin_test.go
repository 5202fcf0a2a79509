package consumer

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"
)

// The watch recognises franz-go's line by its text, and the franz-go this
// module builds with still logs that text where it turns a commit into an
// abort: an upgrade that rewords it fails here instead of leaving the
// committer blind (it would apply an aborted transaction: G4, G5).
func TestSilentAbortLineIsFranzGos(t *testing.T) {
	var w silentAbortWatch
	w.Log(kgo.LogLevelInfo, "opening connection to broker")
	if w.seen() {
		t.Fatal("an unrelated line was taken for a silent abort")
	}
	w.Log(kgo.LogLevelInfo, silentAbortLine+" but produces were attempted; issuing an abort")
	if !w.seen() {
		t.Fatal("franz-go's silent-abort line was not noticed")
	}
	w.since()
	if w.seen() {
		t.Fatal("since did not forget")
	}
	out, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", "github.com/twmb/franz-go").Output()
	if err != nil {
		t.Skipf("go list: %v (no module source to check)", err)
	}
	src, err := os.ReadFile(filepath.Join(strings.TrimSpace(string(out)), "pkg", "kgo", "txn.go"))
	if err != nil {
		t.Skipf("franz-go's txn.go: %v", err)
	}
	i := strings.Index(string(src), `"`+silentAbortLine)
	if i < 0 {
		t.Fatalf("franz-go's txn.go no longer logs %q: find what it logs (or returns) when EndTransaction(TryCommit) issues an abort, and watch that", silentAbortLine)
	}
	if !strings.Contains(string(src[max(0, i-2000):i]), "commit = TryAbort") && !strings.Contains(string(src[i:min(len(src), i+600)]), "commit = TryAbort") {
		t.Fatalf("franz-go's %q line is no longer where it turns a commit into an abort", silentAbortLine)
	}
}
