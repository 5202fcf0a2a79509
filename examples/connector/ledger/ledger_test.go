package ledger_test

import (
	"testing"

	"github.com/onceflight/onceflight/connectors/connectortest"
	"github.com/onceflight/onceflight/examples/connector/ledger"
)

// The example connector passes the suite every connector must pass.
func TestConformance(t *testing.T) {
	connectortest.Run(t, connectortest.Features{Confirm: true, IdempotentByKey: true}, func(t *testing.T) connectortest.Harness {
		l := ledger.New("EUR")
		return connectortest.Harness{Conn: l, Effects: l.Effects, ApplyThenAmbiguous: l.AmbiguousOnce}
	})
}
