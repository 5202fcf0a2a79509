// Package ingress accepts commands over HTTP (`serve --ingress`), for
// producers that are not Kafka clients: web backends, scripts, agent
// runtimes. POST /v1/commands/{action} with an Idempotency-Key header and
// the data as body publishes the same CloudEvent a Kafka producer would,
// through the public client (package client), so key, partitioning and
// encoding are the ones every other producer gets; with `Prefer: wait=N` it
// answers with the outcome. Repeats need nothing here: the executor answers
// a repeated key with the recorded result.
package ingress

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/time/rate"

	"github.com/onceflight/onceflight/client"
	"github.com/onceflight/onceflight/schemas"
)

// Defaults of Config fields left zero.
const (
	DefaultMaxWait     = 30 * time.Second
	DefaultMaxInflight = 256
	// DefaultSource is the CloudEvents source of ingress commands: with the
	// command id it makes the default idempotency key, though the ingress
	// requires an explicit Idempotency-Key.
	DefaultSource = "onceflight-ingress"
)

// maxKeyBytes bounds Idempotency-Key and the entity: they are Kafka keys
// and index keys, not payloads.
const maxKeyBytes = 1024

// Config configures Handler.
type Config struct {
	// Client publishes the commands and reads their outcomes. Required.
	Client *client.Client
	// Known reports whether an action is configured; a command for an
	// unknown one is answered 404 without being published. Nil accepts
	// every action (the executor then rejects unknown ones).
	Known func(action string) bool
	// Token, if not empty, is the bearer token every request must carry
	// (Authorization: Bearer TOKEN), compared in constant time.
	Token []byte
	// MaxDataBytes bounds the body (the command data); the executor's
	// --max-data-bytes, so too large data is refused before it is
	// published. Default schemas.DefaultMaxDataBytes.
	MaxDataBytes int
	// MaxWait caps Prefer: wait. Default DefaultMaxWait.
	MaxWait time.Duration
	// MaxInflight bounds requests handled at once (each may hold a
	// waiter); past it requests get 429 with Retry-After. Default
	// DefaultMaxInflight.
	MaxInflight int
	// Rate, if > 0, bounds accepted requests per second over the whole
	// ingress, with bursts of up to Burst (default: Rate, at least 1);
	// past it requests get 429 with Retry-After.
	Rate  float64
	Burst int
	// Source is the CloudEvents source of the commands. Default
	// DefaultSource.
	Source string
	// TrackFor is how long the ingress remembers a command it published
	// without waiting for its outcome, so that a retry of the same key
	// meanwhile is answered 409 (in progress) rather than published again.
	// Default DefaultTrackFor.
	TrackFor time.Duration
	// MaxTracked bounds the commands remembered that way; past it a
	// retry is published again, which is safe (the executor answers it
	// from the record) but answered 202 instead of 409. Default
	// DefaultMaxTracked.
	MaxTracked int
	// Redact, if set, hides the fields of the action's redact list in the
	// record (and result) an answer carries, as the record API does.
	Redact func(schemas.Record) schemas.Record
}

// Defaults of the in-progress tracking.
const (
	DefaultTrackFor   = 5 * time.Minute
	DefaultMaxTracked = 10000
)

// ProblemBase is where the problem types are documented: a problem's
// type is ProblemBase + its code, an anchor in docs/http.md.
const ProblemBase = "https://github.com/onceflight/onceflight/blob/main/docs/http.md#problem-"

// CodeInProgress is the problem code of a request whose key is still
// being processed (draft-ietf-httpapi-idempotency-key-header: 409).
const CodeInProgress = "in_progress"

// HeaderReplayed marks an answer taken from a record (Stripe's
// Idempotent-Replayed), so a client knows it did not cause a new effect.
const HeaderReplayed = "Idempotent-Replayed"

func (c *Config) withDefaults() {
	if c.MaxDataBytes <= 0 {
		c.MaxDataBytes = schemas.DefaultMaxDataBytes
	}
	if c.MaxWait <= 0 {
		c.MaxWait = DefaultMaxWait
	}
	if c.MaxInflight <= 0 {
		c.MaxInflight = DefaultMaxInflight
	}
	if c.Source == "" {
		c.Source = DefaultSource
	}
	if c.Known == nil {
		c.Known = func(string) bool { return true }
	}
	if c.TrackFor <= 0 {
		c.TrackFor = DefaultTrackFor
	}
	if c.MaxTracked <= 0 {
		c.MaxTracked = DefaultMaxTracked
	}
}

