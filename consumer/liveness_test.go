package consumer

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// TestReadinessFollowsMembership: contact with the brokers is not
// membership. After a network fault heals, a fetch is answered (contact)
// before the group has taken this member back; once kgo reports the
// membership lost, the executor is not ready until a new assignment is
// restored, however recent its contact.
func TestReadinessFollowsMembership(t *testing.T) {
	e, err := New(Config{Brokers: []string{"127.0.0.1:1"}, DataDir: t.TempDir()}, nil, WithRegisterer(prometheus.NewRegistry()))
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	e.ready.Store(true)
	e.lastContact.Store(time.Now().UnixNano())
	if !e.Ready() {
		t.Fatalf("a member in contact reads not ready: %s", e.NotReady())
	}
	e.onLost(context.Background(), nil, map[string][]int32{})
	e.lastContact.Store(time.Now().UnixNano())
	if e.Ready() {
		t.Fatal("ready after the membership was lost, on contact alone")
	}
	if r := e.NotReady(); !strings.Contains(r, "consumer group") {
		t.Errorf("NotReady = %q, want it to name the group membership", r)
	}
	e.onAssigned(context.Background(), nil, map[string][]int32{})
	if !e.Ready() {
		t.Fatalf("not ready after a new (empty) assignment: %s", e.NotReady())
	}
}
