package consumer_test

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// What the simulation's external system does with a POST (one answer of a
// key's script, docs/connectors.md#execute-responses).
const (
	postOK            = "ok"             // applies, 200
	post4xx           = "4xx"            // does not apply, 422: failed connector_rejected
	post5xxBefore     = "5xx-before"     // does not apply, 500: ambiguous
	post5xxAfter      = "5xx-after"      // applies, 500: ambiguous
	postTimeoutBefore = "timeout-before" // does not apply, never answers: ambiguous
	postTimeoutAfter  = "timeout-after"  // applies, never answers: ambiguous
	post503           = "503"            // does not apply, 503: not done, retried
)

// confirmForever: the key's confirmations answer 500 (unknown) forever.
const confirmForever = 100 * time.Hour

// keyScript is how the external system answers one key: its POSTs take
// the answers of posts in turn (then ok), and its GETs answer 500 for
// unknown after the first one (then the truth: 200 if the key was
// applied, else 404). An unknown longer than the action's confirm_timeout
// leaves the record unresolved for the reconciler to settle.
type keyScript struct {
	posts   []string
	unknown time.Duration
}

func (s keyScript) String() string {
	u := s.unknown.String()
	if s.unknown == confirmForever {
		u = "forever"
	}
	return fmt.Sprintf("posts %v then ok, confirm unknown for %s", s.posts, u)
}

// svcCall is one request the external system answered, as it saw it.
type svcCall struct {
	method, entity, key string
	attempt             int
	token               int64
	// class is the answer as the executor should classify it: succeeded,
	// rejected, unavailable, ambiguous for a POST; found, not_found,
	// unknown for a GET.
	class   string
	applied bool
	at      time.Time
}

// simService is the simulation's external system on loopback: one honest
// service whose POST answers follow each key's script, whose confirmation
// (GET /…/{key}) tells the truth unless scripted unknown, and which
// records what it really did: every call, every effect, and any two
// effectful calls of one entity that overlapped (G1).
type simService struct {
	mu       sync.Mutex
	scripts  map[string]keyScript
	posts    map[string]int
	firstGet map[string]time.Time
	effects  map[string][]time.Time // by key
	inflight map[string]int         // by entity
	overlaps []string
	calls    []svcCall
	quit     chan struct{}
	srv      *httptest.Server
}

func newSimService(t *testing.T, scripts map[string]keyScript) *simService {
	s := &simService{scripts: scripts, posts: map[string]int{}, firstGet: map[string]time.Time{},
		effects: map[string][]time.Time{}, inflight: map[string]int{}, quit: make(chan struct{})}
	s.srv = httptest.NewServer(s)
	// Closed before the server: a hanging handler returns, so Close does
	// not wait for it.
	t.Cleanup(s.srv.Close)
	t.Cleanup(func() { close(s.quit) })
	return s
}

func (s *simService) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method == http.MethodGet {
		s.confirm(w, r)
		return
	}
	_, _ = io.Copy(io.Discard, r.Body)
	key, ent := r.Header.Get("Idempotency-Key"), r.Header.Get("Onceflight-Entity")
	attempt, _ := strconv.Atoi(r.Header.Get("Onceflight-Attempt"))
	token, _ := strconv.ParseInt(r.Header.Get("Onceflight-Fencing-Token"), 10, 64)
	s.mu.Lock()
	s.inflight[ent]++
	if s.inflight[ent] > 1 {
		s.overlaps = append(s.overlaps, fmt.Sprintf("entity %s: POST of %s (attempt %d, token %d) while another POST of the entity was in flight", ent, key, attempt, token))
	}
	n := s.posts[key]
	s.posts[key]++
	answer := postOK
	if sc := s.scripts[key]; n < len(sc.posts) {
		answer = sc.posts[n]
	}
	s.mu.Unlock()
	// The effectful part of the call takes a moment, so that a second
	// call of the entity in flight at the same time is seen.
	time.Sleep(5 * time.Millisecond)
	c := svcCall{method: http.MethodPost, entity: ent, key: key, attempt: attempt, token: token, at: time.Now()}
	switch answer {
	case postOK:
		c.class, c.applied = "succeeded", true
	case post4xx:
		c.class = "rejected"
	case post503:
		c.class = "unavailable"
	case postTimeoutAfter, post5xxAfter:
		c.class, c.applied = "ambiguous", true
	default:
		c.class = "ambiguous"
	}
	s.mu.Lock()
	s.inflight[ent]--
	if c.applied {
		s.effects[key] = append(s.effects[key], c.at)
	}
	s.calls = append(s.calls, c)
	s.mu.Unlock()
	switch answer {
	case postOK:
		fmt.Fprintf(w, `{"id":"fx-%s-%d"}`, key, n)
	case post4xx:
		http.Error(w, "invalid amount", http.StatusUnprocessableEntity)
	case post503:
		http.Error(w, "busy", http.StatusServiceUnavailable)
	case post5xxBefore, post5xxAfter:
		http.Error(w, "boom", http.StatusInternalServerError)
	default: // the timeouts: answer only after the client gave up
		select {
		case <-r.Context().Done():
		case <-s.quit:
		case <-time.After(10 * time.Second):
		}
	}
}

func (s *simService) confirm(w http.ResponseWriter, r *http.Request) {
	key := r.URL.Path[strings.LastIndexByte(r.URL.Path, '/')+1:]
	s.mu.Lock()
	c := svcCall{method: http.MethodGet, key: key, at: time.Now()}
	first, ok := s.firstGet[key]
	if !ok {
		first, s.firstGet[key] = c.at, c.at
	}
	switch {
	case c.at.Sub(first) < s.scripts[key].unknown:
		c.class = "unknown"
	case len(s.effects[key]) > 0:
		c.class = "found"
	default:
		c.class = "not_found"
	}
	s.calls = append(s.calls, c)
	s.mu.Unlock()
	switch c.class {
	case "unknown":
		http.Error(w, "lookup down", http.StatusInternalServerError)
	case "found":
		fmt.Fprintf(w, `{"id":"fx-%s"}`, key)
	default:
		http.Error(w, "no such payment", http.StatusNotFound)
	}
}

// snapshot returns copies of what the service did.
func (s *simService) snapshot() (calls []svcCall, effects map[string][]time.Time, overlaps []string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	effects = map[string][]time.Time{}
	for k, v := range s.effects {
		effects[k] = append([]time.Time(nil), v...)
	}
	return append([]svcCall(nil), s.calls...), effects, append([]string(nil), s.overlaps...)
}
