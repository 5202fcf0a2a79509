// Package apifake holds the fake external systems of the tests: real
// HTTP servers on loopback (httptest) that count the effects they apply
// and take injected faults (Fault), so tests of the http connector and of
// the executor can prove "one effect" against them. Effects is the
// generic non-idempotent effect API the executor's tests call; Payments
// (Stripe-style), Messaging (basic auth) and Webhooks (a Standard
// Webhooks receiver) are the kinds of API the examples in examples/apis
// call (docs/connectors.md#calling-a-real-api), and check credentials as
// the real ones do.
package apifake

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
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

// Fault is what a fake does around the effect of one request; the zero
// Fault (None) applies the effect and answers normally. The API fakes
// (Payments, Messaging, Webhooks) take theirs in order from those
// injected; Effects asks its script.
type Fault struct {
	// Before answers without applying anything: "a 500 (or 429, 503)
	// before the effect". Status defaults to 500.
	Before bool
	// Status is the answer's status code (0: the fake's normal one).
	Status int
	// RetryAfter, when set, is sent as the Retry-After header.
	RetryAfter string
	// Body and ContentType replace the answer's body (default: the
	// fake's normal one, or a JSON message naming Status) and its type
	// (default application/json).
	Body, ContentType string
	// Hang applies the effect and then does not answer until the client
	// gives up: "a timeout after the effect". With Before it applies
	// nothing: "a timeout before the effect".
	Hang bool
	// Reset applies the effect and then resets the connection.
	Reset bool
	// Cut applies the effect and then closes the connection in the
	// middle of a 200 response.
	Cut bool
	// Dedupe makes a repeated key that was already applied apply nothing
	// and answer 200 with the existing effect, as an idempotent API does.
	Dedupe bool
}

// The faults the API fakes take.
var (
	// None applies the effect and answers normally.
	None = Fault{}
	// HangAfterEffect applies the effect and then does not answer until
	// the client gives up: "a timeout after the effect".
	HangAfterEffect = Fault{Hang: true}
	// FailBeforeEffect answers 500 without applying anything: "a 500
	// before the effect".
	FailBeforeEffect = Fault{Before: true, Status: 500}
)

// base is what every fake shares: the server, faults and counts.
type base struct {
	srv *httptest.Server
	// mu guards everything below: the handlers and the test's reads take
	// it. A leaf lock.
	mu sync.Mutex
	// effects by idempotency key (or webhook-id / client reference)
	effects map[string]int
	faults  []Fault
	calls   int // Execute requests received
	lookups int // confirmation requests received
	// Seen are the request headers of every Execute request, in order.
	seen []http.Header
	// lag is how long after a write the lookup shows it (LagLookups).
	lag time.Duration
}

// LagLookups makes the fake's lookup show a write only d after it was
// made, answering as if there were none until then: an API whose list or
// search answers from an eventually consistent index (the action's
// lookup_lag, docs/connectors.md).
func (b *base) LagLookups(d time.Duration) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.lag = d
}

// shows reports whether the lookup shows a write made at t; mu held.
func (b *base) shows(t time.Time) bool { return time.Since(t) >= b.lag }

func (b *base) start(t testing.TB, h http.Handler) {
	b.effects = map[string]int{}
	b.srv = httptest.NewServer(h)
	t.Cleanup(b.srv.Close)
}

// URL is the server's base URL, e.g. http://127.0.0.1:PORT.
func (b *base) URL() string { return b.srv.URL }

// Inject queues faults for the next Execute requests.
func (b *base) Inject(fs ...Fault) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.faults = append(b.faults, fs...)
}

// Effects is how many times the effect of key was applied.
func (b *base) Effects(key string) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.effects[key]
}

// Calls and Lookups count Execute and confirmation requests.
func (b *base) Calls() int   { b.mu.Lock(); defer b.mu.Unlock(); return b.calls }
func (b *base) Lookups() int { b.mu.Lock(); defer b.mu.Unlock(); return b.lookups }

// Headers returns the headers of every Execute request received.
func (b *base) Headers() []http.Header {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]http.Header(nil), b.seen...)
}

// next records an Execute request and returns its fault.
func (b *base) next(r *http.Request) Fault {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.calls++
	b.seen = append(b.seen, r.Header.Clone())
	if len(b.faults) == 0 {
		return None
	}
	f := b.faults[0]
	b.faults = b.faults[1:]
	return f
}

// hang waits for the client to give up (bounded, so Close never waits long).
func hang(r *http.Request) {
	select {
	case <-r.Context().Done():
	case <-time.After(10 * time.Second):
	}
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}

