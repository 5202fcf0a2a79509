package e2e

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/onceflight/onceflight/internal/apifake"
)

// Actions of the http connector tests (docs/connectors.md, docs/configuration.md). All point at one
// in-test service except svcRefused, whose url is a closed port.
const (
	svcHTTP       = "svc.http"       // url + confirm_url
	svcNoConfirm  = "svc.noconfirm"  // url only, not idempotent
	svcIdempotent = "svc.idempotent" // url only, idempotent_by_key
	svcRefused    = "svc.refused"    // url on a closed port

	svcTimeout        = 300 * time.Millisecond
	svcMaxAttempts    = 3
	svcConfirmTimeout = time.Second
	// svcGiveUpAfter ends "not done forever" rows: a "not done" answer
	// uses up no attempt, it is retried until give_up_after.
	svcGiveUpAfter = 2 * time.Second

	testTraceparent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
)

// httpConfig writes the actions file for svc as executor ex (reconciler
// slowed down so that it does not touch unresolved records during the test).
func httpConfig(t *testing.T, svc *apifake.Effects, ex string) string {
	t.Helper()
	closed := freePort(t)
	refused := action{name: svcRefused, connector: "http", url: "http://" + closed + "/exec", confirmURL: "http://" + closed + "/confirm/{key}"}
	idem := httpAction(svc, svcIdempotent, ex, false)
	idem.idempotentByKey = true
	actions := []action{httpAction(svc, svcHTTP, ex, true), httpAction(svc, svcNoConfirm, ex, false), idem, refused}
	for i := range actions {
		actions[i].timeout, actions[i].maxAttempts, actions[i].confirmTimeout = svcTimeout, svcMaxAttempts, svcConfirmTimeout
		actions[i].giveUpAfter = svcGiveUpAfter
	}
	return writeConfig(t, "1h", actions...)
}

// tableCase is one row of the docs/connectors.md tables driven end to end.
type tableCase struct {
	name     string // subtest name
	action   string
	key      string // behaviour "." suffix (see service)
	status   string
	code     string // error code; "" for none
	attempts int
	posts    int // POSTs the service received
	effects  int
	confirm  bool                                       // Confirm must have been asked (false: must not)
	result   func(t *testing.T, result json.RawMessage) // extra check of a succeeded result
}

func (c tableCase) entity() string { return "tab-" + strings.ReplaceAll(c.key, ".", "-") }
func (c tableCase) id() string     { return "cmd-" + c.key }

// resultIs checks a result {"http_status":status,"body":body}.
func resultIs(status int, body any) func(*testing.T, json.RawMessage) {
	return func(t *testing.T, raw json.RawMessage) {
		t.Helper()
		var got struct {
			Status int `json:"http_status"`
			Body   any `json:"body"`
		}
		if err := json.Unmarshal(raw, &got); err != nil {
			t.Errorf("result %s: %v", raw, err)
			return
		}
		want := any(nil)
		b, _ := json.Marshal(body)
		_ = json.Unmarshal(b, &want)
		if got.Status != status || !reflect.DeepEqual(got.Body, want) {
			t.Errorf("result = %s, want http_status %d and body %s", raw, status, b)
		}
	}
}

func confirmBody(key string) map[string]any {
	return map[string]any{"confirmed": true, "key": key, "effect_id": "e-" + key}
}

