package cli

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"
)

// TestServeLogsBrokerFeatures: at start serve logs whether the brokers run
// transactions v2 (KIP-890), read from their finalized features (kfake
// finalizes transaction.version 2, as Kafka 4.x does on a new cluster), so
// an operator sees which transaction protocol the executor meets.
func TestServeLogsBrokerFeatures(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	addr, _ := testBroker(ctx, t)
	httpAddr := freeAddr(t)
	sctx, stop := context.WithCancel(ctx)
	done := make(chan string, 1)
	go func() {
		code, _, errOut := execCLI(sctx, "serve", "--brokers", addr, "--config", writeConfig(t), "--data-dir", t.TempDir(),
			"--http", httpAddr, "--partitions", "2", "--session-timeout", "6s", "--executor-id", "features")
		done <- fmt.Sprintf("exit %d\n%s", code, errOut)
	}()
	for {
		resp, err := http.Get("http://" + httpAddr + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				break
			}
		}
		select {
		case out := <-done:
			t.Fatalf("serve stopped before it was ready: %s", out)
		case <-ctx.Done():
			t.Fatal("serve not ready in time")
		case <-time.After(100 * time.Millisecond):
		}
	}
	stop()
	out := <-done
	if !strings.Contains(out, `msg="brokers' features" transactions_v2=true`) || !strings.Contains(out, "transactions v2, KIP-890: on") {
		t.Errorf("serve's log does not say the brokers run transactions v2:\n%s", out)
	}
}
