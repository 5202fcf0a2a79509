package e2e

// Chaos tests on the built binary (docs/events.md#execution-records, docs/connectors.md): several `onceflight
// serve` processes in one group, a standalone `onceflight broker`, and a
// non-idempotent HTTP service that applies an effect per POST, flags
// overlapping executions per entity, counts effects per idempotency key and
// refuses writes carrying a stale fencing token. Faults: kill -9 mid-call,
// SIGSTOP past the session timeout, rolling restart. The long scenarios run
// only with ONCEFLIGHT_CHAOS=1 (`make chaos`); TestChaosQuick always runs.

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/onceflight/onceflight/partitioner"
	"github.com/onceflight/onceflight/schemas"
)

const (
	chaosAction     = "chaos.effect"
	chaosGroup      = "chaos"
	chaosPartitions = 12
	chaosSession    = 3 * time.Second
	chaosRate       = 25 * time.Millisecond // one command every 25ms: 40/s
)

func chaosGate(t *testing.T) {
	t.Helper()
	if os.Getenv("ONCEFLIGHT_CHAOS") != "1" {
		t.Skip("set ONCEFLIGHT_CHAOS=1 (make chaos)")
	}
}

// ---------------------------------------------------------------------------
// The external service.

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
	verdict          string // "applied", "refused", "bad-token"
	// staleEpoch: the token's epoch (token>>32) was below an epoch
	// another call had already used on the same partition.
	staleEpoch bool
}

func (e svcEvent) String() string {
	return fmt.Sprintf("#%d %s %s p%d key=%s token=%d(epoch %d) attempt=%s %s [%s..%s] deadline %s",
		e.seq, e.executor, e.entity, e.partition, e.key, e.token, e.token>>32, e.attempt, e.verdict,
		e.arrived.Format("15:04:05.000"), e.ended.Format("15:04:05.000"), e.deadline.Format("15:04:05.000"))
}

// chaosService is the non-idempotent external system. Every executor gets
// its own URL path (/ex/{id}/...) so the service knows who sent what; the
// effect itself is keyed only by Idempotency-Key.
type chaosService struct {
	srv *httptest.Server

	mu         sync.Mutex
	events     []*svcEvent
	inflight   map[string][]*svcEvent // entity -> calls in flight
	inflightBy map[string]int         // executor -> calls in flight
	effects    map[string]int         // key -> effects applied
	results    map[string][]byte      // key -> stored result
	maxTok     map[string]int64       // entity -> highest token seen
	maxTokKey  map[string]string      // entity -> the key that carried it
	maxEpoch   map[int32]int64        // partition -> highest token epoch seen
	overlaps   []string
	tokenErrs  []string // a new key without a higher token, or no token
	refused    []*svcEvent
	confirms   int
	confirmsBy map[string]int // "executor key" -> confirms
	effectSeq  int
}

func newChaosService(t *testing.T) *chaosService {
	s := &chaosService{
		inflight: map[string][]*svcEvent{}, inflightBy: map[string]int{}, effects: map[string]int{},
		results: map[string][]byte{}, maxTok: map[string]int64{}, maxTokKey: map[string]string{},
		maxEpoch: map[int32]int64{}, confirmsBy: map[string]int{},
	}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /ex/{ex}/effects", s.execute)
	mux.HandleFunc("GET /ex/{ex}/effects/{key}", s.confirm)
	s.srv = httptest.NewServer(mux)
	t.Cleanup(s.srv.Close)
	return s
}

