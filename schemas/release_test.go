package schemas_test

import (
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/onceflight/onceflight/internal/wire"
	. "github.com/onceflight/onceflight/schemas"
)

// TestReleasePositionRoundTrip: the release's position (docs/events.md#release)
// is sealed into the record's hash in JCS order, decodes back, and a
// release without one (records written before the field) still verifies.
func TestReleasePositionRoundTrip(t *testing.T) {
	off := int64(1250)
	for _, rel := range []*Resolution{
		{By: "ann", At: time.Date(2026, 12, 2, 1, 0, 0, 0, time.UTC), Reason: "redo", As: StatusSucceeded, DecisionID: "rel-1", Offset: &off},
		{By: "ann", At: time.Date(2026, 12, 2, 1, 0, 0, 0, time.UTC), Reason: "redo", As: StatusSucceeded},
	} {
		rec := testRecord()
		rec.Release = rel
		b, err := wire.SealRecord(&rec)
		if err != nil {
			t.Fatal(err)
		}
		if h, err := wire.RecordHash(b); err != nil || h != rec.Hash {
			t.Fatalf("hash %s %v, sealed %s", h, err, rec.Hash)
		}
		if rel.Offset != nil && !strings.Contains(string(b), `"decision_id":"rel-1","offset":1250,"reason":"redo"`) {
			t.Fatalf("release members not in JCS order: %s", b)
		}
		back, err := UnmarshalRecord(b)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(back.Release, rel) {
			t.Fatalf("release decoded %+v, want %+v", back.Release, rel)
		}
	}
}

// TestResolutionAfter: a decision applies to the commands after its
// position only; one without a position (older records) to every command.
func TestResolutionAfter(t *testing.T) {
	off := int64(10)
	r := &Resolution{Offset: &off}
	if r.After(9) || r.After(10) || !r.After(11) {
		t.Fatal("a positioned decision must apply exactly to commands after it")
	}
	if !(&Resolution{}).After(0) {
		t.Fatal("a decision without a position applies to every command")
	}
}
