package apifake

import (
	"fmt"
	"io"
	"maps"
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

// Effects is the fake external system of the executor's and the http
// connector's tests: a real HTTP service on loopback that is NOT
// idempotent. Every POST it applies is one effect of its Idempotency-Key
// (a second one is a double effect); a Script picks, per POST, the fault
// around the effect (delay, 5xx or 429 with Retry-After before it, 5xx,
// a hang or a reset after it). It records every POST as an Event and
// counts the requests of one entity in flight together: a POST arriving
// while another of its entity is still being applied is an overlap, the
// executor's bug this service exists to catch. With WithFencing it also
// refuses a write whose fencing token is below one it has already seen
// for the entity, as an external system using fencing tokens does.
//
// Every executor can get its own URL path (URL(ex)), so the service knows
// who sent what; the effect itself is keyed only by Idempotency-Key.
//
//	POST /effects, POST /ex/{ex}/effects            Execute
//	GET /effects/{key}, GET /ex/{ex}/effects/{key}  Confirm: 200 when the
//	                                                key was applied, 404 when not
type Effects struct {
	srv        *httptest.Server
	script     func(key string, n int) Fault
	confirm    func(key string, n int, applied bool) Fault
	delay      func() time.Duration
	partitions int
	fencing    bool
	lookupLag  time.Duration

	// mu guards everything below: the handlers and the test's reads take
	// it. A leaf lock.
	mu         sync.Mutex
	events     []*Event
	byKey      map[string][]*Event
	inflight   map[string][]*Event  // entity -> POSTs being applied
	inflightBy map[string]int       // executor -> POSTs being applied
	effects    map[string]int       // key -> effects applied
	applied    map[string]time.Time // key -> when first applied
	confirms   map[string]int       // key -> confirms
	confirmsBy map[string]int       // "executor key" -> confirms
	maxTok     map[string]int64     // entity -> highest token seen
	maxTokKey  map[string]string    // entity -> the key that carried it
	overlaps   []string
	tokenErrs  []string // a new key without a higher token, or no token
	refused    []*Event
	gate       *Gate // holds an executor's POSTs; nil: none
}

// Event is one POST as the service saw it.
type Event struct {
	Seq              int
	Executor, Entity string
	Key              string
	Token            int64
	Attempt          string
	Partition        int32 // of Entity, with WithPartitions
	Deadline         time.Time
	Arrived, Ended   time.Time
	Header           http.Header
	Body             []byte
	Verdict          string // "applied", "refused" (stale token), "bad-token", "not-applied"
}

func (e Event) String() string {
	return fmt.Sprintf("#%d %s %s p%d key=%s token=%d attempt=%s %s [%s..%s] deadline %s",
		e.Seq, e.Executor, e.Entity, e.Partition, e.Key, e.Token, e.Attempt, e.Verdict,
		e.Arrived.Format("15:04:05.000"), e.Ended.Format("15:04:05.000"), e.Deadline.Format("15:04:05.000"))
}

// EffectsOption configures NewEffects.
type EffectsOption func(*Effects)

// WithScript picks the fault of each POST from its key and how many POSTs
// the key has had, this one included (default: none, every POST applies
// and answers 201). KeyScript is a script written in the keys.
func WithScript(f func(key string, n int) Fault) EffectsOption {
	return func(s *Effects) { s.script = f }
}

// WithConfirmScript picks the answer of each confirm from its key, how
// many confirms the key has had, this one included, and whether the key
// was applied (and shows, past WithLookupLag). Of the Fault only Status (0: 200 if applied, else 404),
// Body and Hang count.
func WithConfirmScript(f func(key string, n int, applied bool) Fault) EffectsOption {
	return func(s *Effects) { s.confirm = f }
}

// WithDelay makes every POST take d() before its effect (or its refusal):
// the time an execution is in flight.
func WithDelay(d func() time.Duration) EffectsOption {
	return func(s *Effects) { s.delay = d }
}

// WithPartitions notes in each Event the partition of its entity among n.
func WithPartitions(n int) EffectsOption {
	return func(s *Effects) { s.partitions = n }
}

// WithFencing makes the service check the Onceflight headers: a POST
// without entity, key or fencing token is 400, one whose token is below
// the highest seen for its entity is refused (409, not applied).
func WithFencing() EffectsOption {
	return func(s *Effects) { s.fencing = true }
}

// WithLookupLag makes a confirm answer 404 for d after the key's first
// effect, as a lookup over an eventually consistent index does (the
// action's lookup_lag, docs/connectors.md).
func WithLookupLag(d time.Duration) EffectsOption {
	return func(s *Effects) { s.lookupLag = d }
}

// NewEffects starts the service; it stops when the test ends.
func NewEffects(t testing.TB, opts ...EffectsOption) *Effects {
	t.Helper()
	s := &Effects{
		byKey: map[string][]*Event{}, inflight: map[string][]*Event{}, inflightBy: map[string]int{},
		effects: map[string]int{}, applied: map[string]time.Time{}, confirms: map[string]int{}, confirmsBy: map[string]int{},
		maxTok: map[string]int64{}, maxTokKey: map[string]string{},
	}
	for _, o := range opts {
		o(s)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /effects", s.execute)
	mux.HandleFunc("POST /ex/{ex}/effects", s.execute)
	mux.HandleFunc("GET /effects/{key}", s.confirmHandler)
	mux.HandleFunc("GET /ex/{ex}/effects/{key}", s.confirmHandler)
	s.srv = httptest.NewServer(mux)
	t.Cleanup(s.srv.Close)
	return s
}

// URL is the Execute URL of executor ex ("": one shared by all); its
// confirm URL is URL(ex) + "/{key}".
func (s *Effects) URL(ex string) string {
	if ex == "" {
		return s.srv.URL + "/effects"
	}
	return s.srv.URL + "/ex/" + ex + "/effects"
}

// KeyScript is a script written in the keys: what a POST does depends on
// the part of its key before the first "." (a key without "." is ok).
//
//	ok          apply, 201 {"effect_id":...}
//	text        apply, 200 text/plain
//	reject      422, not applied
//	busy408 busy425 busy429 busy503
//	            first POST answers that status (not applied), then apply, 201
//	busymix     429, 503, then apply, 201
//	down        503 forever
//	amb500 amb502 amb504
//	            apply, then answer that status (a later POST applies again)
//	slow        apply, then answer nothing until the client gives up
//	reset       apply, then reset the connection
//	lost500     first POST 500 without applying, then apply, 201
//	cfail       apply, 500; confirm answers 500
//	chang       apply, 504; confirm never answers
//	nc          apply, 500 (for an action without confirm_url)
//	idem        first POST apply + 500; later POSTs dedupe by key: 200 with
//	            the existing effect, no new one
//
// Use it with WithScript(KeyScript) and WithConfirmScript(KeyConfirmScript).
func KeyScript(key string, n int) Fault {
	b := behaviour(key)
	switch b {
	case "ok":
		return None
	case "text":
		return Fault{Status: http.StatusOK, ContentType: "text/plain", Body: "applied " + key}
	case "reject":
		return Fault{Before: true, Status: http.StatusUnprocessableEntity, Body: `{"message":"amount must be positive"}`}
	case "busy408", "busy425", "busy429", "busy503":
		if n == 1 {
			code, _ := strconv.Atoi(strings.TrimPrefix(b, "busy"))
			return Fault{Before: true, Status: code, Body: `{"message":"not now"}`}
		}
		return None
	case "busymix":
		switch n {
		case 1:
			return Fault{Before: true, Status: http.StatusTooManyRequests, Body: `{"message":"slow down"}`}
		case 2:
			return Fault{Before: true, Status: http.StatusServiceUnavailable, Body: `{"message":"maintenance"}`}
		}
		return None
	case "down":
		return Fault{Before: true, Status: http.StatusServiceUnavailable, Body: `{"message":"maintenance"}`}
	case "amb500", "amb502", "amb504":
		if n > 1 { // a second POST is a bug of the executor: count it
			return None
		}
		code, _ := strconv.Atoi(strings.TrimPrefix(b, "amb"))
		return Fault{Status: code, Body: `{"message":"upstream trouble"}`}
	case "slow":
		return HangAfterEffect
	case "reset":
		return Fault{Reset: true}
	case "lost500":
		if n == 1 {
			return Fault{Before: true, Status: http.StatusInternalServerError, Body: `{"message":"crashed before applying"}`}
		}
		return None
	case "cfail", "nc":
		return Fault{Status: http.StatusInternalServerError, Body: `{"message":"crashed after applying"}`}
	case "chang":
		return Fault{Status: http.StatusGatewayTimeout, Body: `{"message":"gateway timeout"}`}
	case "idem":
		if n == 1 {
			return Fault{Status: http.StatusInternalServerError, Body: `{"message":"crashed after applying"}`}
		}
		return Fault{Dedupe: true}
	default:
		return Fault{Before: true, Status: http.StatusBadRequest, Body: fmt.Sprintf(`{"message":"unknown test behaviour %s"}`, b)}
	}
}

// KeyConfirmScript is KeyScript's confirm: cfail answers 500, chang
// never answers, others 200 when applied and 404 when not.
func KeyConfirmScript(key string, _ int, _ bool) Fault {
	switch behaviour(key) {
	case "cfail":
		return Fault{Status: http.StatusInternalServerError, Body: `{"message":"ledger unavailable"}`}
	case "chang":
		return Fault{Hang: true, Status: http.StatusGatewayTimeout, Body: `{"message":"too late"}`}
	}
	return None
}

func behaviour(key string) string {
	b, _, ok := strings.Cut(key, ".")
	if !ok {
		return "ok"
	}
	return b
}

// Gate holds every POST of one executor in flight (before its effect)
// until opened.
type Gate struct {
	ex      string
	arrived chan struct{} // closed at the first held POST
	release chan struct{}
	once    sync.Once
	opened  sync.Once
}

// Arrived is closed when the first POST is held.
func (g *Gate) Arrived() <-chan struct{} { return g.arrived }

// Hold makes ex's POSTs wait in flight, from now until the returned gate
// is opened (at the latest when the test ends).
func (s *Effects) Hold(t testing.TB, ex string) *Gate {
	g := &Gate{ex: ex, arrived: make(chan struct{}), release: make(chan struct{})}
	s.mu.Lock()
	s.gate = g
	s.mu.Unlock()
	t.Cleanup(func() { s.Open(g) })
	return g
}

// Open releases the held POSTs (their effects then happen) and holds no
// more.
func (s *Effects) Open(g *Gate) {
	s.mu.Lock()
	if s.gate == g {
		s.gate = nil
	}
	s.mu.Unlock()
	g.opened.Do(func() { close(g.release) })
}

// admit records a POST and, with fencing, checks its token; it returns
// the event and how many POSTs the key has had, or false when the POST
// was answered (refused).
func (s *Effects) admit(w http.ResponseWriter, r *http.Request, body []byte) (*Event, int, bool) {
	ev := &Event{
		Executor: r.PathValue("ex"),
		Entity:   r.Header.Get("Onceflight-Entity"),
		Key:      r.Header.Get("Idempotency-Key"),
		Attempt:  r.Header.Get("Onceflight-Attempt"),
		Arrived:  time.Now(),
		Header:   r.Header.Clone(),
		Body:     body,
		Verdict:  "not-applied",
	}
	if s.partitions > 0 {
		ev.Partition = partitioner.ForEntity(ev.Entity, s.partitions)
	}
	ev.Deadline, _ = time.Parse(time.RFC3339Nano, r.Header.Get("Onceflight-Deadline"))
	tok, err := strconv.ParseInt(r.Header.Get("Onceflight-Fencing-Token"), 10, 64)
	s.mu.Lock()
	defer s.mu.Unlock()
	s.events = append(s.events, ev)
	ev.Seq = len(s.events)
	s.byKey[ev.Key] = append(s.byKey[ev.Key], ev)
	n := len(s.byKey[ev.Key])
	switch {
	case !s.fencing:
	case err != nil || ev.Key == "" || ev.Entity == "":
		ev.Verdict = "bad-token"
		ev.Ended = time.Now()
		s.tokenErrs = append(s.tokenErrs, fmt.Sprintf("request without entity/key/token (%q): %s", r.Header.Get("Onceflight-Fencing-Token"), ev))
		http.Error(w, "missing headers", http.StatusBadRequest)
		return ev, n, false
	case tok < s.maxTok[ev.Entity]:
		// How an external system uses fencing tokens: a write from
		// an owner older than one already seen is refused.
		ev.Token = tok
		ev.Verdict = "refused"
		ev.Ended = time.Now()
		s.refused = append(s.refused, ev)
		http.Error(w, fmt.Sprintf("stale fencing token %d < %d", tok, s.maxTok[ev.Entity]), http.StatusConflict)
		return ev, n, false
	case tok == s.maxTok[ev.Entity] && s.maxTokKey[ev.Entity] != ev.Key:
		s.tokenErrs = append(s.tokenErrs, fmt.Sprintf("entity %s: key %s carries token %d, not above the token of earlier key %s",
			ev.Entity, ev.Key, tok, s.maxTokKey[ev.Entity]))
	}
	ev.Token = tok
	if tok > s.maxTok[ev.Entity] {
		s.maxTok[ev.Entity], s.maxTokKey[ev.Entity] = tok, ev.Key
	}
	for _, other := range s.inflight[ev.Entity] {
		s.overlaps = append(s.overlaps, fmt.Sprintf("entity %s: %s overlaps in-flight %s", ev.Entity, ev, other))
	}
	s.inflight[ev.Entity] = append(s.inflight[ev.Entity], ev)
	s.inflightBy[ev.Executor]++
	return ev, n, true
}

// done ends ev's time in flight.
func (s *Effects) done(ev *Event) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if ev.Ended.IsZero() {
		ev.Ended = time.Now()
	}
	list := s.inflight[ev.Entity]
	for i, x := range list {
		if x == ev {
			s.inflight[ev.Entity] = append(list[:i:i], list[i+1:]...)
			s.inflightBy[ev.Executor]--
			return
		}
	}
}

func (s *Effects) execute(w http.ResponseWriter, r *http.Request) {
	// Read the body: only then does the server notice a client that gave
	// up (and cancel r.Context()).
	body, _ := io.ReadAll(r.Body)
	ev, n, ok := s.admit(w, r, body)
	if !ok {
		return
	}
	key := ev.Key
	// The effect happens whether or not the caller is still there (a
	// killed caller does not undo it); the POST is out of flight once
	// applied or answered.
	defer s.done(ev)
	f := None
	if s.script != nil {
		f = s.script(key, n)
	}
	s.mu.Lock()
	g := s.gate
	s.mu.Unlock()
	if g != nil && g.ex == ev.Executor {
		g.once.Do(func() { close(g.arrived) })
		<-g.release
	}
	if s.delay != nil {
		time.Sleep(s.delay())
	}
	if f.Before {
		if f.Hang { // a timeout before the effect
			hang(r)
		}
		answer(w, f, http.StatusInternalServerError, "")
		return
	}
	s.mu.Lock()
	dup := f.Dedupe && s.effects[key] > 0
	if !dup {
		if s.effects[key] == 0 {
			s.applied[key] = time.Now()
		}
		s.effects[key]++
		ev.Verdict = "applied"
	}
	ev.Ended = time.Now()
	s.mu.Unlock()
	s.done(ev)
	created := fmt.Sprintf(`{"effect_id":%q}`, "e-"+key)
	switch {
	case dup:
		answer(w, Fault{Status: http.StatusOK, Body: fmt.Sprintf(`{"effect_id":%q,"deduplicated":"true"}`, "e-"+key)}, 0, "")
	case f.Hang:
		hang(r)
		answer(w, f, http.StatusCreated, created)
	case f.Reset:
		conn, _, err := http.NewResponseController(w).Hijack()
		if err != nil {
			panic(err)
		}
		if tc, ok := conn.(*net.TCPConn); ok {
			_ = tc.SetLinger(0) // RST rather than FIN
		}
		conn.Close()
	case f.Cut:
		conn, buf, err := http.NewResponseController(w).Hijack()
		if err != nil {
			panic(err)
		}
		_, _ = buf.WriteString("HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n{\"effect")
		_ = buf.Flush()
		_ = conn.Close()
	default:
		answer(w, f, http.StatusCreated, created)
	}
}

// answer writes f's answer: its status (def when 0), Retry-After and
// body (body when empty, else a JSON message naming the status).
func answer(w http.ResponseWriter, f Fault, def int, body string) {
	code := f.Status
	if code == 0 {
		code = def
	}
	if f.Body != "" {
		body = f.Body
	}
	if body == "" {
		body = fmt.Sprintf(`{"message":%q}`, http.StatusText(code))
	}
	ct := f.ContentType
	if ct == "" {
		ct = "application/json"
	}
	w.Header().Set("Content-Type", ct)
	if f.RetryAfter != "" {
		w.Header().Set("Retry-After", f.RetryAfter)
	}
	w.WriteHeader(code)
	_, _ = io.WriteString(w, body)
}

func (s *Effects) confirmHandler(w http.ResponseWriter, r *http.Request) {
	key := r.PathValue("key")
	s.mu.Lock()
	s.confirms[key]++
	n := s.confirms[key]
	s.confirmsBy[r.PathValue("ex")+" "+key]++
	applied := s.effects[key] > 0 && time.Since(s.applied[key]) >= s.lookupLag
	s.mu.Unlock()
	f := None
	if s.confirm != nil {
		f = s.confirm(key, n, applied)
	}
	if f.Hang {
		hang(r)
	}
	switch {
	case f.Status != 0:
		answer(w, f, 0, "")
	case !applied:
		answer(w, Fault{Status: http.StatusNotFound, Body: `{"message":"no such effect"}`}, 0, "")
	default:
		answer(w, f, http.StatusOK, fmt.Sprintf(`{"confirmed":true,"key":%q,"effect_id":%q}`, key, "e-"+key))
	}
}

// Effects is how many times the effect of key was applied.
func (s *Effects) Effects(key string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.effects[key]
}

// Counts returns the POSTs, effects and confirms seen for key.
func (s *Effects) Counts(key string) (posts []Event, effects, confirms int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, e := range s.byKey[key] {
		posts = append(posts, *e)
	}
	return posts, s.effects[key], s.confirms[key]
}

// EffectCounts returns a copy of the effects per key.
func (s *Effects) EffectCounts() map[string]int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return maps.Clone(s.effects)
}