func (s *chaosService) execute(w http.ResponseWriter, r *http.Request) {
	_, _ = io.Copy(io.Discard, r.Body)
	ev := &svcEvent{
		executor: r.PathValue("ex"),
		entity:   r.Header.Get("Onceflight-Entity"),
		key:      r.Header.Get("Idempotency-Key"),
		attempt:  r.Header.Get("Onceflight-Attempt"),
		arrived:  time.Now(),
	}
	ev.partition = partitioner.ForEntity(ev.entity, chaosPartitions)
	ev.deadline, _ = time.Parse(time.RFC3339Nano, r.Header.Get("Onceflight-Deadline"))
	tok, err := strconv.ParseInt(r.Header.Get("Onceflight-Fencing-Token"), 10, 64)
	s.mu.Lock()
	s.events = append(s.events, ev)
	ev.seq = len(s.events)
	if err == nil {
		if ep := tok >> 32; ep < s.maxEpoch[ev.partition] {
			ev.staleEpoch = true
		} else {
			s.maxEpoch[ev.partition] = ep
		}
	}
	switch {
	case err != nil || ev.key == "" || ev.entity == "":
		ev.verdict = "bad-token"
		ev.ended = time.Now()
		s.tokenErrs = append(s.tokenErrs, fmt.Sprintf("request without entity/key/token (%q): %s", r.Header.Get("Onceflight-Fencing-Token"), ev))
		s.mu.Unlock()
		http.Error(w, "missing headers", http.StatusBadRequest)
		return
	case tok < s.maxTok[ev.entity]:
		// How an external system uses fencing tokens: a write from
		// an owner older than one already seen is refused.
		ev.token = tok
		ev.verdict = "refused"
		ev.ended = time.Now()
		s.refused = append(s.refused, ev)
		s.mu.Unlock()
		http.Error(w, fmt.Sprintf("stale fencing token %d < %d", tok, s.maxTok[ev.entity]), http.StatusConflict)
		return
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
	s.mu.Unlock()

	// The effect takes tens of milliseconds and happens whether or not
	// the caller is still there (a killed caller does not undo it).
	time.Sleep(time.Duration(20+rand.IntN(21)) * time.Millisecond)

	s.mu.Lock()
	s.effects[ev.key]++
	s.effectSeq++
	res, _ := json.Marshal(map[string]any{"key": ev.key, "effect_id": s.effectSeq, "token": ev.token})
	if s.effects[ev.key] == 1 {
		s.results[ev.key] = res
	}
	ev.verdict = "applied"
	ev.ended = time.Now()
	list := s.inflight[ev.entity]
	for i, x := range list {
		if x == ev {
			s.inflight[ev.entity] = append(list[:i:i], list[i+1:]...)
			break
		}
	}
	s.inflightBy[ev.executor]--
	s.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusCreated)
	_, _ = w.Write(res)
}

func (s *chaosService) confirm(w http.ResponseWriter, r *http.Request) {
	key := r.PathValue("key")
	s.mu.Lock()
	s.confirms++
	s.confirmsBy[r.PathValue("ex")+" "+key]++
	res, ok := s.results[key]
	s.mu.Unlock()
	if !ok {
		http.Error(w, "no such effect", http.StatusNotFound)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(res)
}

func (s *chaosService) inflightOf(ex string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.inflightBy[ex]
}

// eventsFor returns the service's events for an entity, in arrival order.
func (s *chaosService) eventsFor(entity string) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []string
	for _, e := range s.events {
		if e.entity == entity {
			out = append(out, e.String())
		}
	}
	return out
}

// ---------------------------------------------------------------------------
// Executors.

type chaosExec struct {
	id, httpAddr, dataDir, config string
	p                             *proc
	procs                         []*proc
}

type chaosCluster struct {
	t       *testing.T
	brokers string
	svc     *chaosService
	execs   []*chaosExec
}

func newChaosCluster(t *testing.T, n int) *chaosCluster {
	t.Helper()
	c := &chaosCluster{t: t, brokers: startBroker(t), svc: newChaosService(t)}
	for i := range n {
		ex := &chaosExec{id: fmt.Sprintf("ex%d", i+1), httpAddr: freePort(t), dataDir: t.TempDir()}
		ex.config = filepath.Join(t.TempDir(), "onceflight.yaml")
		base := c.svc.srv.URL + "/ex/" + ex.id + "/effects"
		yaml := fmt.Sprintf("actions:\n  %s:\n    connector: http\n    url: %s\n    confirm_url: %s/{key}\n    timeout: 500ms\n    confirm_timeout: 3s\n",
			chaosAction, base, base)
		if err := os.WriteFile(ex.config, []byte(yaml), 0o644); err != nil {
			t.Fatal(err)
		}
		c.execs = append(c.execs, ex)
	}
	for _, ex := range c.execs {
		c.start(ex)
	}
	return c
}

