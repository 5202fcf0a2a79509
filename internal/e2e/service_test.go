package e2e

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/onceflight/onceflight/partitioner"
)

// svcEvent is one Execute POST as the service saw it.
type svcEvent struct {
	seq              int
	executor, entity string
	key              string
	token            int64
	attempt          string
	partition        int32
	deadline         time.Time
	arrived, ended   time.Time
	header           http.Header
	body             []byte
	verdict          string // "applied", "refused" (stale token), "bad-token", "not-applied"
}

func (e svcEvent) String() string {
	return fmt.Sprintf("#%d %s %s p%d key=%s token=%d attempt=%s %s [%s..%s] deadline %s",
		e.seq, e.executor, e.entity, e.partition, e.key, e.token, e.attempt, e.verdict,
		e.arrived.Format("15:04:05.000"), e.ended.Format("15:04:05.000"), e.deadline.Format("15:04:05.000"))
}

// service is a real HTTP service on loopback that is NOT idempotent: each
// applied POST is an effect, counted per Idempotency-Key. It is what the
// http connector calls in every test: it flags overlapping executions of
// an entity, refuses a write carrying a fencing token below one it has
// already seen for the entity (as an external system using fencing tokens
// does), and notes tokens that do not rise with a new key. Every executor
// gets its own URL path (/ex/{id}/effects, see url) so the service knows
// who sent what; the effect itself is keyed only by Idempotency-Key.
//
// What it does with a POST depends on the key's behaviour, the part of the
// key before the first "." (a key without "." behaves as ok):
//
//	ok          apply (after delay), 201 {"effect_id":...}
//	text        apply, 200 text/plain
//	reject      422, not applied
//	busy408 busy425 busy429 busy503
//	            first POST answers that status (not applied), then apply, 201
//	busymix     429, 503, then apply, 201
//	down        503 forever
//	amb500 amb502 amb504
//	            apply, then answer that status
//	slow        apply, then answer nothing until the client gives up
//	reset       apply, then reset the connection
//	lost500     first POST 500 without applying, then apply, 201
//	cfail       apply, 500; confirm answers 500
//	chang       apply, 504; confirm never answers
//	nc          apply, 500 (the action has no confirm_url)
//	idem        first POST apply + 500; later POSTs dedupe by key: 200 with
//	            the existing effect, no new one
//
// Confirm (GET /ex/{id}/effects/{key}) answers 200 {"confirmed":true,...}
// when the key was applied and 404 when not, except for cfail and chang.
type service struct {
	srv        *httptest.Server
	partitions int                  // of the commands topic, for the epoch check
	delay      func() time.Duration // how long an ok effect takes; nil: none

	mu         sync.Mutex
	events     []*svcEvent
	byKey      map[string][]*svcEvent
	inflight   map[string][]*svcEvent // entity -> calls in flight
	inflightBy map[string]int         // executor -> calls in flight
	effects    map[string]int         // key -> effects applied
	confirms   map[string]int         // key -> confirms
	confirmsBy map[string]int         // "executor key" -> confirms
	maxTok     map[string]int64       // entity -> highest token seen
	maxTokKey  map[string]string      // entity -> the key that carried it
	overlaps   []string
	tokenErrs  []string // a new key without a higher token, or no token
	refused    []*svcEvent
	gate       *gate // holds an executor's ok calls; nil: none
}

// gate holds every ok call of one executor in flight (before its effect)
// until release.
type gate struct {
	ex      string
	arrived chan struct{} // closed at the first held call
	release chan struct{}
	once    sync.Once
	opened  sync.Once
}

// hold makes ex's ok calls wait in flight, from now until the returned
// gate is opened (at the latest when the test ends); <-g.arrived waits
// for the first.
func (s *service) hold(t *testing.T, ex string) *gate {
	g := &gate{ex: ex, arrived: make(chan struct{}), release: make(chan struct{})}
	s.mu.Lock()
	s.gate = g
	s.mu.Unlock()
	t.Cleanup(func() { s.open(g) })
	return g
}