// Payments is a Stripe-style payments API: POST /v1/refunds with a form
// body and "Authorization: Bearer <secret key>"; refunds are listed by
// idempotency key with GET /v1/refunds?idempotency_key=K, which answers
// {"data": []} when there is none. A wrong key is 401 with a message that
// quotes the key it got, as some APIs do: what the connector must not
// show. Dedupe (off by default, to prove the connector alone keeps one
// effect) makes a repeated Idempotency-Key return the first refund. A
// refund's metadata is the form's metadata[...] fields, as sent.
type Payments struct {
	base
	Key    string
	Dedupe bool
	// Status is the refund status answered (default "succeeded").
	Status  string
	refunds map[string]map[string]any
	// made is when each refund was made, order the keys in that order.
	made         map[string]time.Time
	order        []string
	ignoreFilter bool
}

// IgnoreFilter makes the list answer every refund (that it shows), in
// the order they were made, whatever idempotency_key asks for: an API that does not know the
// filter, or a filter on a field that is not unique.
func (p *Payments) IgnoreFilter() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.ignoreFilter = true
}

// NewPayments starts a payments fake accepting secret key.
func NewPayments(t testing.TB, key string) *Payments {
	p := &Payments{Key: key, refunds: map[string]map[string]any{}, made: map[string]time.Time{}}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/refunds", p.create)
	mux.HandleFunc("GET /v1/refunds", p.list)
	p.start(t, mux)
	return p
}

func (p *Payments) authorized(w http.ResponseWriter, r *http.Request) bool {
	got := strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer ")
	if got == p.Key {
		return true
	}
	msg := "You did not provide an API key."
	if got != "" {
		msg = "Invalid API Key provided: " + got
	}
	writeJSON(w, http.StatusUnauthorized, map[string]any{"error": map[string]any{"type": "invalid_request_error", "message": msg}})
	return false
}

func (p *Payments) create(w http.ResponseWriter, r *http.Request) {
	f := p.next(r)
	if !p.authorized(w, r) {
		return
	}
	if r.Header.Get("Content-Type") != "application/x-www-form-urlencoded" {
		writeJSON(w, http.StatusBadRequest, map[string]any{"error": map[string]any{"message": "form body expected"}})
		return
	}
	if err := r.ParseForm(); err != nil || r.PostForm.Get("charge") == "" {
		writeJSON(w, http.StatusBadRequest, map[string]any{"error": map[string]any{"message": "Missing required param: charge."}})
		return
	}
	if f.Before {
		answer(w, f, http.StatusInternalServerError, `{"error":{"message":"internal error"}}`)
		return
	}
	key := r.Header.Get("Idempotency-Key")
	p.mu.Lock()
	rf, dup := p.refunds[key]
	if !dup || !p.Dedupe {
		p.effects[key]++
		meta := map[string]any{}
		for f, v := range r.PostForm {
			if name, ok := strings.CutPrefix(f, "metadata["); ok && strings.HasSuffix(name, "]") {
				meta[strings.TrimSuffix(name, "]")] = v[0]
			}
		}
		rf = map[string]any{
			"id": fmt.Sprintf("re_%d", p.calls), "object": "refund", "charge": r.PostForm.Get("charge"),
			"amount": r.PostForm.Get("amount"), "status": cmpOr(p.Status, "succeeded"),
			"metadata": meta,
		}
		if _, ok := p.refunds[key]; !ok {
			p.made[key] = time.Now()
			p.order = append(p.order, key)
		}
		p.refunds[key] = rf
	}
	p.mu.Unlock()
	if f.Hang {
		hang(r)
		return
	}
	writeJSON(w, http.StatusOK, rf)
}

func (p *Payments) list(w http.ResponseWriter, r *http.Request) {
	p.mu.Lock()
	p.lookups++
	p.mu.Unlock()
	if !p.authorized(w, r) {
		return
	}
	data := []any{}
	p.mu.Lock()
	for _, k := range p.order {
		if (p.ignoreFilter || k == r.URL.Query().Get("idempotency_key")) && p.shows(p.made[k]) {
			data = append(data, p.refunds[k])
		}
	}
	p.mu.Unlock()
	writeJSON(w, http.StatusOK, map[string]any{"object": "list", "data": data, "has_more": false})
}

// Messaging is a messaging API with basic auth (account, token): POST
// /v1/messages with a JSON body {"to","text","client_ref"}; a message to
// an unreachable number is answered 200 {"status":"failed"}. Messages are
// looked up by the client's reference with GET
// /v1/messages?client_ref=R → {"messages": [...]}. It does not deduplicate.
type Messaging struct {
	base
	Account, Token string
	msgs           map[string]map[string]any
	made           map[string]time.Time
}

// Unreachable is the number the messaging fake answers "failed" for.
const Unreachable = "+15550000000"