// Handler serves POST /v1/commands/{action}. Other paths are not its
// business: serve mounts it beside the read-only API, which answers the
// Location it hands out (GET /v1/executions/{key}?entity=).
func Handler(cfg Config) http.Handler {
	cfg.withDefaults()
	h := &handler{cfg: cfg, slots: make(chan struct{}, cfg.MaxInflight), flights: flights{m: map[flightKey]struct{}{}, max: cfg.MaxTracked},
		tokenSum: sha256.Sum256(cfg.Token)}
	if cfg.Rate > 0 {
		h.rate = newLimiter(cfg.Rate, cfg.Burst)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/commands/{action}", h.post)
	return mux
}

type handler struct {
	cfg Config
	// tokenSum is the SHA-256 of cfg.Token, which requests' tokens are
	// compared with (authorized).
	tokenSum [sha256.Size]byte
	slots    chan struct{}
	rate     *rate.Limiter // nil: no rate limit
	flights  flights
}

// flights are the keys this ingress published and has not seen answered
// yet. It is this process's knowledge only: a retry through another
// ingress instance is published and waits in the executor (docs/http.md).
type flights struct {
	mu  sync.Mutex // guards m; max is read-only
	m   map[flightKey]struct{}
	max int
}

// flightKey scopes a key to its entity, as the executor does.
type flightKey struct{ entity, key string }

// start marks k in flight; false if it already is. full reports that k
// was not tracked because the table is at its bound.
func (f *flights) start(k flightKey) (started, full bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, ok := f.m[k]; ok {
		return false, false
	}
	if len(f.m) >= f.max {
		return true, true
	}
	f.m[k] = struct{}{}
	return true, false
}

func (f *flights) end(k flightKey) {
	f.mu.Lock()
	delete(f.m, k)
	f.mu.Unlock()
}

// Problem is an RFC 9457 problem document, with Code, the stable error
// code a program switches on (the record codes of SPEC §3 where one
// applies).
type Problem struct {
	Type   string `json:"type"`
	Title  string `json:"title"`
	Status int    `json:"status"`
	Detail string `json:"detail"`
	Code   string `json:"code"`
}

func problem(status int, code, format string, args ...any) *Problem {
	return &Problem{Type: ProblemBase + code, Title: http.StatusText(status), Status: status, Code: code, Detail: fmt.Sprintf(format, args...)}
}

func (p *Problem) write(w http.ResponseWriter) {
	w.Header().Set("Content-Type", "application/problem+json")
	w.WriteHeader(p.Status)
	_ = json.NewEncoder(w).Encode(p)
}

// Request is a parsed ingress request.
type Request struct {
	Command client.Command
	// Wait is how long to wait for the outcome; 0: answer at once.
	Wait time.Duration
}

// traceParent is the W3C trace context format (version 00 and later
// versions' leading fields).
var traceParent = regexp.MustCompile(`^[0-9a-f]{2}-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}(-.*)?$`)

// ParseRequest turns r into a command, or a problem naming what is wrong.
// It reads the body (at most maxData bytes). It is the whole of the
// ingress's input handling, so that the fuzz test covers it.
func ParseRequest(r *http.Request, maxData int, maxWait time.Duration, known func(string) bool) (Request, *Problem) {
	action := r.PathValue("action")
	if action == "" {
		return Request{}, problem(http.StatusNotFound, schemas.CodeUnknownAction, "no action in the path: POST /v1/commands/{action}")
	}
	if !known(action) {
		return Request{}, problem(http.StatusNotFound, schemas.CodeUnknownAction, "action %q is not configured", action)
	}
	key, p := headerString(r.Header, "Idempotency-Key")
	if p != nil {
		return Request{}, p
	}
	if key == "" {
		return Request{}, problem(http.StatusBadRequest, schemas.CodeInvalidCommand, "the Idempotency-Key header is required: it is the operation's identity, the same for every retry")
	}
	q, err := url.ParseQuery(r.URL.RawQuery)
	if err != nil {
		return Request{}, problem(http.StatusBadRequest, schemas.CodeInvalidCommand, "bad query string: %v", err)
	}
	entity := q.Get("entity")
	if entity == "" {
		if entity, p = headerString(r.Header, "Onceflight-Entity"); p != nil {
			return Request{}, p
		}
	}
	if entity == "" {
		return Request{}, problem(http.StatusBadRequest, schemas.CodeInvalidCommand, "the entity is required: ?entity= or the Onceflight-Entity header")
	}
	if len(entity) > maxKeyBytes || !validText(entity) {
		return Request{}, problem(http.StatusBadRequest, schemas.CodeInvalidCommand, "the entity must be at most %d bytes of printable UTF-8", maxKeyBytes)
	}
	cmd := client.Command{Action: action, Entity: entity, Key: key}
	if v := r.Header.Get("Onceflight-Expected-Version"); v != "" {
		n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
		if err != nil || n < 0 {
			return Request{}, problem(http.StatusBadRequest, schemas.CodeInvalidCommand, "Onceflight-Expected-Version must be a non-negative integer, got %q", v)
		}
		cmd.ExpectedVersion = &n
	}
	if v := r.Header.Get("Onceflight-Deadline"); v != "" {
		t, err := time.Parse(time.RFC3339Nano, strings.TrimSpace(v))
		if err != nil {
			return Request{}, problem(http.StatusBadRequest, schemas.CodeInvalidCommand, "Onceflight-Deadline must be an RFC 3339 time, got %q", v)
		}
		cmd.Deadline = t
	}
	if v := r.Header.Get("traceparent"); v != "" {
		if !traceParent.MatchString(v) {
			return Request{}, problem(http.StatusBadRequest, schemas.CodeInvalidCommand, "traceparent is not a W3C trace context: %q", v)
		}
		cmd.TraceParent = v
	}
	wait, p := waitOf(r, q, maxWait)
	if p != nil {
		return Request{}, p
	}
	if ct := r.Header.Get("Content-Type"); ct != "" && !isJSON(ct) {
		return Request{}, problem(http.StatusUnsupportedMediaType, schemas.CodeInvalidCommand, "the body is the command data and must be application/json, got %q", ct)
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, int64(maxData)+1))
	if err != nil {
		return Request{}, problem(http.StatusBadRequest, schemas.CodeInvalidCommand, "read body: %v", err)
	}
	if len(body) > maxData {
		return Request{}, problem(http.StatusRequestEntityTooLarge, schemas.CodeTooLarge, "the data is larger than %d bytes", maxData)
	}
	if t := bytes.TrimSpace(body); len(t) > 0 {
		if !json.Valid(t) || t[0] != '{' {
			return Request{}, problem(http.StatusBadRequest, schemas.CodeInvalidCommand, "the body must be a JSON object (the command data)")
		}
		// Else publishing it fails (the client refuses such data), which
		// would be answered 503 as if Kafka were down.
		if err := schemas.CheckIJSON(t); err != nil {
			return Request{}, problem(http.StatusBadRequest, schemas.CodeInvalidCommand, "the body is not I-JSON (RFC 7493): %v", err)
		}
		cmd.Data = json.RawMessage(t)
	}
	return Request{Command: cmd, Wait: wait}, nil
}