// start starts ex and waits until it is ready.
func (c *chaosCluster) start(ex *chaosExec) {
	t := c.t
	t.Helper()
	p := startProc(t, "serve-"+ex.id, "serve", "--brokers", c.brokers, "--config", ex.config,
		"--group", chaosGroup, "--partitions", strconv.Itoa(chaosPartitions),
		"--session-timeout", chaosSession.String(), "--executor-id", ex.id,
		"--http", ex.httpAddr, "--data-dir", ex.dataDir, "--clock-drift", "200ms")
	// Runs before startProc's own cleanup (LIFO): a stopped process must
	// be continued before it can be asked to stop.
	t.Cleanup(func() { _ = p.cmd.Process.Signal(syscall.SIGCONT) })
	ex.p = p
	ex.procs = append(ex.procs, p)
	p.waitLog(httpAddrRe, 60*time.Second)
	waitReady(t, p, ex.httpAddr, 90*time.Second)
}

// killInFlight waits until ex has a call in flight at the service, then
// sends SIGKILL.
func (c *chaosCluster) killInFlight(ex *chaosExec) {
	c.t.Helper()
	n := c.waitInFlight(ex)
	ex.p.kill()
	c.t.Logf("SIGKILL %s with %d calls in flight at the service", ex.id, n)
}

func (c *chaosCluster) waitInFlight(ex *chaosExec) int {
	c.t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for {
		if n := c.svc.inflightOf(ex.id); n > 0 {
			return n
		}
		if time.Now().After(deadline) {
			c.t.Logf("%s had no call in flight within 15s; acting anyway", ex.id)
			return 0
		}
		time.Sleep(time.Millisecond)
	}
}

// term stops ex with SIGTERM and waits for a clean exit.
func (c *chaosCluster) term(ex *chaosExec) {
	t := c.t
	t.Helper()
	start := time.Now()
	if err := ex.p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-ex.p.done:
	case <-time.After(30 * time.Second):
		t.Fatalf("%s did not exit within 30s of SIGTERM:\n%s", ex.id, ex.p.tail(30))
	}
	t.Logf("%s exited %s after SIGTERM: %v", ex.id, time.Since(start).Round(time.Millisecond), ex.p.err)
	if ex.p.err != nil {
		var ee *exec.ExitError
		if errors.As(ex.p.err, &ee) {
			t.Errorf("%s exit code %d after SIGTERM, want 0:\n%s", ex.id, ee.ExitCode(), ex.p.tail(30))
		} else {
			t.Errorf("%s: %v", ex.id, ex.p.err)
		}
	}
}

// metric scrapes ex's /metrics and returns the sum of every series of name
// (with a label filter substring, "" for all).
func (c *chaosCluster) metric(ex *chaosExec, name, labels string) (float64, error) {
	hc := &http.Client{Timeout: 5 * time.Second}
	resp, err := hc.Get("http://" + ex.httpAddr + "/metrics")
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	var sum float64
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, name) || !strings.Contains(line, labels) {
			continue
		}
		rest := line[len(name):]
		if rest == "" || (rest[0] != '{' && rest[0] != ' ') {
			continue
		}
		f := strings.Fields(rest[strings.LastIndexByte(rest, '}')+1:])
		if len(f) == 0 {
			continue
		}
		v, err := strconv.ParseFloat(f[0], 64)
		if err == nil {
			sum += v
		}
	}
	return sum, sc.Err()
}

// logFenced returns the fenced/aborted lines of a process log from byte
// offset from on.
func logFenced(p *proc, from int) []string {
	l := p.log()
	if from > len(l) {
		from = len(l)
	}
	var out []string
	re := regexp.MustCompile(`(?i)fenced|aborted|ownership lost`)
	for line := range strings.SplitSeq(l[from:], "\n") {
		if re.MatchString(line) {
			out = append(out, line)
		}
	}
	return out
}

