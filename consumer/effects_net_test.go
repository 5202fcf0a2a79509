package consumer_test

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// effectService is a non-idempotent HTTP service for the network and soak
// tests: every POST that it applies counts one effect of its idempotency
// key (a second one is a double effect), and it records how many requests
// of one entity were in flight together (more than one is an overlapping
// execution of the entity: a POST arriving while another of its entity is
// still being applied). GET /pay/{key} confirms: 200 if applied, 404
// if not. behave, when set, picks what a POST does from its key and the
// key's request count so far.
type effectService struct {
	mu       sync.Mutex
	applied  map[string]int // key -> effects
	posts    map[string]int // key -> POSTs received
	inflight map[string]int // entity -> requests in flight
	overlaps []string       // entities seen with two requests in flight
	hold     time.Duration  // every POST takes this long before it answers
	behave   func(key string, n int) answer
	srv      *httptest.Server
}

type answer int

const (
	answerOK         answer = iota // apply, 201
	answerSlow                     // apply, then hold the answer until the client gives up (ambiguous)
	answerApplied500               // apply, 500 (ambiguous: confirm finds it)
	answerNotDone503               // do nothing, 503 (not done: retried)
)

func newEffectService(t *testing.T, hold time.Duration, behave func(string, int) answer) *effectService {
	s := &effectService{applied: map[string]int{}, posts: map[string]int{}, inflight: map[string]int{}, hold: hold, behave: behave}
	s.srv = httptest.NewServer(s)
	t.Cleanup(s.srv.Close)
	return s
}

// yaml is an action named pay.call on the service.
func (s *effectService) yaml(timeout string) string {
	return fmt.Sprintf(`actions:
  pay.call:
    connector: http
    url: %[1]s/pay
    confirm_url: %[1]s/pay/{key}
    timeout: %[2]s
    confirm_timeout: 30s
    max_attempts: 5
`, s.srv.URL, timeout)
}

func (s *effectService) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method == http.MethodGet {
		key := strings.TrimPrefix(r.URL.Path, "/pay/")
		s.mu.Lock()
		n := s.applied[key]
		s.mu.Unlock()
		if n == 0 {
			http.NotFound(w, r)
			return
		}
		fmt.Fprint(w, `{"paid":true}`)
		return
	}
	// Read the body: only then does the server notice a client that gave
	// up (and cancel r.Context()).
	_, _ = io.Copy(io.Discard, r.Body)
	key, entity := r.Header.Get("Idempotency-Key"), r.Header.Get("Onceflight-Entity")
	s.mu.Lock()
	s.inflight[entity]++
	if s.inflight[entity] > 1 {
		s.overlaps = append(s.overlaps, entity+"/"+key)
	}
	s.posts[key]++
	a := answerOK
	if s.behave != nil {
		a = s.behave(key, s.posts[key])
	}
	s.mu.Unlock()
	// The execution of the effect: from the request's arrival until it is
	// applied (or refused) at the end of the hold. Only the answer comes
	// after, and a slow answer withholds nothing but the answer.
	if s.hold > 0 {
		time.Sleep(s.hold)
	}
	s.mu.Lock()
	if a != answerNotDone503 {
		s.applied[key]++
	}
	s.inflight[entity]--
	s.mu.Unlock()
	switch a {
	case answerSlow:
		select {
		case <-r.Context().Done():
		case <-time.After(10 * time.Second):
		}
	case answerApplied500:
		http.Error(w, "applied, then failed", http.StatusInternalServerError)
	case answerNotDone503:
		http.Error(w, "try later", http.StatusServiceUnavailable)
	default:
		w.WriteHeader(http.StatusCreated)
		fmt.Fprint(w, `{"paid":true}`)
	}
}

// check fails t unless every key in want took effect exactly want[key]
// times and no entity ever had two requests in flight.
func (s *effectService) check(t *testing.T, want map[string]int) {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	for k, n := range want {
		if s.applied[k] != n {
			t.Errorf("%s took effect %d times (%d POSTs), want %d", k, s.applied[k], s.posts[k], n)
		}
	}
	for k, n := range s.applied {
		if _, ok := want[k]; !ok && n > 0 {
			t.Errorf("%s took effect %d times, want no effect", k, n)
		}
	}
	if n := len(s.overlaps); n > 0 {
		t.Errorf("%d overlapping executions of an entity (entity/key arriving while another of the entity was being applied), first %v", n, s.overlaps[:min(n, 10)])
	}
}

// groupJoins counts the JoinGroup requests the cluster received: a
// rebalance of the classic protocol starts with one from every member, so
// an unchanged count means no rebalance (and no member's rejoin).
func groupJoins(c *kfake.Cluster) func() int {
	var mu sync.Mutex
	n := 0
	c.ControlKey(int16(kmsg.JoinGroup), func(kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		mu.Lock()
		n++
		mu.Unlock()
		return nil, nil, false
	})
	return func() int {
		mu.Lock()
		defer mu.Unlock()
		return n
	}
}

// totalPosts counts every POST received.
func (s *effectService) totalPosts() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, p := range s.posts {
		n += p
	}
	return n
}