// headerString reads a header that may be sent bare (Stripe's
// Idempotency-Key) or as an RFC 8941 sf-string ("...", the IETF draft's).
func headerString(h http.Header, name string) (string, *Problem) {
	vs := h.Values(name)
	if len(vs) > 1 {
		return "", problem(http.StatusBadRequest, schemas.CodeInvalidCommand, "%s is given %d times", name, len(vs))
	}
	if len(vs) == 0 {
		return "", nil
	}
	v := strings.TrimSpace(vs[0])
	if len(v) >= 2 && v[0] == '"' && v[len(v)-1] == '"' {
		u, err := strconv.Unquote(v)
		if err != nil {
			return "", problem(http.StatusBadRequest, schemas.CodeInvalidCommand, "%s is a malformed quoted string", name)
		}
		v = u
	}
	if len(v) > maxKeyBytes || !validText(v) {
		return "", problem(http.StatusBadRequest, schemas.CodeInvalidCommand, "%s must be at most %d bytes of printable UTF-8", name, maxKeyBytes)
	}
	return v, nil
}

// validText: valid UTF-8 without control characters, which would make a
// key unprintable in every tool that shows it.
func validText(s string) bool {
	for _, r := range s {
		if r == '\uFFFD' || r < 0x20 || r == 0x7f {
			return false
		}
	}
	return true
}

func isJSON(ct string) bool {
	mt, _, _ := strings.Cut(ct, ";")
	mt = strings.ToLower(strings.TrimSpace(mt))
	return mt == "application/json" || strings.HasSuffix(mt, "+json")
}

