package cli

import (
	"bytes"
	"context"
	"regexp"
	"strings"
	"testing"
	"time"
)

// The demo is what a new user runs first (make demo): it must work on a
// fresh machine and show every case with the expected outcome (runDemo
// returns an error when any outcome differs).
func TestDemo(t *testing.T) {
	if testing.Short() {
		t.Skip("short mode")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var out bytes.Buffer
	if err := runDemo(ctx, &out, false, "127.0.0.1:0", false); err != nil {
		t.Fatalf("demo: %v\n%s", err, out.String())
	}
	for _, want := range []string{"same key again", "idempotency_key_reused", "unknown_action", "invalid_command", "timeout, then confirmed", "operator resolves it", "duplicate_business_key", "operator approves it",
		"$ onceflight actions", "messages.send (http)", "WARNING", "$ onceflight explain msg-9", "resolved as succeeded by demo-operator", "operator console: http://127.0.0.1:",
		"$ onceflight explain refund-2001", "established by confirmation", "established by operator"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("demo output lacks %q:\n%s", want, out.String())
		}
	}
	// The closing line counts every key the table shows an effect for,
	// each exactly once.
	line := regexp.MustCompile(`effects at the refunds service: (.*) \(`).FindStringSubmatch(out.String())
	if line == nil {
		t.Fatalf("no effects line:\n%s", out.String())
	}
	for _, want := range []string{"refund-1042=1", "refund-2001=1", "msg-9=1", "refund-o77-b=1"} {
		if !strings.Contains(line[1], want) {
			t.Errorf("effects line %q lacks %s", line[1], want)
		}
	}
	if strings.Contains(line[1], "=2") {
		t.Errorf("effects line %q shows a key executed twice", line[1])
	}
}
