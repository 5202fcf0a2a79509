package ingress

import (
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/onceflight/onceflight/cli/internal/openapitest"
	"github.com/onceflight/onceflight/onceflighttest"
	"github.com/onceflight/onceflight/schemas"
)

type response struct {
	code    int
	header  http.Header
	answer  Answer
	problem Problem
}

func post(t *testing.T, base, path, body string, hdr map[string]string) response {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, base+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	// Every answer of the ingress, success or problem, is one the
	// OpenAPI document describes.
	openapitest.Check(t, req, resp, raw)
	r := response{code: resp.StatusCode, header: resp.Header}
	if strings.HasPrefix(resp.Header.Get("Content-Type"), "application/problem+json") {
		err = json.Unmarshal(raw, &r.problem)
	} else {
		err = json.Unmarshal(raw, &r.answer)
	}
	if err != nil {
		t.Fatalf("POST %s: %d %q: %v", path, resp.StatusCode, raw, err)
	}
	return r
}

func TestIngress(t *testing.T) {
	release := make(chan struct{})
	slow := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-release:
		case <-r.Context().Done():
		}
		fmt.Fprint(w, `{"done":true}`)
	}))
	defer slow.Close()
	released := false
	defer func() {
		if !released {
			close(release)
		}
	}()
	oc, cfg := onceflighttest.Start(t, fmt.Sprintf(`actions:
  noop.ping:
    connector: noop
  slow.thing:
    connector: http
    url: %s/thing
    timeout: 60s
`, slow.URL))
	known := func(a string) bool { _, ok := cfg.Action(a); return ok }
	srv := httptest.NewServer(Handler(Config{Client: oc, Known: known, MaxDataBytes: 64, Token: []byte("s3cret")}))
	defer srv.Close()
	auth := "Bearer s3cret"
	h := func(kv ...string) map[string]string {
		m := map[string]string{"Authorization": auth}
		for i := 0; i+1 < len(kv); i += 2 {
			m[kv[i]] = kv[i+1]
		}
		return m
	}

	first := post(t, srv.URL, "/v1/commands/noop.ping?entity=dev-1", `{"n":1}`, h("Idempotency-Key", "k1", "Prefer", "wait=10"))
	if first.code != http.StatusOK || first.answer.Status != "succeeded" || first.answer.Replayed || first.answer.Record == nil {
		t.Fatalf("first: %+v", first)
	}
	if first.header.Get(HeaderReplayed) != "" {
		t.Errorf("a first execution is marked %s: %q", HeaderReplayed, first.header.Get(HeaderReplayed))
	}
	if first.header.Get("Preference-Applied") != "wait=10" {
		t.Errorf("Preference-Applied = %q", first.header.Get("Preference-Applied"))
	}
	again := post(t, srv.URL, "/v1/commands/noop.ping", `{"n":1}`, h("Idempotency-Key", `"k1"`, "Onceflight-Entity", "dev-1", "Prefer", "respond-async, wait=10"))
	if again.code != http.StatusOK || !again.answer.Replayed || string(again.answer.Result) != string(first.answer.Result) || again.answer.CommandID == first.answer.CommandID {
		t.Errorf("repeat: %+v, first %+v", again.answer, first.answer)
	}
	if again.header.Get(HeaderReplayed) != "true" {
		t.Errorf("a replayed answer has %s %q, want true", HeaderReplayed, again.header.Get(HeaderReplayed))
	}
	reused := post(t, srv.URL, "/v1/commands/noop.ping?entity=dev-1&wait=10s", `{"n":2}`, h("Idempotency-Key", "k1"))
	if reused.code != http.StatusUnprocessableEntity || reused.answer.Error == nil || reused.answer.Error.Code != schemas.CodeKeyReused {
		t.Errorf("reused key: %+v", reused)
	}

	accepted := post(t, srv.URL, "/v1/commands/noop.ping?entity=dev-2", ``, h("Idempotency-Key", "k2"))
	if accepted.code != http.StatusAccepted || accepted.answer.Status != "accepted" || accepted.answer.CommandID == "" ||
		accepted.header.Get("Location") != "/v1/executions/k2?entity=dev-2" {
		t.Errorf("no wait: %+v %v", accepted.answer, accepted.header)
	}

	pending := post(t, srv.URL, "/v1/commands/slow.thing?entity=dev-3", `{}`, h("Idempotency-Key", "k3", "Prefer", "wait=1"))
	if pending.code != http.StatusAccepted || pending.answer.Status != "pending" || pending.header.Get("Location") == "" {
		t.Errorf("no outcome in time: %+v", pending)
	}
	// The draft's "retry while the original request is still being
	// processed": 409 with Retry-After for a retry that does not wait; a
	// retry that asks to wait still waits (and is published: the executor
	// answers it after the first).
	busy := post(t, srv.URL, "/v1/commands/slow.thing?entity=dev-3", `{}`, h("Idempotency-Key", "k3"))
	if busy.code != http.StatusConflict || busy.problem.Code != CodeInProgress || busy.header.Get("Retry-After") == "" ||
		busy.problem.Type != ProblemBase+CodeInProgress {
		t.Errorf("retry in flight without wait: %d %+v %v", busy.code, busy.problem, busy.header)
	}
	other := post(t, srv.URL, "/v1/commands/slow.thing?entity=dev-4", `{}`, h("Idempotency-Key", "k3"))
	if other.code != http.StatusAccepted || other.answer.Status != "accepted" {
		t.Errorf("the same key for another entity is another operation: %d %+v %+v", other.code, other.answer, other.problem)
	}
	waited := post(t, srv.URL, "/v1/commands/slow.thing?entity=dev-3", `{}`, h("Idempotency-Key", "k3", "Prefer", "wait=1"))
	if waited.code != http.StatusAccepted || waited.answer.Status != "pending" {
		t.Errorf("retry in flight with Prefer: wait: %d %+v %+v", waited.code, waited.answer, waited.problem)
	}
	close(release)
	released = true
	done := post(t, srv.URL, "/v1/commands/slow.thing?entity=dev-3", `{}`, h("Idempotency-Key", "k3", "Prefer", "wait=30"))
	if done.code != http.StatusOK || done.answer.Status != "succeeded" {
		t.Errorf("after release: %+v", done)
	}
	// Once the first outcome has been seen, a retry without wait is
	// published again (and answered from the record by the executor).
	deadline := time.Now().Add(20 * time.Second)
	for {
		r := post(t, srv.URL, "/v1/commands/slow.thing?entity=dev-3", `{}`, h("Idempotency-Key", "k3"))
		if r.code == http.StatusAccepted && r.answer.Status == "accepted" {
			break
		}
		if r.code != http.StatusConflict || time.Now().After(deadline) {
			t.Fatalf("retry after the outcome: %d %+v %+v, want 202 accepted once the outcome was read", r.code, r.answer, r.problem)
		}
		time.Sleep(50 * time.Millisecond)
	}

	bad := []struct {
		name, path, body string
		hdr              map[string]string
		code             int
		code2            string
	}{
		{"unknown action", "/v1/commands/nope?entity=e", `{}`, h("Idempotency-Key", "x"), http.StatusNotFound, schemas.CodeUnknownAction},
		{"control command", "/v1/commands/onceflight.resolve?entity=e", `{"key":"k1","as":"failed","reason":"x","by":"y"}`, h("Idempotency-Key", "x"), http.StatusNotFound, schemas.CodeUnknownAction},
		{"missing key", "/v1/commands/noop.ping?entity=e", `{}`, h(), http.StatusBadRequest, schemas.CodeInvalidCommand},
		{"missing entity", "/v1/commands/noop.ping", `{}`, h("Idempotency-Key", "x"), http.StatusBadRequest, schemas.CodeInvalidCommand},
		{"malformed body", "/v1/commands/noop.ping?entity=e", `{"n":`, h("Idempotency-Key", "x"), http.StatusBadRequest, schemas.CodeInvalidCommand},
		{"not an object", "/v1/commands/noop.ping?entity=e", `[1]`, h("Idempotency-Key", "x"), http.StatusBadRequest, schemas.CodeInvalidCommand},
		{"oversized body", "/v1/commands/noop.ping?entity=e", `{"s":"` + strings.Repeat("x", 100) + `"}`, h("Idempotency-Key", "x"), http.StatusRequestEntityTooLarge, schemas.CodeTooLarge},
		{"bad version", "/v1/commands/noop.ping?entity=e", `{}`, h("Idempotency-Key", "x", "Onceflight-Expected-Version", "two"), http.StatusBadRequest, schemas.CodeInvalidCommand},
		{"bad deadline", "/v1/commands/noop.ping?entity=e", `{}`, h("Idempotency-Key", "x", "Onceflight-Deadline", "tomorrow"), http.StatusBadRequest, schemas.CodeInvalidCommand},
		{"bad wait", "/v1/commands/noop.ping?entity=e", `{}`, h("Idempotency-Key", "x", "Prefer", "wait=soon"), http.StatusBadRequest, schemas.CodeInvalidCommand},
		{"wrong content type", "/v1/commands/noop.ping?entity=e", `{}`, h("Idempotency-Key", "x", "Content-Type", "text/plain"), http.StatusUnsupportedMediaType, schemas.CodeInvalidCommand},
		{"no token", "/v1/commands/noop.ping?entity=e", `{}`, map[string]string{"Idempotency-Key": "x"}, http.StatusUnauthorized, "unauthorized"},
		{"wrong token", "/v1/commands/noop.ping?entity=e", `{}`, map[string]string{"Idempotency-Key": "x", "Authorization": "Bearer s3cre7"}, http.StatusUnauthorized, "unauthorized"},
	}
	for _, b := range bad {
		r := post(t, srv.URL, b.path, b.body, b.hdr)
		if r.code != b.code || r.problem.Code != b.code2 || r.problem.Status != b.code || r.problem.Detail == "" {
			t.Errorf("%s: %d %+v, want %d %s", b.name, r.code, r.problem, b.code, b.code2)
		}
	}
}