// ---------------------------------------------------------------------------
// Producer: a steady stream until told to stop.

type chaosProducer struct {
	t        *testing.T
	cl       *kgo.Client
	mu       sync.Mutex
	cmds     []streamCmd
	acked    atomic.Int64
	errs     []error
	stopc    chan struct{}
	done     chan struct{}
	started  time.Time
	stopOnce sync.Once
}

// startChaosProducer produces one command every chaosRate over entities
// entities; about one in ten repeats a recent key (same entity and data).
func startChaosProducer(t *testing.T, brokers, prefix string, entities int, seed uint64) *chaosProducer {
	t.Helper()
	pr := &chaosProducer{t: t, cl: newClient(t, brokers), stopc: make(chan struct{}), done: make(chan struct{}), started: time.Now()}
	rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	t.Cleanup(pr.stop)
	go func() {
		defer close(pr.done)
		tick := time.NewTicker(chaosRate)
		defer tick.Stop()
		var keys []streamCmd
		for i := 0; ; i++ {
			select {
			case <-pr.stopc:
				return
			case <-tick.C:
			}
			c := streamCmd{id: fmt.Sprintf("%s-cmd-%05d", prefix, i)}
			if i >= 20 && rng.IntN(10) == 0 {
				lo := max(0, len(keys)-150)
				prev := keys[lo+rng.IntN(len(keys)-lo)]
				c.key, c.entity, c.repeat = prev.key, prev.entity, true
			} else {
				c.key = fmt.Sprintf("%s-key-%05d", prefix, len(keys))
				c.entity = fmt.Sprintf("%s-ent-%02d", prefix, rng.IntN(entities))
				keys = append(keys, c)
			}
			rec := chaosRecord(t, c, i)
			pr.mu.Lock()
			pr.cmds = append(pr.cmds, c)
			pr.mu.Unlock()
			pr.cl.Produce(context.Background(), rec, func(_ *kgo.Record, err error) {
				if err != nil {
					pr.mu.Lock()
					pr.errs = append(pr.errs, fmt.Errorf("produce %s: %w", c.id, err))
					pr.mu.Unlock()
					return
				}
				pr.acked.Add(1)
			})
		}
	}()
	return pr
}

func (pr *chaosProducer) stop() { pr.stopOnce.Do(func() { close(pr.stopc) }) }

// finish stops the stream, flushes, and returns the commands produced.
func (pr *chaosProducer) finish() []streamCmd {
	t := pr.t
	t.Helper()
	pr.stop()
	<-pr.done
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := pr.cl.Flush(ctx); err != nil {
		t.Fatalf("producer flush: %v", err)
	}
	pr.mu.Lock()
	defer pr.mu.Unlock()
	if len(pr.errs) > 0 {
		t.Fatalf("%d produce errors, first: %v", len(pr.errs), pr.errs[0])
	}
	if n := pr.acked.Load(); n != int64(len(pr.cmds)) {
		t.Fatalf("%d of %d commands acknowledged", n, len(pr.cmds))
	}
	t.Logf("produced %d commands in %s", len(pr.cmds), time.Since(pr.started).Round(time.Millisecond))
	return pr.cmds
}

func (pr *chaosProducer) count() int {
	pr.mu.Lock()
	defer pr.mu.Unlock()
	return len(pr.cmds)
}

func chaosRecord(t *testing.T, c streamCmd, i int) *kgo.Record {
	t.Helper()
	mode := schemas.Binary
	if i%2 == 1 {
		mode = schemas.Structured
	}
	rec, err := schemas.EncodeCommand(schemas.Command{
		ID:             c.id,
		Source:         "e2e-chaos",
		Type:           chaosAction,
		Subject:        c.entity,
		IdempotencyKey: c.key,
		Data:           json.RawMessage(fmt.Sprintf(`{"key":%q,"amount":%d}`, c.key, len(c.key))),
	}, mode)
	if err != nil {
		t.Fatalf("encode %s: %v", c.id, err)
	}
	rec.Topic = topicCommands
	rec.Key = []byte(c.entity) // kgo's default partitioner: murmur2
	return rec
}

