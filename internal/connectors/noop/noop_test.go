package noop_test

import (
	"path/filepath"
	"testing"

	"github.com/onceflight/onceflight/connectors/connectortest"
	"github.com/onceflight/onceflight/internal/connectors/noop"
)

func TestConformance(t *testing.T) {
	connectortest.Run(t, connectortest.Features{Confirm: true}, func(t *testing.T) connectortest.Harness {
		c := noop.New(noop.WithEffectsFile(filepath.Join(t.TempDir(), "effects.jsonl")))
		return connectortest.Harness{
			Conn: c,
			Effects: func(key string) int {
				n, err := c.Effects(key)
				if err != nil {
					t.Fatal(err)
				}
				return n
			},
		}
	})
}

func TestNoEffectsFileCannotConfirm(t *testing.T) {
	if noop.New().CanConfirm() {
		t.Fatal("noop without effects file claims to confirm")
	}
}
