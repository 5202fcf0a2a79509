package schemas

import (
	"fmt"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"
)

// Whether a header counts twice does not depend on how many headers the
// record has: the few-headers path and the map path lower names alike
// (lowerEqual, strings.ToLower), as sdk-go does. With strings.EqualFold the
// few-headers path took ce_ſubject (long s) for ce_subject, the map path
// did not.
func TestRepeatedHeaderFoldsAsItsMap(t *testing.T) {
	for _, tc := range []struct {
		a, b  string
		twice bool
	}{
		{"ce_subject", "CE_Subject", true},
		{"ce_subject", "ce_ſubject", false},
		{"ce_kind", "ce_\u212aind", true}, // the Kelvin sign lowers to k
	} {
		for _, pad := range []int{0, 40} {
			hs := []kgo.RecordHeader{{Key: tc.a}, {Key: tc.b}}
			for i := range pad {
				hs = append(hs, kgo.RecordHeader{Key: fmt.Sprintf("x-pad-%d", i)})
			}
			if got := repeatedHeader(hs) != ""; got != tc.twice {
				t.Errorf("%q and %q among %d headers: repeated %v, want %v", tc.a, tc.b, len(hs), got, tc.twice)
			}
		}
	}
	if lowerEqual([]byte("subject"), []byte("ſubject")) || !lowerEqual([]byte("Subject"), []byte("subject")) {
		t.Error("lowerEqual on bytes does not lower as strings.ToLower")
	}
}
