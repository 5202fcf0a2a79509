package apifake_test

import (
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/onceflight/onceflight/internal/apifake"
)

func post(t *testing.T, url, entity, key, token string) *http.Response {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url, strings.NewReader(`{}`))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Onceflight-Entity", entity)
	req.Header.Set("Idempotency-Key", key)
	req.Header.Set("Onceflight-Fencing-Token", token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp
}

// TestEffectsCountsOverlapsAndFences: two POSTs of one entity in flight
// together are an overlap; a repeated key is a second effect (the service
// is not idempotent); a token below the entity's highest is refused
// without an effect; a 429 before the effect carries Retry-After and
// applies nothing.
func TestEffectsCountsOverlapsAndFences(t *testing.T) {
	s := apifake.NewEffects(t, apifake.WithFencing(), apifake.WithDelay(func() time.Duration { return 100 * time.Millisecond }),
		apifake.WithScript(func(key string, n int) apifake.Fault {
			if key == "busy" {
				return apifake.Fault{Before: true, Status: http.StatusTooManyRequests, RetryAfter: "2"}
			}
			return apifake.None
		}))
	var wg sync.WaitGroup
	for _, k := range []string{"a", "b"} {
		wg.Go(func() { post(t, s.URL("ex1"), "e1", k, "5") })
	}
	wg.Wait()
	if n := len(s.Overlaps()); n != 1 {
		t.Errorf("%d overlaps of e1, want 1: %v", n, s.Overlaps())
	}
	if r := post(t, s.URL(""), "e2", "c", "3"); r.StatusCode != http.StatusCreated {
		t.Errorf("POST c: %s", r.Status)
	}
	post(t, s.URL(""), "e2", "c", "3")
	if n := s.Effects("c"); n != 2 {
		t.Errorf("c took effect %d times, want 2 (not idempotent)", n)
	}
	if r := post(t, s.URL(""), "e2", "d", "2"); r.StatusCode != http.StatusConflict || s.Effects("d") != 0 || len(s.Refused()) != 1 {
		t.Errorf("stale token: %s, %d effects, %d refused; want 409, none, 1", r.Status, s.Effects("d"), len(s.Refused()))
	}
	if r := post(t, s.URL(""), "e3", "busy", "1"); r.StatusCode != http.StatusTooManyRequests || r.Header.Get("Retry-After") != "2" || s.Effects("busy") != 0 {
		t.Errorf("busy: %s Retry-After %q, %d effects", r.Status, r.Header.Get("Retry-After"), s.Effects("busy"))
	}
	if s.InflightOf("ex1") != 0 || s.Posts() != 6 {
		t.Errorf("in flight %d, POSTs %d; want 0, 6", s.InflightOf("ex1"), s.Posts())
	}
	resp, err := http.Get(s.URL("") + "/c")
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("confirm c: %v %v", resp, err)
	}
	resp.Body.Close()
	resp, err = http.Get(s.URL("") + "/d")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNotFound {
		t.Errorf("confirm d (refused): %s, want 404", resp.Status)
	}
}
