package decide

import (
	"errors"
	"testing"

	"github.com/onceflight/onceflight/schemas"
)

// TestRouteRows: every row of the routing table.
func TestRouteRows(t *testing.T) {
	tooBig := errors.New("forward copy is 2000000 bytes, over max.message.bytes 1048576")
	hit := map[string]bool{}
	for _, tc := range []struct {
		name string
		in   RouteInput
		row  string
		verd Verdict
		code string
		msg  string
	}{
		{"not a command, entity readable", RouteInput{DecodeErr: &schemas.DecodeError{Reason: "no id", Entity: "order-1"}}, "undecodable", Deadletter, schemas.CodeInvalidCommand, "no id"},
		{"not a command, no entity", RouteInput{DecodeErr: &schemas.DecodeError{Reason: "not json"}}, "undecodable", Deadletter, "", "not json"},
		{"not a command, other error", RouteInput{DecodeErr: errors.New("boom")}, "undecodable", Deadletter, "", "boom"},
		{"undecodable beats misrouted", RouteInput{DecodeErr: errors.New("boom"), Partition: 1, Want: 2}, "undecodable", Deadletter, "", "boom"},
		{"misrouted, copy not built", RouteInput{Partition: 1, Want: 2}, "misrouted-copy", BuildCopy, "", ""},
		{"misrouted, copy too large", RouteInput{Partition: 1, Want: 2, CopyKnown: true, CopyErr: tooBig}, "too-large-to-forward", Reject, schemas.CodeTooLarge, tooBig.Error()},
		{"misrouted, copy fits", RouteInput{Partition: 1, Want: 2, CopyKnown: true}, "forward", Forward, "", ""},
		{"on its partition", RouteInput{Partition: 2, Want: 2}, "dispatch", Dispatch, "", ""},
		{"on its partition, a stale copy answer is ignored", RouteInput{Partition: 2, Want: 2, CopyKnown: true, CopyErr: tooBig}, "dispatch", Dispatch, "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := Route(tc.in)
			wantRow(t, d, tc.row, tc.verd, tc.code)
			if d.Message != tc.msg {
				t.Fatalf("message %q, want %q", d.Message, tc.msg)
			}
			if d.Journal {
				t.Fatalf("a routing answer never becomes a key's record: %+v", d)
			}
			if got := d.Verdict == Reject; d.Deadletter != got {
				t.Fatalf("deadletter %v for verdict %s: only a command too large to forward is rejected and deadlettered", d.Deadletter, d.Verdict)
			}
			hit[d.Row] = true
		})
	}
	covered(t, RouteRows, hit)
}