// open releases the held calls (their effects then happen) and holds no
// more.
func (s *service) open(g *gate) {
	s.mu.Lock()
	if s.gate == g {
		s.gate = nil
	}
	s.mu.Unlock()
	g.opened.Do(func() { close(g.release) })
}

// newService starts the service; partitions is the commands topic's
// partition count, delay (nil: none) how long an ok effect takes.
func newService(t *testing.T, partitions int, delay func() time.Duration) *service {
	t.Helper()
	s := &service{
		partitions: partitions, delay: delay,
		byKey: map[string][]*svcEvent{}, inflight: map[string][]*svcEvent{}, inflightBy: map[string]int{},
		effects: map[string]int{}, confirms: map[string]int{}, confirmsBy: map[string]int{},
		maxTok: map[string]int64{}, maxTokKey: map[string]string{},
	}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /ex/{ex}/effects", s.execute)
	mux.HandleFunc("GET /ex/{ex}/effects/{key}", s.confirm)
	s.srv = httptest.NewServer(mux)
	t.Cleanup(s.srv.Close)
	return s
}

// url is the Execute URL of executor ex; its confirm_url is url + "/{key}".
func (s *service) url(ex string) string { return s.srv.URL + "/ex/" + ex + "/effects" }

// httpAction is an http connector action calling the service as ex.
func (s *service) httpAction(name, ex string, confirm bool) action {
	a := action{name: name, connector: "http", url: s.url(ex)}
	if confirm {
		a.confirmURL = s.url(ex) + "/{key}"
	}
	return a
}

func behaviour(key string) string {
	b, _, ok := strings.Cut(key, ".")
	if !ok {
		return "ok"
	}
	return b
}

// waitGone blocks until the client hangs up, or at most d.
func waitGone(r *http.Request, d time.Duration) {
	select {
	case <-r.Context().Done():
	case <-time.After(d):
	}
}

// admit records a POST and checks its fencing token; it returns the
// event and how many POSTs the key has had, or false when the POST was
// answered (refused).
func (s *service) admit(w http.ResponseWriter, r *http.Request, body []byte) (*svcEvent, int, bool) {
	ev := &svcEvent{
		executor: r.PathValue("ex"),
		entity:   r.Header.Get("Onceflight-Entity"),
		key:      r.Header.Get("Idempotency-Key"),
		attempt:  r.Header.Get("Onceflight-Attempt"),
		arrived:  time.Now(),
		header:   r.Header.Clone(),
		body:     body,
		verdict:  "not-applied",
	}
	ev.partition = partitioner.ForEntity(ev.entity, s.partitions)
	ev.deadline, _ = time.Parse(time.RFC3339Nano, r.Header.Get("Onceflight-Deadline"))
	tok, err := strconv.ParseInt(r.Header.Get("Onceflight-Fencing-Token"), 10, 64)
	s.mu.Lock()
	defer s.mu.Unlock()
	s.events = append(s.events, ev)
	ev.seq = len(s.events)
	s.byKey[ev.key] = append(s.byKey[ev.key], ev)
	n := len(s.byKey[ev.key])
	switch {
	case err != nil || ev.key == "" || ev.entity == "":
		ev.verdict = "bad-token"
		ev.ended = time.Now()
		s.tokenErrs = append(s.tokenErrs, fmt.Sprintf("request without entity/key/token (%q): %s", r.Header.Get("Onceflight-Fencing-Token"), ev))
		http.Error(w, "missing headers", http.StatusBadRequest)
		return ev, n, false
	case tok < s.maxTok[ev.entity]:
		// How an external system uses fencing tokens: a write from
		// an owner older than one already seen is refused.
		ev.token = tok
		ev.verdict = "refused"
		ev.ended = time.Now()
		s.refused = append(s.refused, ev)
		http.Error(w, fmt.Sprintf("stale fencing token %d < %d", tok, s.maxTok[ev.entity]), http.StatusConflict)
		return ev, n, false
	case tok == s.maxTok[ev.entity] && s.maxTokKey[ev.entity] != ev.key:
		s.tokenErrs = append(s.tokenErrs, fmt.Sprintf("entity %s: key %s carries token %d, not above the token of earlier key %s",
			ev.entity, ev.key, tok, s.maxTokKey[ev.entity]))
	}
	ev.token = tok
	if tok > s.maxTok[ev.entity] {
		s.maxTok[ev.entity], s.maxTokKey[ev.entity] = tok, ev.key
	}
	for _, other := range s.inflight[ev.entity] {
		s.overlaps = append(s.overlaps, fmt.Sprintf("entity %s: %s overlaps in-flight %s", ev.entity, ev, other))
	}
	s.inflight[ev.entity] = append(s.inflight[ev.entity], ev)
	s.inflightBy[ev.executor]++
	return ev, n, true
}

