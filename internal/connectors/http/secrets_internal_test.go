package httpconn

import "testing"

// TestRedactorAddsEachValueOnce: an OAuth2 token renewed after a 401 can
// come back the same; the list every answer is scanned against must not
// grow with each renewal.
func TestRedactorAddsEachValueOnce(t *testing.T) {
	var r redactor
	for range 3 {
		r.add(`tok"1`, "")
	}
	if n := len(r.mu.values); n != 2 { // the value and its JSON-escaped form
		t.Fatalf("%d values after adding one secret three times: %q", n, r.mu.values)
	}
	if got := r.string(`a tok"1 b`); got == `a tok"1 b` {
		t.Fatalf("not redacted: %q", got)
	}
}