// TestHTTPConnectorTables drives every row of both docs/connectors.md tables of the
// http connector through the built binary: commands produced with kcat,
// outcomes read back with kcat, a non-idempotent HTTP service counting
// effects per key.
func TestHTTPConnectorTables(t *testing.T) {
	kcat := kcatPath(t)
	svc := newService(t, numPartitions, nil)
	brokers := startBroker(t)
	startServe(t, serveOpts{brokers: brokers, config: httpConfig(t, svc, "ex-http"), executorID: "ex-http"})

	created := func(key string) func(*testing.T, json.RawMessage) {
		return resultIs(201, map[string]string{"effect_id": "e-" + key})
	}
	cases := []tableCase{
		// Execute table.
		{name: "execute/2xx_json", action: svcHTTP, key: "ok.1", status: "succeeded", attempts: 1, posts: 1, effects: 1, result: created("ok.1")},
		{name: "execute/2xx_text", action: svcHTTP, key: "text.1", status: "succeeded", attempts: 1, posts: 1, effects: 1, result: resultIs(200, "applied text.1")},
		{name: "execute/422", action: svcHTTP, key: "reject.1", status: "failed", code: "connector_rejected", attempts: 1, posts: 1},
		{name: "execute/408_then_201", action: svcHTTP, key: "busy408.1", status: "succeeded", attempts: 2, posts: 2, effects: 1, result: created("busy408.1")},
		{name: "execute/425_then_201", action: svcHTTP, key: "busy425.1", status: "succeeded", attempts: 2, posts: 2, effects: 1, result: created("busy425.1")},
		{name: "execute/429_then_201", action: svcHTTP, key: "busy429.1", status: "succeeded", attempts: 2, posts: 2, effects: 1, result: created("busy429.1")},
		{name: "execute/503_then_201", action: svcHTTP, key: "busy503.1", status: "succeeded", attempts: 2, posts: 2, effects: 1, result: created("busy503.1")},
		{name: "execute/429_503_then_201", action: svcHTTP, key: "busymix.1", status: "succeeded", attempts: 3, posts: 3, effects: 1, result: created("busymix.1")},
		// "Not done" forever: retried until give_up_after, each POST an
		// attempt that used up none (attempts -1: several, as many as
		// POSTs for 503; none reach a closed port).
		{name: "execute/503_forever", action: svcHTTP, key: "down.1", status: "failed", code: "connector_unavailable", attempts: -1, posts: -1},
		{name: "execute/connection_refused", action: svcRefused, key: "refused.1", status: "failed", code: "connector_unavailable", attempts: -1},
		{name: "execute/500_after_applying", action: svcHTTP, key: "amb500.1", status: "succeeded", attempts: 1, posts: 1, effects: 1, confirm: true, result: resultIs(200, confirmBody("amb500.1"))},
		{name: "execute/502_after_applying", action: svcHTTP, key: "amb502.1", status: "succeeded", attempts: 1, posts: 1, effects: 1, confirm: true, result: resultIs(200, confirmBody("amb502.1"))},
		{name: "execute/504_after_applying", action: svcHTTP, key: "amb504.1", status: "succeeded", attempts: 1, posts: 1, effects: 1, confirm: true, result: resultIs(200, confirmBody("amb504.1"))},
		{name: "execute/timeout_after_applying", action: svcHTTP, key: "slow.1", status: "succeeded", attempts: 1, posts: 1, effects: 1, confirm: true, result: resultIs(200, confirmBody("slow.1"))},
		{name: "execute/reset_after_applying", action: svcHTTP, key: "reset.1", status: "succeeded", attempts: 1, posts: 1, effects: 1, confirm: true, result: resultIs(200, confirmBody("reset.1"))},
		{name: "execute/500_before_applying", action: svcHTTP, key: "lost500.1", status: "succeeded", attempts: 2, posts: 2, effects: 1, confirm: true, result: created("lost500.1")},
		// Confirm table (200 and 404 are also the rows above).
		{name: "confirm/200", action: svcHTTP, key: "amb500.2", status: "succeeded", attempts: 1, posts: 1, effects: 1, confirm: true, result: resultIs(200, confirmBody("amb500.2"))},
		{name: "confirm/404_executes_again", action: svcHTTP, key: "lost500.2", status: "succeeded", attempts: 2, posts: 2, effects: 1, confirm: true, result: created("lost500.2")},
		{name: "confirm/500_until_timeout", action: svcHTTP, key: "cfail.1", status: "unresolved", code: "confirmation_timeout", attempts: 1, posts: 1, effects: 1, confirm: true},
		{name: "confirm/no_answer_until_timeout", action: svcHTTP, key: "chang.1", status: "unresolved", code: "confirmation_timeout", attempts: 1, posts: 1, effects: 1, confirm: true},
		{name: "confirm/no_confirm_url", action: svcNoConfirm, key: "nc.1", status: "unresolved", code: "ambiguous_no_confirm", attempts: 1, posts: 1, effects: 1},
		{name: "confirm/no_confirm_url_idempotent_by_key", action: svcIdempotent, key: "idem.1", status: "succeeded", attempts: 2, posts: 2, effects: 1,
			result: resultIs(200, map[string]string{"effect_id": "e-idem.1", "deduplicated": "true"})},
	}
	// Three successive commands of one entity, for the fencing token; the
	// second carries a traceparent.
	const fenceEntity = "tab-fence"
	fence := []command{
		{id: "cmd-fence-1", key: "ok.fence1", entity: fenceEntity, action: svcHTTP},
		{id: "cmd-fence-2", key: "ok.fence2", entity: fenceEntity, action: svcHTTP, traceparent: testTraceparent},
		{id: "cmd-fence-3", key: "ok.fence3", entity: fenceEntity, action: svcHTTP},
	}

	var ids []string
	dataOf := map[string]string{}
	start := time.Now()
	for _, c := range cases {
		data := fmt.Sprintf(`{"case":%q,"amount":25}`, c.name)
		dataOf[c.key] = data
		kcatProduce(t, kcat, brokers, command{id: c.id(), key: c.key, entity: c.entity(), action: c.action, data: data})
		ids = append(ids, c.id())
	}
	for _, f := range fence {
		f.data = fmt.Sprintf(`{"case":%q,"amount":1}`, f.key)
		dataOf[f.key] = f.data
		kcatProduce(t, kcat, brokers, f)
		ids = append(ids, f.id)
	}
	t.Logf("produced %d commands with kcat in %s", len(ids), time.Since(start).Round(time.Millisecond))
	outs := byCommand(waitOutcomes(t, fromKcat(kcat, brokers), ids, nil, 60*time.Second))
	t.Logf("all outcomes after %s", time.Since(start).Round(time.Millisecond))

	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := outs[c.id()]
			if len(got) != 1 {
				t.Fatalf("%d outcomes for command %s, want 1: %+v", len(got), c.id(), got)
			}
			o := got[0]
			posts, effects, confirms := svc.Counts(c.key)
			t.Logf("status %s attempts %d error %+v; service: %d POSTs, %d effects, %d confirms",
				o.Data.Status, o.Data.Attempts, o.Data.Error, len(posts), effects, confirms)
			if o.Type != "onceflight.execution."+c.status || o.Data.Status != c.status {
				t.Errorf("type %s status %s, want %s", o.Type, o.Data.Status, c.status)
			}
			if o.errCode() != c.code {
				t.Errorf("error %+v, want code %q", o.Data.Error, c.code)
			}
			if o.Replayed || o.IdempotencyKey != c.key || o.Subject != c.entity() || o.Data.Action != c.action {
				t.Errorf("outcome replayed=%v key %q subject %q action %q, want false %q %q %q",
					o.Replayed, o.IdempotencyKey, o.Subject, o.Data.Action, c.key, c.entity(), c.action)
			}
			if c.attempts < 0 {
				if o.Data.Attempts <= svcMaxAttempts || o.Data.Error == nil || !strings.Contains(o.Data.Error.Message, "waited") {
					t.Errorf("attempts %d error %+v, want more than max_attempts %d and the waits named", o.Data.Attempts, o.Data.Error, svcMaxAttempts)
				}
				c.attempts = o.Data.Attempts
				if c.posts < 0 {
					c.posts = c.attempts
				}
			}
			if o.Data.Attempts != c.attempts {
				t.Errorf("attempts %d, want %d", o.Data.Attempts, c.attempts)
			}
			if len(posts) != c.posts {
				t.Errorf("service received %d POSTs, want %d", len(posts), c.posts)
			}
			if effects != c.effects {
				t.Errorf("service applied %d effects, want %d", effects, c.effects)
			}
			if c.confirm && confirms == 0 {
				t.Errorf("Confirm was never asked")
			}
			if !c.confirm && confirms != 0 {
				t.Errorf("Confirm asked %d times, want never", confirms)
			}
			if c.status == "succeeded" {
				if c.result != nil {
					c.result(t, o.Data.Result)
				}
			} else if len(o.Data.Result) > 0 && string(o.Data.Result) != "null" {
				t.Errorf("result %s on a %s record", o.Data.Result, c.status)
			}
			for i, p := range posts {
				checkPostHeaders(t, p, i+1, c.key, c.entity(), c.action, "")
				if !jsonEqual(p.Body, []byte(dataOf[c.key])) {
					t.Errorf("POST %d body %s, want the command data %s", i+1, p.Body, dataOf[c.key])
				}
			}
			if t.Failed() {
				raw, _ := json.Marshal(o)
				t.Logf("outcome: %s", raw)
			}
		})
	}

	t.Run("fencing_token_and_traceparent", func(t *testing.T) {
		var prev int64
		for i, f := range fence {
			got := outs[f.id]
			if len(got) != 1 || got[0].Data.Status != "succeeded" {
				t.Fatalf("command %s: outcomes %+v, want one succeeded", f.id, got)
			}
			posts, effects, _ := svc.Counts(f.key)
			if len(posts) != 1 || effects != 1 {
				t.Fatalf("key %s: %d POSTs %d effects, want 1 and 1", f.key, len(posts), effects)
			}
			checkPostHeaders(t, posts[0], 1, f.key, f.entity, f.action, f.traceparent)
			tok, err := strconv.ParseInt(posts[0].Header.Get("Onceflight-Fencing-Token"), 10, 64)
			if err != nil {
				continue // reported by checkPostHeaders
			}
			if got[0].Data.FencingToken != 0 && got[0].Data.FencingToken != tok {
				t.Errorf("key %s: record fencing_token %d, header %d", f.key, got[0].Data.FencingToken, tok)
			}
			if i > 0 && tok <= prev {
				t.Errorf("fencing token of %s is %d, not greater than %d of the entity's previous command", f.key, tok, prev)
			}
			t.Logf("%s: fencing token %d", f.key, tok)
			prev = tok
		}
	})

	// Nothing arrived late: still exactly one outcome per command, and no
	// request after the outcomes (a blind retry would show here).
	time.Sleep(500 * time.Millisecond)
	final := byCommand(kcatOutcomes(t, kcat, brokers))
	for _, c := range cases {
		if n := len(final[c.id()]); n != 1 {
			t.Errorf("%s: %d outcomes at the end, want 1", c.name, n)
		}
		want := c.posts
		if want < 0 { // several: as many as the outcome's attempts
			if o := final[c.id()]; len(o) == 1 {
				want = o[0].Data.Attempts
			}
		}
		if posts, effects, _ := svc.Counts(c.key); len(posts) != want || effects != c.effects {
			t.Errorf("%s: at the end %d POSTs %d effects, want %d and %d", c.name, len(posts), effects, want, c.effects)
		}
	}
}