func TestStatusCode(t *testing.T) {
	for _, c := range []struct {
		status schemas.Status
		code   string
		want   int
	}{
		{schemas.StatusSucceeded, "", 200},
		{schemas.StatusRejected, schemas.CodeKeyReused, 422},
		{schemas.StatusRejected, schemas.CodeVersionConflict, 422},
		{schemas.StatusFailed, schemas.CodeConnectorRejected, 422},
		{schemas.StatusUnresolved, schemas.CodeAmbiguous, 202},
		{schemas.StatusHeld, schemas.CodeDuplicateBusinessKey, 202},
	} {
		o := outcome(c.status, c.code)
		if got := StatusCode(o); got != c.want {
			t.Errorf("%s %s: %d, want %d", c.status, c.code, got, c.want)
		}
	}
}

func TestWaitCapped(t *testing.T) {
	r := httptest.NewRequest(http.MethodPost, "/v1/commands/a?entity=e", nil)
	r.SetPathValue("action", "a")
	r.Header.Set("Idempotency-Key", "k")
	r.Header.Set("Prefer", "wait=3600")
	req, p := ParseRequest(r, 10, 5*time.Second, func(string) bool { return true })
	if p != nil || req.Wait != 5*time.Second {
		t.Errorf("wait = %s, %+v; want capped at 5s", req.Wait, p)
	}
}