// done ends ev's time in flight.
func (s *service) done(ev *svcEvent) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if ev.ended.IsZero() {
		ev.ended = time.Now()
	}
	list := s.inflight[ev.entity]
	for i, x := range list {
		if x == ev {
			s.inflight[ev.entity] = append(list[:i:i], list[i+1:]...)
			s.inflightBy[ev.executor]--
			return
		}
	}
}

func (s *service) execute(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	ev, n, ok := s.admit(w, r, body)
	if !ok {
		return
	}
	key := ev.key
	apply := func() {
		s.mu.Lock()
		s.effects[key]++
		ev.verdict = "applied"
		ev.ended = time.Now()
		s.mu.Unlock()
	}
	// The effect happens whether or not the caller is still there (a
	// killed caller does not undo it); it is out of flight once applied.
	defer s.done(ev)
	created := func() {
		apply()
		s.done(ev)
		writeJSONBody(w, http.StatusCreated, map[string]string{"effect_id": "e-" + key})
	}
	b := behaviour(key)
	switch b {
	case "ok":
		s.mu.Lock()
		g := s.gate
		s.mu.Unlock()
		if g != nil && g.ex == ev.executor {
			g.once.Do(func() { close(g.arrived) })
			<-g.release
		}
		if s.delay != nil {
			time.Sleep(s.delay())
		}
		created()
	case "text":
		apply()
		w.Header().Set("Content-Type", "text/plain")
		w.WriteHeader(http.StatusOK)
		fmt.Fprintf(w, "applied %s", key)
	case "reject":
		writeJSONBody(w, http.StatusUnprocessableEntity, map[string]string{"message": "amount must be positive"})
	case "busy408", "busy425", "busy429", "busy503":
		if n == 1 {
			code, _ := strconv.Atoi(strings.TrimPrefix(b, "busy"))
			writeJSONBody(w, code, map[string]string{"message": "not now"})
			return
		}
		created()
	case "busymix":
		switch n {
		case 1:
			writeJSONBody(w, http.StatusTooManyRequests, map[string]string{"message": "slow down"})
		case 2:
			writeJSONBody(w, http.StatusServiceUnavailable, map[string]string{"message": "maintenance"})
		default:
			created()
		}
	case "down":
		writeJSONBody(w, http.StatusServiceUnavailable, map[string]string{"message": "maintenance"})
	case "amb500", "amb502", "amb504":
		if n > 1 { // a second POST is a bug of the executor: count it
			created()
			return
		}
		apply()
		code, _ := strconv.Atoi(strings.TrimPrefix(b, "amb"))
		writeJSONBody(w, code, map[string]string{"message": "upstream trouble"})
	case "slow":
		apply()
		waitGone(r, 5*time.Second)
		writeJSONBody(w, http.StatusCreated, map[string]string{"effect_id": "e-" + key})
	case "reset":
		apply()
		hj, ok := w.(http.Hijacker)
		if !ok {
			panic("no hijacker")
		}
		conn, _, err := hj.Hijack()
		if err != nil {
			panic(err)
		}
		if tc, ok := conn.(*net.TCPConn); ok {
			_ = tc.SetLinger(0) // RST rather than FIN
		}
		conn.Close()
	case "lost500":
		if n == 1 {
			writeJSONBody(w, http.StatusInternalServerError, map[string]string{"message": "crashed before applying"})
			return
		}
		created()
	case "cfail", "nc":
		apply()
		writeJSONBody(w, http.StatusInternalServerError, map[string]string{"message": "crashed after applying"})
	case "chang":
		apply()
		writeJSONBody(w, http.StatusGatewayTimeout, map[string]string{"message": "gateway timeout"})
	case "idem":
		if n == 1 {
			apply()
			writeJSONBody(w, http.StatusInternalServerError, map[string]string{"message": "crashed after applying"})
			return
		}
		s.mu.Lock()
		applied := s.effects[key] > 0
		s.mu.Unlock()
		if applied {
			writeJSONBody(w, http.StatusOK, map[string]string{"effect_id": "e-" + key, "deduplicated": "true"})
			return
		}
		created()
	default:
		writeJSONBody(w, http.StatusBadRequest, map[string]string{"message": "unknown test behaviour " + b})
	}
}