// ConfirmsBy returns a copy of the confirms per "executor key".
func (s *Effects) ConfirmsBy() map[string]int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return maps.Clone(s.confirmsBy)
}

// Posts is how many POSTs the service received.
func (s *Effects) Posts() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.events)
}

// Overlaps lists the overlapping executions of an entity: a POST that
// arrived while another of its entity was being applied.
func (s *Effects) Overlaps() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.overlaps...)
}

// TokenErrors lists the POSTs without the Onceflight headers, and the new
// keys of an entity whose fencing token was not above the last key's.
func (s *Effects) TokenErrors() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.tokenErrs...)
}

// Refused lists the writes refused for a stale fencing token.
func (s *Effects) Refused() []Event {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]Event, len(s.refused))
	for i, e := range s.refused {
		out[i] = *e
	}
	return out
}

// InflightOf is how many of ex's POSTs are being applied.
func (s *Effects) InflightOf(ex string) int {
	n, _ := s.InflightSince(ex)
	return n
}

// InflightSince returns ex's POSTs being applied and when the oldest
// arrived.
func (s *Effects) InflightSince(ex string) (n int, oldest time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, list := range s.inflight {
		for _, e := range list {
			if e.Executor == ex && (oldest.IsZero() || e.Arrived.Before(oldest)) {
				oldest = e.Arrived
			}
		}
	}
	return s.inflightBy[ex], oldest
}

