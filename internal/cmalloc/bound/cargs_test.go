//go:build cgo && linux

package bound

import "testing"

func TestCBoundMatches(t *testing.T) {
	if cArenas() != Arenas {
		t.Errorf("OF_ARENAS = %d, Arenas = %d", cArenas(), Arenas)
	}
}