func (s *service) confirm(w http.ResponseWriter, r *http.Request) {
	key := r.PathValue("key")
	s.mu.Lock()
	s.confirms[key]++
	s.confirmsBy[r.PathValue("ex")+" "+key]++
	applied := s.effects[key] > 0
	s.mu.Unlock()
	switch behaviour(key) {
	case "cfail":
		writeJSONBody(w, http.StatusInternalServerError, map[string]string{"message": "ledger unavailable"})
	case "chang":
		waitGone(r, 5*time.Second)
		writeJSONBody(w, http.StatusGatewayTimeout, map[string]string{"message": "too late"})
	default:
		if !applied {
			writeJSONBody(w, http.StatusNotFound, map[string]string{"message": "no such effect"})
			return
		}
		writeJSONBody(w, http.StatusOK, map[string]any{"confirmed": true, "key": key, "effect_id": "e-" + key})
	}
}

func writeJSONBody(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}

// counts returns the POSTs, effects and confirms seen for key.
func (s *service) counts(key string) (posts []svcEvent, effects, confirms int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, e := range s.byKey[key] {
		posts = append(posts, *e)
	}
	return posts, s.effects[key], s.confirms[key]
}

// effectCounts returns a copy of the effects per key.
func (s *service) effectCounts() map[string]int {
	s.mu.Lock()
	defer s.mu.Unlock()
	m := make(map[string]int, len(s.effects))
	for k, v := range s.effects {
		m[k] = v
	}
	return m
}

func (s *service) inflightOf(ex string) int {
	n, _ := s.inflightSince(ex)
	return n
}

// inflightSince returns ex's calls in flight and when the oldest arrived.
func (s *service) inflightSince(ex string) (n int, oldest time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, list := range s.inflight {
		for _, e := range list {
			if e.executor == ex && (oldest.IsZero() || e.arrived.Before(oldest)) {
				oldest = e.arrived
			}
		}
	}
	return s.inflightBy[ex], oldest
}

// eventsWhere returns copies of the events for which keep holds, in
// arrival order.
func (s *service) eventsWhere(keep func(e svcEvent) bool) []svcEvent {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []svcEvent
	for _, e := range s.events {
		if keep(*e) {
			out = append(out, *e)
		}
	}
	return out
}

// eventsFor returns the service's events for an entity, in arrival order,
// one a line, to explain an error.
func (s *service) eventsFor(entity string) string {
	var lines []string
	for _, e := range s.eventsWhere(func(e svcEvent) bool { return e.entity == entity }) {
		lines = append(lines, e.String())
	}
	return "\n  service calls for the entity:\n    " + strings.Join(lines, "\n    ")
}
