package audit_test

import (
	"testing"

	"github.com/onceflight/onceflight/audit"
	"github.com/onceflight/onceflight/consumer"
)

// TestTypeReconcileMatchesConsumer: the audit repeats the reconciler's
// command type so as not to link the executor; if the executor ever renames
// it, the audit would count every reconcile request as unanswered.
func TestTypeReconcileMatchesConsumer(t *testing.T) {
	if audit.TypeReconcile != consumer.TypeReconcile {
		t.Fatalf("audit.TypeReconcile = %q, consumer.TypeReconcile = %q", audit.TypeReconcile, consumer.TypeReconcile)
	}
}
