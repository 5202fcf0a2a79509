package consumer_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/onceflight/onceflight/connectors"
	"github.com/onceflight/onceflight/consumer"
	"github.com/onceflight/onceflight/examples/connector/ledger"
	"github.com/onceflight/onceflight/onceflighttest"
	"github.com/onceflight/onceflight/schemas"
)

// A connector kind registered by the program is configured from the
// actions file (with its own settings) and runs like a built-in one: once
// per key, its result recorded, and an ambiguous answer confirmed.
func TestRegisteredConnector(t *testing.T) {
	path := filepath.Join(t.TempDir(), "onceflight.yaml")
	if err := os.WriteFile(path, []byte("actions:\n  accounts.credit:\n    connector: ledger\n    settings: {currency: EUR}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := consumer.LoadActions(path); err == nil || !strings.Contains(err.Error(), `unknown connector "ledger"`) {
		t.Fatalf("an unregistered kind: %v", err)
	}
	actions, err := consumer.LoadActions(path, "ledger")
	if err != nil {
		t.Fatal(err)
	}
	var l *ledger.Ledger
	h := onceflighttest.New(t)
	h.Config = actions
	h.Opts = []consumer.Option{consumer.WithConnector("ledger", func(a *consumer.Action) (connectors.Connector, error) {
		l = ledger.New(a.Settings["currency"])
		return l, nil
	})}
	h.Start(t.TempDir())
	l.AmbiguousOnce("c-2")
	h.SubmitAction("1", "accounts.credit", "acct-1", "c-1", `{"amount":5}`)
	h.SubmitAction("2", "accounts.credit", "acct-1", "c-2", `{"amount":7}`)
	h.SubmitAction("3", "accounts.credit", "acct-1", "c-1", `{"amount":5}`)
	seen := map[string][]schemas.Outcome{}
	h.Outcomes(3, seen, nil)
	for id, want := range map[string]string{"1": `{"balance":5,"currency":"EUR"}`, "2": `{"balance":12,"currency":"EUR"}`, "3": `{"balance":5,"currency":"EUR"}`} {
		o := seen[id]
		if len(o) != 1 || o[0].Record.Status != schemas.StatusSucceeded || string(o[0].Record.Result) != want {
			t.Errorf("command %s: %+v, want succeeded %s", id, o, want)
		}
	}
	if !seen["3"][0].Replayed || l.Effects("c-1") != 1 || l.Effects("c-2") != 1 {
		t.Errorf("replayed %v, effects c-1 %d c-2 %d", seen["3"][0].Replayed, l.Effects("c-1"), l.Effects("c-2"))
	}
	h.Audit()
}