// ---------------------------------------------------------------------------
// Checks.

// chaosRecordData is the part of an outcome's record the checks need.
type chaosRecordData struct {
	Data struct {
		Status       string `json:"status"`
		Attempts     int    `json:"attempts"`
		Executor     string `json:"executor"`
		Epoch        int64  `json:"epoch"`
		FencingToken int64  `json:"fencing_token"`
		Command      struct {
			ID        string `json:"id"`
			Partition int32  `json:"partition"`
			Offset    int64  `json:"offset"`
		} `json:"command"`
	} `json:"data"`
}

type chaosReport struct {
	commands, outcomes, republished, unresolved int
	overlaps, refused, tokenErrs, requests      int
	confirms, afterDeadline, staleEpoch         int
}

// checkChaos checks the outcomes and the service after a scenario. With
// refusalsAllowed (a paused process may resume between the deadline check
// and the write), refused stale writes are reported, not failed; in every
// case no key may have two effects.
func checkChaos(t *testing.T, c *chaosCluster, cmds []streamCmd, refusalsAllowed bool) chaosReport {
	t.Helper()
	ids := make([]string, len(cmds))
	for i, cmd := range cmds {
		ids[i] = cmd.id
	}
	start := time.Now()
	waitOutcomes(t, c.brokers, ids, 120*time.Second)
	t.Logf("every command has an outcome %s after the stream ended", time.Since(start).Round(time.Millisecond))
	// Give a late republication a moment to show, then read again.
	time.Sleep(2 * time.Second)
	outs := readOutcomes(t, c.brokers)

	rep := chaosReport{commands: len(cmds), outcomes: len(outs)}
	byCmd := map[string][]outcome{}
	for _, o := range outs {
		byCmd[o.CausationID] = append(byCmd[o.CausationID], o)
	}
	describe := func(got []outcome) string {
		var d []string
		for _, o := range got {
			d = append(d, string(o.Raw))
		}
		return strings.Join(d, "\n    ")
	}
	keyStatus := map[string]map[string]bool{}
	keyEntity := map[string]string{}
	firstOf := map[string]string{}
	type tokRec struct {
		key    string
		part   int32
		offset int64
		token  int64
		exec   string
	}
	tokens := map[string]map[string]tokRec{} // entity -> key -> record
	for _, cmd := range cmds {
		got := byCmd[cmd.id]
		if len(got) == 0 {
			t.Errorf("command %s (key %s): no outcome", cmd.id, cmd.key)
			continue
		}
		distinct := map[string]bool{}
		for _, o := range got {
			distinct[o.ID] = true
			if o.IdempotencyKey != cmd.key || o.Subject != cmd.entity {
				t.Errorf("command %s: outcome %s has key %q subject %q, want %q %q", cmd.id, o.ID, o.IdempotencyKey, o.Subject, cmd.key, cmd.entity)
			}
		}
		if len(distinct) != 1 {
			t.Errorf("command %s (key %s): %d distinct outcome ids:\n    %s", cmd.id, cmd.key, len(distinct), describe(got))
		}
		rep.republished += len(got) - 1
		o := got[0]
		keyEntity[cmd.key] = cmd.entity
		if keyStatus[cmd.key] == nil {
			keyStatus[cmd.key] = map[string]bool{}
		}
		for _, o := range got {
			keyStatus[cmd.key][o.Data.Status] = true
		}
		switch o.Data.Status {
		case "succeeded", "unresolved":
		default:
			t.Errorf("command %s (key %s, entity %s): status %s, error %+v:\n    %s\n  service calls for the entity:\n    %s",
				cmd.id, cmd.key, cmd.entity, o.Data.Status, o.Data.Error, describe(got), strings.Join(c.svc.eventsFor(cmd.entity), "\n    "))
		}
		if _, seen := firstOf[cmd.key]; seen {
			if !o.Replayed {
				t.Errorf("command %s repeats key %s of %s but its outcome has replayed=false:\n    %s", cmd.id, cmd.key, firstOf[cmd.key], describe(got))
			}
		} else {
			firstOf[cmd.key] = cmd.id
			var rd chaosRecordData
			if err := json.Unmarshal(o.Raw, &rd); err != nil {
				t.Errorf("outcome %s: %v", o.ID, err)
			} else if rd.Data.FencingToken != 0 {
				if tokens[cmd.entity] == nil {
					tokens[cmd.entity] = map[string]tokRec{}
				}
				tokens[cmd.entity][cmd.key] = tokRec{cmd.key, rd.Data.Command.Partition, rd.Data.Command.Offset, rd.Data.FencingToken, rd.Data.Executor}
			}
		}
	}

	// Fencing tokens in the records: per entity, in command (partition)
	// order, strictly increasing.
	for entity, m := range tokens {
		var list []tokRec
		for _, r := range m {
			list = append(list, r)
		}
		sort.Slice(list, func(i, j int) bool { return list[i].offset < list[j].offset })
		for i := 1; i < len(list); i++ {
			a, b := list[i-1], list[i]
			if b.token <= a.token || a.part != b.part {
				t.Errorf("entity %s: fencing token went backwards in the records: key %s (p%d@%d, %s) token %d, then key %s (p%d@%d, %s) token %d",
					entity, a.key, a.part, a.offset, a.exec, a.token, b.key, b.part, b.offset, b.exec, b.token)
			}
		}
	}

	// Effects at the service.
	c.svc.mu.Lock()
	effects := map[string]int{}
	for k, v := range c.svc.effects {
		effects[k] = v
	}
	overlaps := append([]string(nil), c.svc.overlaps...)
	tokenErrs := append([]string(nil), c.svc.tokenErrs...)
	var refused []string
	for _, e := range c.svc.refused {
		refused = append(refused, e.String())
	}
	rep.requests, rep.confirms = len(c.svc.events), c.svc.confirms
	var confirmed []string
	for k, n := range c.svc.confirmsBy {
		confirmed = append(confirmed, fmt.Sprintf("%s x%d", k, n))
	}
	sort.Strings(confirmed)
	if len(confirmed) > 0 {
		t.Logf("confirms (executor key xN), %d keys: %s", len(confirmed), strings.Join(confirmed[:min(len(confirmed), 20)], ", "))
	}
	var afterDeadline, staleEpoch []*svcEvent
	var maxLate time.Duration
	for _, e := range c.svc.events {
		if e.verdict == "bad-token" {
			continue
		}
		if e.deadline.IsZero() {
			tokenErrs = append(tokenErrs, "request without Onceflight-Deadline: "+e.String())
			continue
		}
		if late := e.arrived.Sub(e.deadline); late > 0 {
			afterDeadline = append(afterDeadline, e)
			maxLate = max(maxLate, late)
		}
		if e.staleEpoch {
			staleEpoch = append(staleEpoch, e)
		}
	}
	c.svc.mu.Unlock()
	// The executor refuses to send past the attempt's deadline, and a new
	// owner waits deadline + --clock-drift (200ms): a write applied later
	// than that could overlap the new owner's.
	for _, e := range afterDeadline {
		switch late := e.arrived.Sub(e.deadline); {
		case e.verdict == "applied" && late > 200*time.Millisecond:
			t.Errorf("write applied %s after its deadline (beyond the 200ms clock drift): %s\n  service calls for the entity:\n    %s",
				late.Round(time.Millisecond), e, strings.Join(c.svc.eventsFor(e.entity), "\n    "))
		default:
			t.Logf("call arrived %s after its deadline: %s", late.Round(time.Millisecond), e)
		}
	}
	for _, e := range staleEpoch {
		t.Logf("call with an epoch below one already used on its partition (a previous owner's, before its deadline): %s", e)
	}
	rep.afterDeadline, rep.staleEpoch = len(afterDeadline), len(staleEpoch)
	for key, st := range keyStatus {
		n := effects[key]
		switch {
		case n > 1:
			t.Errorf("key %s (entity %s, status %v): %d effects at the service\n  service calls for the entity:\n    %s",
				key, keyEntity[key], st, n, strings.Join(c.svc.eventsFor(keyEntity[key]), "\n    "))
		case st["succeeded"] && n != 1:
			t.Errorf("key %s (entity %s): succeeded but %d effects at the service\n  service calls for the entity:\n    %s",
				key, keyEntity[key], n, strings.Join(c.svc.eventsFor(keyEntity[key]), "\n    "))
		}
		if st["unresolved"] {
			rep.unresolved++
			t.Logf("key %s (entity %s) is unresolved; effects at the service: %d", key, keyEntity[key], n)
		}
	}
	for key := range effects {
		if _, ok := keyStatus[key]; !ok {
			t.Errorf("the service has an effect for key %s that no command had", key)
		}
	}
	rep.overlaps, rep.tokenErrs, rep.refused = len(overlaps), len(tokenErrs), len(refused)
	for _, o := range overlaps {
		t.Errorf("overlap at the service: %s", o)
	}
	for _, e := range tokenErrs {
		t.Errorf("fencing token: %s", e)
	}
	for _, r := range refused {
		if refusalsAllowed {
			t.Logf("zombie write refused by the service (stale fencing token): %s", r)
		} else {
			t.Errorf("write with a stale fencing token reached the service (no paused process in this scenario): %s", r)
		}
	}
	t.Logf("REPORT commands=%d outcome_records=%d republished_same_id=%d unresolved_keys=%d overlaps=%d refused_stale_writes=%d token_violations=%d service_posts=%d service_confirms=%d keys=%d posts_after_deadline=%d (max %s late) posts_with_superseded_epoch=%d",
		rep.commands, rep.outcomes, rep.republished, rep.unresolved, rep.overlaps, rep.refused, rep.tokenErrs, rep.requests, rep.confirms, len(keyStatus),
		rep.afterDeadline, maxLate.Round(time.Millisecond), rep.staleEpoch)
	audit(t, c.brokers, chaosGroup)
	if t.Failed() {
		all := map[string]bool{}
		for _, cmd := range cmds {
			all[cmd.key] = true
		}
		dumpKeys(t, c.brokers, all)
	}
	return rep
}