// checkPostHeaders checks the docs/connectors.md headers of the attempt-th POST.
func checkPostHeaders(t *testing.T, p apifake.Event, attempt int, key, entity, action, traceparent string) {
	t.Helper()
	h := p.Header
	want := map[string]string{
		"Content-Type":       "application/json",
		"Idempotency-Key":    key,
		"Onceflight-Entity":  entity,
		"Onceflight-Action":  action,
		"Onceflight-Attempt": strconv.Itoa(attempt),
		"Traceparent":        traceparent,
	}
	for name, v := range want {
		if got := h.Get(name); got != v {
			t.Errorf("POST %d: header %s = %q, want %q", attempt, name, got, v)
		}
	}
	dl, err := time.Parse(time.RFC3339, h.Get("Onceflight-Deadline"))
	if err != nil {
		t.Errorf("POST %d: Onceflight-Deadline %q is not RFC 3339: %v", attempt, h.Get("Onceflight-Deadline"), err)
	} else if left := dl.Sub(p.Arrived); left < -100*time.Millisecond || left > svcTimeout+100*time.Millisecond {
		t.Errorf("POST %d: Onceflight-Deadline %s is %s from its arrival, want within the %s attempt timeout", attempt, dl.Format(time.RFC3339Nano), left, svcTimeout)
	}
	tok := h.Get("Onceflight-Fencing-Token")
	if n, err := strconv.ParseInt(tok, 10, 64); err != nil || n <= 0 || strconv.FormatInt(n, 10) != tok {
		t.Errorf("POST %d: Onceflight-Fencing-Token %q is not a positive decimal integer", attempt, tok)
	}
}