// waitOf reads the wait: `?wait=` (a Go duration, or seconds) or
// `Prefer: wait=N` (RFC 7240, seconds), capped at maxWait.
func waitOf(r *http.Request, q url.Values, maxWait time.Duration) (time.Duration, *Problem) {
	var d time.Duration
	if v := q.Get("wait"); v != "" {
		var err error
		if d, err = time.ParseDuration(v); err != nil {
			n, nerr := strconv.ParseUint(v, 10, 32)
			if nerr != nil {
				return 0, problem(http.StatusBadRequest, schemas.CodeInvalidCommand, "wait must be a duration (5s) or seconds, got %q", v)
			}
			d = time.Duration(n) * time.Second
		}
	} else {
		for _, h := range r.Header.Values("Prefer") {
			for pref := range strings.SplitSeq(h, ",") {
				name, val, _ := strings.Cut(strings.TrimSpace(pref), "=")
				if !strings.EqualFold(strings.TrimSpace(name), "wait") {
					continue
				}
				val, _, _ = strings.Cut(val, ";")
				n, err := strconv.ParseUint(strings.Trim(strings.TrimSpace(val), `"`), 10, 32)
				if err != nil {
					return 0, problem(http.StatusBadRequest, schemas.CodeInvalidCommand, "Prefer: wait must be a number of seconds, got %q", val)
				}
				d = time.Duration(n) * time.Second
			}
		}
	}
	if d < 0 {
		return 0, problem(http.StatusBadRequest, schemas.CodeInvalidCommand, "wait must not be negative")
	}
	return min(d, maxWait), nil
}

// Answer is the body of a successful ingress response.
type Answer struct {
	CommandID string `json:"command_id"`
	Key       string `json:"key"`
	Entity    string `json:"entity"`
	// Status is the outcome's status, or "accepted" (not waited for) or
	// "pending" (no outcome within the wait).
	Status    string          `json:"status"`
	Replayed  bool            `json:"replayed,omitempty"`
	OutcomeID string          `json:"outcome_id,omitempty"`
	Error     *schemas.Error  `json:"error,omitempty"`
	Result    json.RawMessage `json:"result,omitempty"`
	Record    *schemas.Record `json:"record,omitempty"`
	// Location is where the record can be read (GET on the executor's
	// HTTP API), also sent as the Location header with 202.
	Location string `json:"location"`
}

func (h *handler) post(w http.ResponseWriter, r *http.Request) {
	// The token first: a request without it must not take from the rate
	// limit or the in-flight slots, which are the producers' (anyone who
	// reaches the ingress could otherwise starve them with 401s).
	if len(h.cfg.Token) > 0 && !h.authorized(r) {
		w.Header().Set("WWW-Authenticate", `Bearer realm="onceflight"`)
		problem(http.StatusUnauthorized, "unauthorized", "a valid bearer token is required (Authorization: Bearer TOKEN)").write(w)
		return
	}
	if h.rate != nil && !h.rate.Allow() {
		w.Header().Set("Retry-After", "1")
		problem(http.StatusTooManyRequests, "too_many_requests", "more than %g requests a second", h.cfg.Rate).write(w)
		return
	}
	select {
	case h.slots <- struct{}{}:
		defer func() { <-h.slots }()
	default:
		w.Header().Set("Retry-After", "1")
		problem(http.StatusTooManyRequests, "too_many_requests", "more than %d requests in progress", h.cfg.MaxInflight).write(w)
		return
	}
	req, p := ParseRequest(r, h.cfg.MaxDataBytes, h.cfg.MaxWait, h.cfg.Known)
	if p != nil {
		p.write(w)
		return
	}
	req.Command.Source = h.cfg.Source
	ctx := r.Context()
	fk := flightKey{req.Command.Entity, req.Command.Key}
	started, full := h.flights.start(fk)
	if !started && req.Wait == 0 {
		inProgress(w)
		return
	}
	tracked := started && !full
	if req.Wait == 0 && !tracked {
		sent, err := h.cfg.Client.Send(ctx, req.Command)
		if err != nil {
			problem(http.StatusServiceUnavailable, schemas.CodeConnectorUnavailable, "publish: %v", err).write(w)
			return
		}
		h.answer(w, http.StatusAccepted, Answer{CommandID: sent.ID, Key: sent.Key, Entity: req.Command.Entity, Status: "accepted"})
		return
	}
	pend, err := h.cfg.Client.Submit(ctx, req.Command)
	if err != nil {
		if tracked {
			h.flights.end(fk)
		}
		problem(http.StatusServiceUnavailable, schemas.CodeConnectorUnavailable, "publish: %v", err).write(w)
		return
	}
	if req.Wait == 0 {
		go h.track(pend, fk)
		h.answer(w, http.StatusAccepted, Answer{CommandID: pend.ID, Key: pend.Key, Entity: req.Command.Entity, Status: "accepted"})
		return
	}
	wctx, cancel := context.WithTimeout(ctx, req.Wait)
	defer cancel()
	w.Header().Set("Preference-Applied", "wait="+strconv.Itoa(int(req.Wait/time.Second)))
	o, err := pend.Wait(wctx)
	switch {
	case errors.Is(err, client.ErrNoOutcome):
		if tracked {
			go h.track(pend, fk)
		} else {
			pend.Forget()
		}
		h.answer(w, http.StatusAccepted, Answer{CommandID: pend.ID, Key: pend.Key, Entity: req.Command.Entity, Status: "pending"})
		return
	case err != nil:
		if tracked {
			h.flights.end(fk)
		}
		problem(http.StatusServiceUnavailable, schemas.CodeConnectorUnavailable, "wait for the outcome: %v", err).write(w)
		return
	}
	if tracked {
		h.flights.end(fk)
	}
	rec, result := o.Record, o.Result
	if h.cfg.Redact != nil {
		rec = h.cfg.Redact(rec)
		result = rec.Result
	}
	a := Answer{CommandID: o.CommandID, Key: o.Key, Entity: o.Entity, Status: string(o.Status), Replayed: o.Replayed,
		OutcomeID: o.ID, Error: rec.Error, Result: result, Record: &rec}
	if o.Replayed {
		w.Header().Set(HeaderReplayed, "true")
	}
	h.answer(w, StatusCode(o), a)
}