// NewMessaging starts a messaging fake accepting account:token.
func NewMessaging(t testing.TB, account, token string) *Messaging {
	m := &Messaging{Account: account, Token: token, msgs: map[string]map[string]any{}, made: map[string]time.Time{}}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/messages", m.send)
	mux.HandleFunc("GET /v1/messages", m.list)
	m.start(t, mux)
	return m
}

func (m *Messaging) authorized(w http.ResponseWriter, r *http.Request) bool {
	u, pw, ok := r.BasicAuth()
	if ok && u == m.Account && pw == m.Token {
		return true
	}
	writeJSON(w, http.StatusUnauthorized, map[string]any{"code": 20003, "message": "Authenticate"})
	return false
}

func (m *Messaging) send(w http.ResponseWriter, r *http.Request) {
	f := m.next(r)
	if !m.authorized(w, r) {
		return
	}
	var in struct {
		To        string `json:"to"`
		Text      string `json:"text"`
		ClientRef string `json:"client_ref"`
	}
	dec := json.NewDecoder(r.Body)
	if err := dec.Decode(&in); err != nil || in.To == "" || in.ClientRef == "" {
		writeJSON(w, http.StatusBadRequest, map[string]any{"message": fmt.Sprintf("bad message: %v", err)})
		return
	}
	if f.Before {
		answer(w, f, http.StatusInternalServerError, `{"message":"try later"}`)
		return
	}
	if in.To == Unreachable {
		writeJSON(w, http.StatusOK, map[string]any{"status": "failed", "message": "unreachable number"})
		return
	}
	m.mu.Lock()
	m.effects[in.ClientRef]++
	msg := map[string]any{"id": fmt.Sprintf("SM%d", m.calls), "to": in.To, "status": "queued", "client_ref": in.ClientRef}
	if _, ok := m.msgs[in.ClientRef]; !ok {
		m.made[in.ClientRef] = time.Now()
	}
	m.msgs[in.ClientRef] = msg
	m.mu.Unlock()
	if f.Hang {
		hang(r)
		return
	}
	writeJSON(w, http.StatusOK, msg)
}

func (m *Messaging) list(w http.ResponseWriter, r *http.Request) {
	m.mu.Lock()
	m.lookups++
	m.mu.Unlock()
	if !m.authorized(w, r) {
		return
	}
	out := []any{}
	m.mu.Lock()
	if msg, ok := m.msgs[r.URL.Query().Get("client_ref")]; ok && m.shows(m.made[r.URL.Query().Get("client_ref")]) {
		out = append(out, msg)
	}
	m.mu.Unlock()
	writeJSON(w, http.StatusOK, map[string]any{"messages": out})
}

// Webhooks is a receiver that verifies Standard Webhooks signatures
// (standardwebhooks.com) with Secret ("whsec_" + base64): a bad or missing
// signature, or a timestamp more than 5 minutes off, is 401. It
// deduplicates by webhook-id, as the specification asks receivers to.
type Webhooks struct {
	base
	Secret string
	Bodies [][]byte
}

// NewWebhooks starts a receiver verifying with secret.
func NewWebhooks(t testing.TB, secret string) *Webhooks {
	h := &Webhooks{Secret: secret}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /hooks", h.receive)
	h.start(t, mux)
	return h
}

// Sign is the v1 signature of id.timestamp.body under secret.
func Sign(secret, id, timestamp string, body []byte) string {
	key, _ := base64.StdEncoding.DecodeString(strings.TrimPrefix(secret, "whsec_"))
	mac := hmac.New(sha256.New, key)
	mac.Write([]byte(id + "." + timestamp + "."))
	mac.Write(body)
	return "v1," + base64.StdEncoding.EncodeToString(mac.Sum(nil))
}

func (h *Webhooks) receive(w http.ResponseWriter, r *http.Request) {
	f := h.next(r)
	body, _ := io.ReadAll(r.Body)
	id, ts := r.Header.Get("webhook-id"), r.Header.Get("webhook-timestamp")
	sec, err := strconv.ParseInt(ts, 10, 64)
	if err != nil || time.Since(time.Unix(sec, 0)).Abs() > 5*time.Minute {
		writeJSON(w, http.StatusUnauthorized, map[string]any{"message": "bad timestamp"})
		return
	}
	want := Sign(h.Secret, id, ts, body)
	ok := false
	for _, s := range strings.Fields(r.Header.Get("webhook-signature")) {
		ok = ok || hmac.Equal([]byte(s), []byte(want))
	}
	if !ok {
		writeJSON(w, http.StatusUnauthorized, map[string]any{"message": "bad signature"})
		return
	}
	if f.Before {
		answer(w, f, http.StatusInternalServerError, "")
		return
	}
	h.mu.Lock()
	if h.effects[id] == 0 {
		h.effects[id]++
		h.Bodies = append(h.Bodies, body)
	}
	h.mu.Unlock()
	if f.Hang {
		hang(r)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}
