package decide

import (
	"strings"
	"testing"

	"github.com/onceflight/onceflight/schemas"
)

// TestInheritRows: every row of the table of inherited executions.
func TestInheritRows(t *testing.T) {
	rec := func(st schemas.Status, entity string) *schemas.Record {
		return &schemas.Record{IdempotencyKey: "k0", Entity: entity, Action: "pay", Status: st}
	}
	notDone := &schemas.Error{Code: schemas.CodeConnectorUnavailable, Message: "waiting for the external system"}
	hit := map[string]bool{}
	for _, tc := range []struct {
		name string
		rec  *schemas.Record
		row  string
		verd Verdict
	}{
		{"in progress", rec(schemas.StatusInProgress, "order-1"), "in-flight-first", Inherit},
		{"no record", nil, "in-flight-gone", Dispatch},
		{"settled meanwhile", rec(schemas.StatusSucceeded, "order-1"), "in-flight-gone", Dispatch},
		{"unresolved meanwhile", rec(schemas.StatusUnresolved, "order-1"), "in-flight-gone", Dispatch},
		{"a record with no entity (written before entities were recorded)", rec(schemas.StatusInProgress, ""), "in-flight-gone", Dispatch},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := InFlight(tc.rec)
			wantRow(t, d, tc.row, tc.verd, "")
			hit[d.Row] = true
		})
	}
	for _, tc := range []struct {
		name string
		gone bool
		last *schemas.Error
		row  string
		verd Verdict
		code string
	}{
		{"action gone", true, nil, "inherit-action-gone", Unresolved, schemas.CodeUnknownAction},
		{"action configured", false, nil, "inherit-confirm", Confirm, ""},
		{"last attempt not done", false, notDone, "inherit-not-done", Reexecute, ""},
		{"last attempt not done, action gone", true, notDone, "inherit-action-gone", Unresolved, schemas.CodeUnknownAction},
		{"confirmation pending", false, &schemas.Error{Code: schemas.CodeConfirmationPending}, "inherit-confirm", Confirm, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := *rec(schemas.StatusInProgress, "order-1")
			r.Error = tc.last
			d := Inheriting(r, !tc.gone)
			wantRow(t, d, tc.row, tc.verd, tc.code)
			if d.Verdict == Unresolved && !strings.Contains(d.Message, `"pay"`) {
				t.Fatalf("the message names the action: %q", d.Message)
			}
			hit[d.Row] = true
		})
	}
	covered(t, InheritRows, hit)
}