// track keeps fk in flight until pend's first outcome arrives or TrackFor
// passes, so that a retry meanwhile that does not wait is answered 409 (the
// draft's "retry while the original request is still being processed")
// instead of being published again. It runs after the request has ended:
// the command goes on without it. Outcomes come through the client's one
// shared reader, so tracking costs a map entry and a parked goroutine per
// key, both bounded by MaxTracked.
func (h *handler) track(pend *client.Pending, fk flightKey) {
	ctx, cancel := context.WithTimeout(context.Background(), h.cfg.TrackFor)
	defer cancel()
	if _, err := pend.Wait(ctx); err != nil {
		pend.Forget()
	}
	h.flights.end(fk)
}

func inProgress(w http.ResponseWriter) {
	w.Header().Set("Retry-After", "1")
	problem(http.StatusConflict, CodeInProgress, "a request with this Idempotency-Key is still being processed; retry later, or send Prefer: wait=N to wait for its outcome").write(w)
}

// StatusCode maps an outcome to the HTTP status the ingress answers with:
// 200 succeeded; 422 rejected (idempotency_key_reused — the key was used
// for other data, as the Idempotency-Key draft says — and every other
// rejection) and failed; 202 unresolved or held, which wait for an operator
// or the reconciler (the Location shows the settled record later). 409 is
// kept for a key still in progress (publishTracked).
func StatusCode(o client.Outcome) int {
	switch o.Status {
	case schemas.StatusSucceeded:
		return http.StatusOK
	case schemas.StatusRejected, schemas.StatusFailed:
		return http.StatusUnprocessableEntity
	}
	return http.StatusAccepted
}

func (h *handler) answer(w http.ResponseWriter, code int, a Answer) {
	a.Location = "/v1/executions/" + url.PathEscape(a.Key) + "?entity=" + url.QueryEscape(a.Entity)
	if code == http.StatusAccepted {
		w.Header().Set("Location", a.Location)
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(a)
}

func (h *handler) authorized(r *http.Request) bool {
	scheme, tok, ok := strings.Cut(r.Header.Get("Authorization"), " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return false
	}
	// Digests of equal length are compared, as httpauth compares its
	// tokens: ConstantTimeCompare of the tokens themselves returns at
	// once on a length that differs, which tells the token's length.
	sum := sha256.Sum256([]byte(strings.TrimSpace(tok)))
	return subtle.ConstantTimeCompare(sum[:], h.tokenSum[:]) == 1
}

// newLimiter is the ingress's one token bucket: rate tokens a second up to
// burst (default: rate, at least 1). One for the whole ingress, because
// what it protects (the commands topic, the executor's connectors) is
// shared; a per-client limit needs an identity the ingress does not have.
func newLimiter(r float64, burst int) *rate.Limiter {
	if burst < 1 {
		burst = max(1, int(r))
	}
	return rate.NewLimiter(rate.Limit(r), burst)
}