func jsonEqual(a, b []byte) bool {
	var x, y any
	if json.Unmarshal(a, &x) != nil || json.Unmarshal(b, &y) != nil {
		return false
	}
	return reflect.DeepEqual(x, y)
}

// unresolvedGauge reads onceflight_unresolved_executions from /metrics.
func unresolvedGauge(t *testing.T, p *proc) float64 {
	t.Helper()
	v, found, err := p.metric("onceflight_unresolved_executions", "")
	if err != nil {
		t.Fatalf("GET /metrics: %v", err)
	}
	if !found {
		t.Fatalf("GET /metrics: no onceflight_unresolved_executions sample")
	}
	return v
}

// waitGauge polls the unresolved gauge until ok holds.
func waitGauge(t *testing.T, p *proc, what string, ok func(float64) bool) float64 {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for {
		v := unresolvedGauge(t, p)
		if ok(v) {
			return v
		}
		if time.Now().After(deadline) {
			t.Fatalf("onceflight_unresolved_executions = %v, want %s", v, what)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// unresolvedViaAPI returns the keys GET /v1/executions?status=unresolved lists.
func unresolvedViaAPI(t *testing.T, httpAddr string) []string {
	t.Helper()
	resp, err := http.Get("http://" + httpAddr + "/v1/executions?status=unresolved")
	if err != nil {
		t.Fatalf("GET /v1/executions: %v", err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /v1/executions?status=unresolved: %d %s", resp.StatusCode, body)
	}
	var v struct {
		Executions []struct {
			Key    string `json:"idempotency_key"`
			Status string `json:"status"`
		} `json:"executions"`
	}
	if err := json.Unmarshal(body, &v); err != nil {
		t.Fatalf("GET /v1/executions?status=unresolved: %v: %s", err, body)
	}
	var keys []string
	for _, e := range v.Executions {
		if e.Status != "unresolved" {
			t.Errorf("GET /v1/executions?status=unresolved lists %s with status %s", e.Key, e.Status)
		}
		keys = append(keys, e.Key)
	}
	return keys
}

// statusUnresolved returns the keys `onceflight status --unresolved` lists.
func statusUnresolved(t *testing.T, brokers string) []string {
	t.Helper()
	out, errOut, code := runCLI(t, "status", "--unresolved", "--brokers", brokers)
	if code != 0 {
		t.Fatalf("status --unresolved: exit %d: %s", code, errOut)
	}
	var keys []string
	for line := range strings.Lines(out) {
		if strings.TrimSpace(line) == "" {
			continue
		}
		var r struct {
			Key    string `json:"idempotency_key"`
			Status string `json:"status"`
		}
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			t.Fatalf("status --unresolved line %q: %v", line, err)
		}
		if r.Status != "unresolved" {
			t.Errorf("status --unresolved lists %s with status %s", r.Key, r.Status)
		}
		keys = append(keys, r.Key)
	}
	return keys
}

func contains(keys []string, k string) bool {
	for _, x := range keys {
		if x == k {
			return true
		}
	}
	return false
}

// TestUnresolvedTools covers what an operator has for unresolved records:
// status --unresolved, GET /v1/executions?status=unresolved, the gauge, the
// replay of an unresolved record without calling the service, and resolve.
func TestUnresolvedTools(t *testing.T) {
	kcat := kcatPath(t)
	svc := newService(t, numPartitions, nil)
	brokers := startBroker(t)
	// Operator decisions are signed (docs/guarantees.md#control-commands).
	keyFile := filepath.Join(t.TempDir(), "control.key")
	if out, errOut, code := runCLI(t, "keygen", "--out", keyFile); code != 0 {
		t.Fatalf("keygen: exit %d\n%s%s", code, out, errOut)
	}
	serve := startServe(t, serveOpts{brokers: brokers, config: httpConfig(t, svc, "ex-unres"), executorID: "ex-unres",
		extra: []string{"--control-key-file", keyFile}})
	httpAddr := serve.httpAddr

	if v := unresolvedGauge(t, serve); v != 0 {
		t.Errorf("onceflight_unresolved_executions = %v before any command, want 0", v)
	}
	unres := command{id: "cmd-unres-1", key: "cfail.u1", entity: "unres-ent-1", action: svcHTTP, data: `{"amount":40}`}
	okc := command{id: "cmd-ok-1", key: "ok.u2", entity: "unres-ent-2", action: svcHTTP, data: `{"amount":41}`}
	kcatProduce(t, kcat, brokers, unres)
	kcatProduce(t, kcat, brokers, okc)
	outs := byCommand(waitOutcomes(t, fromKcat(kcat, brokers), []string{unres.id, okc.id}, nil, 60*time.Second))
	if o := outs[unres.id][0]; o.Data.Status != "unresolved" || o.errCode() != "confirmation_timeout" {
		t.Fatalf("command %s: status %s error %+v, want unresolved confirmation_timeout", unres.id, o.Data.Status, o.Data.Error)
	}
	if o := outs[okc.id][0]; o.Data.Status != "succeeded" {
		t.Fatalf("command %s: status %s error %+v, want succeeded", okc.id, o.Data.Status, o.Data.Error)
	}
	posts0, effects0, confirms0 := svc.Counts(unres.key)
	if len(posts0) != 1 || effects0 != 1 {
		t.Fatalf("unresolved key: %d POSTs %d effects, want 1 and 1", len(posts0), effects0)
	}

	// The three views of unresolved records.
	if keys := statusUnresolved(t, brokers); !contains(keys, unres.key) || contains(keys, okc.key) {
		t.Errorf("status --unresolved lists %v, want %s and not %s", keys, unres.key, okc.key)
	}
	if keys := unresolvedViaAPI(t, httpAddr); !contains(keys, unres.key) || contains(keys, okc.key) {
		t.Errorf("GET /v1/executions?status=unresolved lists %v, want %s and not %s", keys, unres.key, okc.key)
	}
	waitGauge(t, serve, ">= 1", func(v float64) bool { return v >= 1 })

	// The same command again: the unresolved record is replayed, the
	// service is not called (neither Execute nor Confirm).
	again := unres
	again.id = "cmd-unres-1-again"
	kcatProduce(t, kcat, brokers, again)
	outs = byCommand(waitOutcomes(t, fromKcat(kcat, brokers), []string{again.id}, nil, 30*time.Second))
	if o := outs[again.id][0]; o.Data.Status != "unresolved" || !o.Replayed || o.errCode() != "confirmation_timeout" || o.Data.Command.ID != unres.id {
		t.Errorf("repeat %s: status %s replayed %v error %+v command %s, want the unresolved record of %s replayed",
			again.id, o.Data.Status, o.Replayed, o.Data.Error, o.Data.Command.ID, unres.id)
	}
	if posts, effects, confirms := svc.Counts(unres.key); len(posts) != 1 || effects != 1 || confirms != confirms0 {
		t.Errorf("replaying the unresolved record called the service: %d POSTs %d effects %d confirms, want 1 1 %d",
			len(posts), effects, confirms, confirms0)
	}

	// resolve refuses a key that is not unresolved.
	_, errOut, code := runCLI(t, "resolve", okc.key, "--as", "succeeded", "--reason", "checked", "--by", "e2e-operator", "--brokers", brokers, "--control-key-file", keyFile)
	if code == 0 || !strings.Contains(errOut, "succeeded") || !strings.Contains(errOut, okc.key) {
		t.Errorf("resolve of the succeeded key %s: exit %d, stderr %q; want non-zero and a message naming the key and its status", okc.key, code, errOut)
	}

	// resolve an unresolved key.
	const reason = "checked with the provider"
	before := time.Now().Add(-time.Second)
	out, errOut, code := runCLI(t, "resolve", unres.key, "--as", "succeeded", "--reason", reason, "--by", "e2e-operator",
		"--brokers", brokers, "--timeout", "30s", "--control-key-file", keyFile)
	if code != 0 {
		t.Fatalf("resolve %s: exit %d\nstdout: %s\nstderr: %s", unres.key, code, out, errOut)
	}
	t.Logf("resolve printed: %s", strings.TrimSpace(out))
	outs = byCommand(waitOutcomes(t, fromKcat(kcat, brokers), []string{unres.id}, func(o outcome) bool { return o.Data.Status == "succeeded" }, 30*time.Second))
	var resolved *outcome
	for _, o := range outs[unres.id] {
		if o.Data.Status == "succeeded" {
			resolved = &o
		}
	}
	if n := len(outs[unres.id]); n != 2 {
		t.Errorf("original command %s has %d outcomes, want 2 (unresolved, then the resolution)", unres.id, n)
	}
	r := resolved.Data.Resolution
	switch {
	case resolved.Type != "onceflight.execution.succeeded" || resolved.IdempotencyKey != unres.key || resolved.Subject != unres.entity:
		t.Errorf("resolution outcome type %s key %s subject %s", resolved.Type, resolved.IdempotencyKey, resolved.Subject)
	case r == nil:
		t.Errorf("resolution outcome has no data.resolution")
	case r.By != "e2e-operator" || r.Reason != reason || r.At.Before(before) || r.At.After(time.Now().Add(time.Second)):
		t.Errorf("data.resolution = %+v, want by e2e-operator, reason %q, at about now", *r, reason)
	}
	if resolved.errCode() != "" {
		t.Errorf("resolved as succeeded but error = %+v", resolved.Data.Error)
	}

	// The record shows the resolution, and nothing is unresolved anymore.
	out, errOut, code = runCLI(t, "status", unres.key, "--brokers", brokers)
	var rec struct {
		Status     string `json:"status"`
		Resolution *struct {
			By, Reason string
		} `json:"resolution"`
	}
	if code != 0 || json.Unmarshal([]byte(out), &rec) != nil {
		t.Errorf("status %s: exit %d: %s %s", unres.key, code, out, errOut)
	} else if rec.Status != "succeeded" || rec.Resolution == nil || rec.Resolution.Reason != reason {
		t.Errorf("status %s: %s, want succeeded with the resolution", unres.key, out)
	}
	waitGauge(t, serve, "0 after resolve", func(v float64) bool { return v == 0 })
	if keys := unresolvedViaAPI(t, httpAddr); len(keys) != 0 {
		t.Errorf("GET /v1/executions?status=unresolved after resolve: %v, want none", keys)
	}
	if keys := statusUnresolved(t, brokers); len(keys) != 0 {
		t.Errorf("status --unresolved after resolve: %v, want none", keys)
	}
	if posts, effects, confirms := svc.Counts(unres.key); len(posts) != 1 || effects != 1 || confirms != confirms0 {
		t.Errorf("resolve called the service: %d POSTs %d effects %d confirms, want 1 1 %d", len(posts), effects, confirms, confirms0)
	}
}