// EventsWhere returns copies of the events for which keep holds, in
// arrival order.
func (s *Effects) EventsWhere(keep func(e Event) bool) []Event {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []Event
	for _, e := range s.events {
		if keep(*e) {
			out = append(out, *e)
		}
	}
	return out
}

// EventsFor returns the service's events for an entity, in arrival
// order, one a line, to explain an error.
func (s *Effects) EventsFor(entity string) string {
	var lines []string
	for _, e := range s.EventsWhere(func(e Event) bool { return e.Entity == entity }) {
		lines = append(lines, e.String())
	}
	return "\n  service calls for the entity:\n    " + strings.Join(lines, "\n    ")
}

// Check fails t unless every key in want took effect exactly want[key]
// times, no other key took effect, and no entity ever had two POSTs in
// flight.
func (s *Effects) Check(t testing.TB, want map[string]int) {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	for k, n := range want {
		if s.effects[k] != n {
			t.Errorf("%s took effect %d times (%d POSTs), want %d", k, s.effects[k], len(s.byKey[k]), n)
		}
	}
	for k, n := range s.effects {
		if _, ok := want[k]; !ok && n > 0 {
			t.Errorf("%s took effect %d times, want no effect", k, n)
		}
	}
	if n := len(s.overlaps); n > 0 {
		t.Errorf("%d overlapping executions of an entity (a POST arriving while another of the entity was being applied), first %v", n, s.overlaps[:min(n, 10)])
	}
}