func TestRateLimit(t *testing.T) {
	// A rate so low that no token comes back during the test: the second
	// request finds the bucket empty whatever the machine's speed.
	srv := httptest.NewServer(Handler(Config{Rate: 0.0001, Burst: 1}))
	defer srv.Close()
	first := post(t, srv.URL, "/v1/commands/a?entity=e", `{}`, map[string]string{})
	if first.code != http.StatusBadRequest { // let through, refused for the missing key
		t.Errorf("first: %d %+v", first.code, first.problem)
	}
	second := post(t, srv.URL, "/v1/commands/a?entity=e", `{}`, map[string]string{})
	if second.code != http.StatusTooManyRequests || second.problem.Code != "too_many_requests" || second.header.Get("Retry-After") == "" {
		t.Errorf("second: %d %+v", second.code, second.problem)
	}
}

// TestStrangersDoNotSpendTheRate: requests without the token are refused
// before they take from the rate limit, so that anyone who reaches the
// ingress cannot starve its producers with 401s.
func TestStrangersDoNotSpendTheRate(t *testing.T) {
	srv := httptest.NewServer(Handler(Config{Rate: 0.0001, Burst: 1, Token: []byte("s3cret")}))
	defer srv.Close()
	for range 3 {
		if r := post(t, srv.URL, "/v1/commands/a?entity=e", `{}`, map[string]string{"Authorization": "Bearer wrong"}); r.code != http.StatusUnauthorized {
			t.Fatalf("stranger: %d %+v, want 401", r.code, r.problem)
		}
	}
	producer := post(t, srv.URL, "/v1/commands/a?entity=e", `{}`, map[string]string{"Authorization": "Bearer s3cret"})
	if producer.code != http.StatusBadRequest { // let through, refused for the missing key
		t.Errorf("the producer after strangers: %d %+v, want 400 (past the rate limit)", producer.code, producer.problem)
	}
}

