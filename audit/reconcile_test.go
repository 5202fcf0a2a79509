package audit_test

import (
	"testing"

	"github.com/onceflight/onceflight/schemas"
)

// TestTypeReconcileMatchesConsumer: the audit repeats the reconciler's
// command type so as not to link the executor; if the executor ever renames
// it, the audit would count every reconcile request as unanswered.
func TestTypeReconcileMatchesConsumer(t *testing.T) {
	if schemas.TypeReconcile != schemas.TypeReconcile {
		t.Fatalf("schemas.TypeReconcile = %q, schemas.TypeReconcile = %q", schemas.TypeReconcile, schemas.TypeReconcile)
	}
}
