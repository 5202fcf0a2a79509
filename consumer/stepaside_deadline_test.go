package consumer_test

import (
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/onceflight/onceflight/onceflighttest"
	"github.com/onceflight/onceflight/schemas"
)

// A command that stepped aside for a system that is down is answered
// expired once its deadline passes, as it was when it waited for the
// system: parked, it was read again only when the system had room, and
// with KeepWaiting commands waiting for an hour (give_up_after) nobody
// was told it had expired until then.
func TestSteppedAsideCommandExpiresAtItsDeadline(t *testing.T) {
	t.Parallel() // it waits for a deadline
	h, _ := stuckDownHarness(t)
	h.Start(t.TempDir())
	for i := range 3 {
		h.SubmitAction(fmt.Sprintf("x%d", i), "payments.refund", fmt.Sprintf("ent-x%d", i), fmt.Sprintf("ent-x%d-0", i), `{}`)
	}
	onceflighttest.WaitFor(t, 30*time.Second, "commands stepped aside", func() bool { return h.Ex.Parked() > 0 })
	parked := h.Ex.Parked()
	deadline := time.Now().Add(2 * time.Second)
	r, err := schemas.EncodeCommand(schemas.Command{ID: "d1", Source: "test", Type: "payments.refund", Subject: "ent-d",
		IdempotencyKey: "ent-d-1", Data: json.RawMessage(`{}`), Deadline: &deadline}, schemas.Binary)
	if err != nil {
		t.Fatal(err)
	}
	r.Topic = "onceflight.commands"
	h.Produce(r)
	onceflighttest.WaitFor(t, 30*time.Second, "d1 stepped aside", func() bool { return h.Ex.Parked() > parked })
	seen := map[string][]schemas.Outcome{}
	outcomesOf(t, h, seen, []string{"d1"}, 30*time.Second)
	if rec := seen["d1"][0].Record; rec.Status != schemas.StatusRejected || rec.Error == nil || rec.Error.Code != schemas.CodeExpired {
		t.Fatalf("d1 answered %s %+v, want rejected expired", rec.Status, rec.Error)
	}
	if time.Now().Before(deadline) {
		t.Fatalf("d1 answered before its deadline")
	}
	h.Stop()
}