// logMetrics logs the fencing and cycle metrics of every running executor.
func (c *chaosCluster) logMetrics() {
	for _, ex := range c.execs {
		if ex.p.exited() {
			continue
		}
		fenced, err1 := c.metric(ex, "onceflight_fenced_writes_total", "")
		aborted, err2 := c.metric(ex, "onceflight_transactions_total", `result="aborted"`)
		if err := errors.Join(err1, err2); err != nil {
			c.t.Logf("%s: metrics: %v", ex.id, err)
			continue
		}
		c.t.Logf("%s: onceflight_fenced_writes_total=%v onceflight_transactions_total{result=aborted}=%v", ex.id, fenced, aborted)
	}
}

// ---------------------------------------------------------------------------
// Scenarios.

// TestChaosQuick: two executors, one kill -9 mid-call and a restart, ~10 s
// of traffic. Always runs, so `make test` keeps multi-instance coverage.
func TestChaosQuick(t *testing.T) {
	c := newChaosCluster(t, 2)
	prod := startChaosProducer(t, c.brokers, "cq", 30, 1)
	time.Sleep(3 * time.Second)
	victim := c.execs[1]
	c.killInFlight(victim)
	time.Sleep(2 * time.Second)
	c.start(victim)
	time.Sleep(5 * time.Second)
	cmds := prod.finish()
	checkChaos(t, c, cmds, false)
	c.logMetrics()
}