// TestTokenCompare pins what the token check accepts: the token itself
// (the scheme in any case, spaces around it trimmed), not a prefix, a
// longer token or none. It compares digests (no test can show timing).
func TestTokenCompare(t *testing.T) {
	hd := &handler{cfg: Config{Token: []byte("s3cret-0123456789")}, tokenSum: sha256.Sum256([]byte("s3cret-0123456789"))}
	for auth, want := range map[string]bool{
		"Bearer s3cret-0123456789": true, "bearer  s3cret-0123456789 ": true,
		"Bearer s3cret-012345678": false, "Bearer s3cret-01234567890": false, "Bearer ": false, "": false,
		"Basic s3cret-0123456789": false, "s3cret-0123456789": false,
	} {
		r := httptest.NewRequest(http.MethodPost, "/v1/commands/a", nil)
		if auth != "" {
			r.Header.Set("Authorization", auth)
		}
		if got := hd.authorized(r); got != want {
			t.Errorf("Authorization %q: authorized %v, want %v", auth, got, want)
		}
	}
}

func TestBucketRefills(t *testing.T) {
	b := newLimiter(2, 2)
	now := time.Unix(1000, 0)
	takes := func(at time.Time, n int) []bool {
		var got []bool
		for range n {
			got = append(got, b.AllowN(at, 1))
		}
		return got
	}
	if got := takes(now, 3); !got[0] || !got[1] || got[2] {
		t.Fatalf("burst of 2: %v", got)
	}
	if got := takes(now.Add(500*time.Millisecond), 2); !got[0] || got[1] {
		t.Errorf("half a second at 2/s should give back exactly one token: %v", got)
	}
	if got := takes(now.Add(time.Hour), 3); !got[0] || !got[1] || got[2] {
		t.Errorf("refill must stop at the burst: %v", got)
	}
}

// TestProblemTypesDocumented: every problem code the ingress answers with
// has the anchor its type links to in docs/http.md, so a client that
// follows a problem's type lands on its explanation.
func TestProblemTypesDocumented(t *testing.T) {
	raw, err := os.ReadFile("../../../docs/http.md")
	if err != nil {
		t.Fatal(err)
	}
	src, err := os.ReadFile("ingress.go")
	if err != nil {
		t.Fatal(err)
	}
	codes := map[string]bool{CodeInProgress: true}
	for _, m := range regexp.MustCompile(`problem\(http\.Status\w+, (?:schemas\.(\w+)|"(\w+)")`).FindAllStringSubmatch(string(src), -1) {
		switch {
		case m[2] != "":
			codes[m[2]] = true
		case m[1] == "CodeUnknownAction":
			codes[schemas.CodeUnknownAction] = true
		case m[1] == "CodeInvalidCommand":
			codes[schemas.CodeInvalidCommand] = true
		case m[1] == "CodeTooLarge":
			codes[schemas.CodeTooLarge] = true
		case m[1] == "CodeConnectorUnavailable":
			codes[schemas.CodeConnectorUnavailable] = true
		default:
			t.Errorf("ingress.go answers a problem with schemas.%s: add it to this test", m[1])
		}
	}
	if len(codes) < 7 {
		t.Fatalf("found only %d problem codes in ingress.go: %v", len(codes), codes)
	}
	for c := range codes {
		if !strings.Contains(string(raw), `id="problem-`+c+`"`) {
			t.Errorf("docs/http.md has no anchor problem-%s for the problem type %s%s", c, ProblemBase, c)
		}
	}
}