// TestChaosKill9: three executors; kill -9 one while calls are in flight,
// restart it after a few seconds.
func TestChaosKill9(t *testing.T) {
	chaosGate(t)
	c := newChaosCluster(t, 3)
	prod := startChaosProducer(t, c.brokers, "ck", 60, uint64(time.Now().UnixNano()))
	time.Sleep(6 * time.Second)
	victim := c.execs[rand.IntN(len(c.execs))]
	c.killInFlight(victim)
	t.Logf("killed after %d commands produced", prod.count())
	time.Sleep(5 * time.Second)
	c.start(victim)
	t.Logf("%s restarted after %d commands produced", victim.id, prod.count())
	time.Sleep(12 * time.Second)
	cmds := prod.finish()
	checkChaos(t, c, cmds, false)
	c.logMetrics()
}

// TestChaosSigstop: three executors; SIGSTOP one mid-call for 8 s (past the
// 3 s session timeout), then SIGCONT. The zombie's late writes must be
// refused: its cycle fenced (log and onceflight_fenced_writes_total), any
// HTTP write refused by the service's token check, never a second effect.
func TestChaosSigstop(t *testing.T) {
	chaosGate(t)
	c := newChaosCluster(t, 3)
	prod := startChaosProducer(t, c.brokers, "cs", 60, uint64(time.Now().UnixNano()))
	time.Sleep(6 * time.Second)
	zombie := c.execs[rand.IntN(len(c.execs))]
	fencedBefore, err := c.metric(zombie, "onceflight_fenced_writes_total", "")
	if err != nil {
		t.Fatalf("metrics of %s: %v", zombie.id, err)
	}
	logFrom := len(zombie.p.log())
	n := c.waitInFlight(zombie)
	if err := zombie.p.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	t.Logf("SIGSTOP %s with %d calls in flight, after %d commands produced", zombie.id, n, prod.count())
	time.Sleep(8 * time.Second)
	resumed := time.Now()
	if err := zombie.p.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	t.Logf("SIGCONT %s after %d commands produced", zombie.id, prod.count())
	time.Sleep(14 * time.Second)
	cmds := prod.finish()
	checkChaos(t, c, cmds, true)

	fencedAfter, err := c.metric(zombie, "onceflight_fenced_writes_total", "")
	if err != nil {
		t.Errorf("metrics of %s after SIGCONT: %v", zombie.id, err)
	}
	lines := logFenced(zombie.p, logFrom)
	t.Logf("zombie %s: onceflight_fenced_writes_total %v before the pause, %v after", zombie.id, fencedBefore, fencedAfter)
	for i, l := range lines {
		if i == 10 {
			t.Logf("zombie log: ... %d more", len(lines)-10)
			break
		}
		t.Logf("zombie log: %s", l)
	}
	var late, lateRefused, lateStale int
	c.svc.mu.Lock()
	for _, e := range c.svc.events {
		if e.executor == zombie.id && e.arrived.After(resumed) && e.arrived.Before(resumed.Add(2*time.Second)) {
			late++
			if e.verdict == "refused" {
				lateRefused++
			}
			if e.staleEpoch {
				lateStale++
			}
			if late <= 5 || e.staleEpoch || e.verdict == "refused" {
				t.Logf("zombie call after SIGCONT (+%s): %s", e.arrived.Sub(resumed).Round(time.Millisecond), e)
			}
		}
	}
	c.svc.mu.Unlock()
	t.Logf("zombie %s: %d calls reached the service within 2s of SIGCONT: %d refused for a stale token, %d with a superseded epoch",
		zombie.id, late, lateRefused, lateStale)

	if fencedAfter <= fencedBefore && len(lines) == 0 {
		t.Errorf("zombie %s: no fenced write in its metrics (%v -> %v) and no fenced/aborted cycle in its log after the pause",
			zombie.id, fencedBefore, fencedAfter)
	}
	c.logMetrics()
}

// TestChaosRollingRestart: three executors restarted one after the other
// with SIGTERM, under traffic.
func TestChaosRollingRestart(t *testing.T) {
	chaosGate(t)
	c := newChaosCluster(t, 3)
	prod := startChaosProducer(t, c.brokers, "cr", 60, uint64(time.Now().UnixNano()))
	time.Sleep(4 * time.Second)
	for _, ex := range c.execs {
		c.term(ex)
		c.start(ex)
		t.Logf("%s restarted after %d commands produced", ex.id, prod.count())
		time.Sleep(3 * time.Second)
	}
	time.Sleep(4 * time.Second)
	cmds := prod.finish()
	checkChaos(t, c, cmds, false)
	c.logMetrics()
}
