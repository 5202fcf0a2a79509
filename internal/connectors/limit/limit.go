// Package limit protects one external system from the executor: how many
// requests it gets at once (a ceiling, and below it a limit that adapts to
// the system's answers), how many per second, and a breaker that stops
// sending while the system is down (docs/connectors.md#protecting-the-external-system).
//
// A System is a effect.Gate: Perform takes a permit before each request
// and gives it back with the answer. Everything a System decides it decides
// from those answers' Signals (busy: 429; down: 503, connection refused)
// and latencies, so it works for any connector that sets them.
//
// Limits are per process. Several executors sharing one external system
// each apply their own; see the docs for how to divide a system's capacity.
package limit

import (
	"context"
	"log/slog"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/time/rate"

	"github.com/onceflight/onceflight/connectors"
	"github.com/onceflight/onceflight/internal/connectors/effect"
)

// Defaults of a Config's zero fields.
const (
	// DefaultBreakerAfter consecutive "down" answers open the breaker:
	// enough that one refused connection during a deploy does not.
	DefaultBreakerAfter = 5
	// DefaultProbeEvery is how often an open breaker lets one request
	// through to see whether the system is back.
	DefaultProbeEvery = time.Second
)

// The adaptive limit (AIMD): it grows by 1/limit per healthy answer while
// the system is used near it (ten times slower just below the level the
// system last refused, slower each time it refuses there again), and shrinks to decrease times itself on a busy or
// down answer, an answer that is not clear (a timeout, a 5xx), or when latency doubles, at most once per round of
// requests (see Done). 0.9 is Netflix concurrency-limits' AIMD default: a
// gentle cut keeps the system near its capacity instead of halving its
// traffic on every 429.
const (
	decrease = 0.9
	// latencyRise: a short-term average latency this many times the
	// long-term one counts as the system slowing down under load.
	latencyRise = 2.0
	// latencyMinRise ignores rises too small to be the system's (a
	// scheduler hiccup on a loaded host).
	latencyMinRise = 10 * time.Millisecond
	// latencySamples healthy answers are needed before latency is judged.
	latencySamples = 20
	// minPatience and maxPatience bound how much slower the limit grows
	// just below the level the system last refused (System.refusedAt).
	minPatience, maxPatience = 10.0, 80.0
	// logEvery bounds the log lines about one system's limit.
	logEvery = 5 * time.Second
)

// Config configures one external system.
type Config struct {
	// Name labels the system in logs and metrics.
	Name string
	// MaxConcurrent is the ceiling of requests in flight to the system;
	// the adaptive limit moves between 1 and it. Required (at least 1).
	MaxConcurrent int
	// Rate is requests per second; 0: no rate limit.
	Rate float64
	// Burst is how many requests may leave at once under Rate; default
	// Rate rounded up (at least 1).
	Burst int
	// BreakerAfter consecutive "down" answers (connection refused, 503)
	// open the breaker. Default DefaultBreakerAfter.
	BreakerAfter int
	// ProbeEvery is the interval at which an open breaker lets one request
	// through. Default DefaultProbeEvery.
	ProbeEvery time.Duration
	// KeepWaiting is how many commands may wait for the system while its
	// breaker is not closed before a call that may step aside
	// (AcquireOrStepAside) is told to (ErrStepAside); 0: none ever does.
	// A waiting command is held in its executor's memory and counts
	// against its --max-buffered: without a bound, the commands of a
	// system that is down filled it, and every other system's commands
	// behind them in the topic waited too (docs/connectors.md, "One slow
	// system does not starve the others"). At least one must wait, or
	// no request would be left to probe with.
	KeepWaiting int
	// Logger receives the lines about limit and breaker changes; default
	// slog.Default().
	Logger *slog.Logger
}

// State is a breaker's state.
type State int

// The breaker's states.
const (
	// Closed: requests go out (within the limits).
	Closed State = iota
	// Open: no request goes out; waiting until the next probe.
	Open
	// HalfOpen: one request (the probe) may go out; its answer closes or
	// reopens the breaker.
	HalfOpen
)

func (s State) String() string {
	switch s {
	case Open:
		return "open"
	case HalfOpen:
		return "half_open"
	}
	return "closed"
}

// Stats is a System's state, for metrics and `onceflight actions`.
type Stats struct {
	Name     string
	Ceiling  int     // MaxConcurrent
	Limit    int     // the current adaptive concurrency limit
	InFlight int     // requests sent and not answered
	Waiting  int     // commands waiting: for a Retry-After or backoff, a slot, the breaker or the rate
	Rate     float64 // requests per second, 0 for none
	Breaker  State
	Busy     uint64 // answers saying the system is busy (429)
	Down     uint64 // answers saying it is down (503, connection refused)
	Opened   uint64 // times the breaker opened
	Closed   uint64 // times it closed again
	// SteppedAside counts the calls told to step aside (ErrStepAside).
	SteppedAside uint64
}

// System is one external system's limits and breaker. It is safe for
// concurrent use.
type System struct {
	cfg Config
	rl  *rate.Limiter // nil: no rate
	log *slog.Logger

	mu       sync.Mutex // guards everything below
	limit    float64    // adaptive concurrency limit, 1..ceiling
	inFlight int
	queue    []*waiter // FIFO of commands waiting for a slot
	sleeping int       // commands waiting for their notBefore
	rating   int       // commands waiting for a rate token
	// lastCut is when the limit was last decreased: answers to requests
	// sent before it describe the old limit and do not cut again.
	lastCut time.Time
	// latency averages of healthy answers (seconds): short reacts within
	// a few answers, long is the baseline.
	short, long float64
	samples     int
	// breaker
	state State
	// down mirrors state != Closed, for Down without mu.
	down_    atomic.Bool
	failures int // consecutive down answers
	probing  bool
	timer    *time.Timer
	// counters (Stats)
	busy, down, opened, closed, steppedAside uint64
	// logging of limit changes: at most one line per logEvery; a change
	// within it is written when it ends (logTimer), so the last line
	// always tells the limit the system settled at.
	logEvery    time.Duration
	loggedAt    time.Time
	loggedLimit int
	lastLimit   int // the limit after the previous answer, to count changes
	changes     int // changes since the last line
	logTimer    *time.Timer
	reason      string // why the limit was last cut
	// refusedAt is the limit at which the system last refused: the limit
	// climbs back to it patience times slower than elsewhere, so that a
	// system at capacity is probed once in many rounds, not every round
	// (each probe costs a command a Retry-After). Each refusal at the
	// same level doubles the patience.
	refusedAt int
	patience  float64
}

// waiter is a command queued for a slot. It carries the permit it is
// given, so that a queued command costs two allocations (it and its
// channel) rather than three.
type waiter struct {
	ready   chan struct{}
	granted bool
	// mayStepAside: queued by AcquireOrStepAside; steppedAside: told to
	// step aside (ready closed without a slot).
	mayStepAside, steppedAside bool
	permit                     permit
}

// New builds a System; cfg.MaxConcurrent must be at least 1.
func New(cfg Config) *System {
	cfg.MaxConcurrent = max(cfg.MaxConcurrent, 1)
	if cfg.BreakerAfter <= 0 {
		cfg.BreakerAfter = DefaultBreakerAfter
	}
	if cfg.ProbeEvery <= 0 {
		cfg.ProbeEvery = DefaultProbeEvery
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	s := &System{cfg: cfg, log: cfg.Logger.With("system", cfg.Name), limit: float64(cfg.MaxConcurrent)}
	s.loggedLimit, s.lastLimit, s.logEvery = cfg.MaxConcurrent, cfg.MaxConcurrent, logEvery
	if cfg.Rate > 0 {
		burst := cfg.Burst
		if burst <= 0 {
			burst = max(1, int(math.Ceil(cfg.Rate)))
		}
		s.rl = rate.NewLimiter(rate.Limit(cfg.Rate), burst)
	}
	return s
}

// Name is the system's name.
func (s *System) Name() string { return s.cfg.Name }

// Config is the system's configuration with defaults applied.
func (s *System) Config() Config { return s.cfg }

// Burst is the rate limit's burst (0 without a rate).
func (s *System) Burst() int {
	if s.rl == nil {
		return 0
	}
	return s.rl.Burst()
}

// Stats returns the system's state now.
func (s *System) Stats() Stats {
	s.mu.Lock()
	defer s.mu.Unlock()
	return Stats{
		Name: s.cfg.Name, Ceiling: s.cfg.MaxConcurrent, Limit: s.current(), InFlight: s.inFlight,
		Waiting: len(s.queue) + s.sleeping + s.rating, Rate: s.cfg.Rate, Breaker: s.state,
		Busy: s.busy, Down: s.down, Opened: s.opened, Closed: s.closed, SteppedAside: s.steppedAside,
	}
}

// current is the limit as a count of requests.
func (s *System) current() int { return max(1, int(s.limit)) }

// untilSet is time.Until(t), or 0 for the zero t without reading the
// clock: a first attempt (every command's) has no notBefore, and clock
// reads were ~6 % of a new key's CPU (BENCHMARKS.md, round 16 (newkey)).
func untilSet(t time.Time) time.Duration {
	if t.IsZero() {
		return 0
	}
	return time.Until(t)
}

// Acquire implements effect.Gate: it waits until notBefore, then for a
// slot under the concurrency limit and a closed breaker (or the probe of a
// half-open one), then for the rate. Waiters get slots in arrival order.
func (s *System) Acquire(ctx context.Context, notBefore time.Time) (effect.Permit, error) {
	return s.acquire(ctx, notBefore, false)
}

// ErrStepAside is AcquireOrStepAside's answer to a call that should not
// wait: the system's breaker is open (or half-open) and KeepWaiting
// commands wait for it already.
var ErrStepAside = effect.ErrStepAside

// AcquireOrStepAside is Acquire for a call that can give its place up
// (nothing it sent may have taken effect): while the breaker is not
// closed and KeepWaiting commands wait already, it returns ErrStepAside at
// once, before or after its notBefore, and when the breaker opens, the
// last queued calls that may step aside are told to until KeepWaiting
// wait (their turn is no one's loss: they would only wait). The caller keeps nothing in memory for such a call and brings it
// back once Room says there is room (the executor reads it again from
// Kafka, as it reads a hot entity's skipped commands).
func (s *System) AcquireOrStepAside(ctx context.Context, notBefore time.Time) (effect.Permit, error) {
	return s.acquire(ctx, notBefore, true)
}

// Down reports whether the breaker is not closed: the system was found
// down and no answer since said otherwise. It reads no lock: a caller
// about to wait for the system asks it first.
func (s *System) Down() bool { return s.down_.Load() }

// Room is how many commands that stepped aside may come back now: up to
// KeepWaiting while the breaker is closed (the caller counts the ones it
// brought back that have not reached the system yet), else what is left
// of KeepWaiting by the commands waiting.
func (s *System) Room() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.state == Closed {
		return s.cfg.KeepWaiting
	}
	return max(0, s.cfg.KeepWaiting-s.waiting())
}

// waiting is how many calls wait for the system (mu held): those queued
// and those asleep until their notBefore (a command that was sent and
// waits out its backoff or Retry-After). Both are held in their
// executor's memory, so both count against KeepWaiting: counting the
// queue alone, a new call took the place of each waiter asleep, became
// the next probe and then waited too, and the waiters grew by one a
// probe over an outage (TestStepAsideCountsWaitersInBackoff).
func (s *System) waiting() int { return len(s.queue) + s.sleeping }

func (s *System) acquire(ctx context.Context, notBefore time.Time, mayStepAside bool) (effect.Permit, error) {
	if d := untilSet(notBefore); d > 0 {
		s.mu.Lock()
		if mayStepAside && s.crowded() {
			s.steppedAside++
			s.mu.Unlock()
			return nil, ErrStepAside
		}
		s.sleeping++
		s.mu.Unlock()
		err := effect.Sleep(ctx, d)
		s.mu.Lock()
		s.sleeping--
		s.mu.Unlock()
		if err != nil {
			return nil, err
		}
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	s.mu.Lock()
	if len(s.queue) == 0 && s.state == Closed && s.inFlight < s.current() {
		// A free slot and nobody ahead: what grant would do for a
		// waiter queued alone, without the waiter, its channel and the
		// select. While the system keeps up with the commands, every
		// permit is taken here, once per request.
		s.inFlight++
		if s.rl == nil {
			p := &permit{s: s, sent: time.Now(), inFlight: s.inFlight}
			s.mu.Unlock()
			return p, nil
		}
		s.mu.Unlock()
		return s.rated(ctx, &permit{s: s})
	}
	if mayStepAside && s.crowded() {
		s.steppedAside++
		s.mu.Unlock()
		return nil, ErrStepAside
	}
	w := &waiter{ready: make(chan struct{}), mayStepAside: mayStepAside, permit: permit{s: s}}
	s.queue = append(s.queue, w)
	s.grant()
	s.mu.Unlock()
	select {
	case <-w.ready:
		if w.steppedAside {
			return nil, ErrStepAside
		}
	case <-ctx.Done():
		s.mu.Lock()
		if w.steppedAside {
			s.mu.Unlock()
			return nil, ErrStepAside
		}
		if !w.granted {
			s.remove(w)
			s.mu.Unlock()
			return nil, ctx.Err()
		}
		s.mu.Unlock()
		// Granted while giving up: hand the slot on.
		w.permit.Done(connectors.Result{}, 0)
		return nil, ctx.Err()
	}
	return s.rated(ctx, &w.permit)
}

// rated waits for the rate (if any) with p's slot held, and stamps p as
// sent.
func (s *System) rated(ctx context.Context, p *permit) (effect.Permit, error) {
	if s.rl != nil {
		s.mu.Lock()
		s.rating++
		s.mu.Unlock()
		err := s.rl.Wait(ctx)
		s.mu.Lock()
		s.rating--
		s.mu.Unlock()
		if err != nil {
			p.Done(connectors.Result{}, 0)
			return nil, err
		}
	}
	s.mu.Lock()
	p.sent, p.inFlight = time.Now(), s.inFlight
	s.mu.Unlock()
	return p, nil
}

// grant hands slots to waiters in order while the breaker and the limit
// allow. Called with mu held after anything that may free a slot.
func (s *System) grant() {
	for len(s.queue) > 0 {
		w := s.queue[0]
		switch s.state {
		case Open:
			return
		case HalfOpen:
			if s.probing {
				return
			}
			s.probing, w.permit.probe = true, true
		case Closed:
			if s.inFlight >= s.current() {
				return
			}
		}
		s.queue[0] = nil
		s.queue = s.queue[1:]
		s.inFlight++
		w.granted = true
		close(w.ready)
	}
}

func (s *System) remove(w *waiter) {
	for i, q := range s.queue {
		if q == w {
			s.queue = append(s.queue[:i], s.queue[i+1:]...)
			return
		}
	}
}

// permit is one request's slot.
type permit struct {
	s        *System
	probe    bool
	sent     time.Time
	inFlight int // requests in flight when this one left, itself included
}

// Done implements effect.Permit: the answer moves the adaptive limit
// and the breaker. The zero Result (nothing sent, a Confirm, or an attempt
// our own stop cut short) moves nothing but the slot.
func (p *permit) Done(res connectors.Result, took time.Duration) {
	s := p.s
	s.mu.Lock()
	defer s.mu.Unlock()
	s.inFlight--
	now := time.Now()
	answered := res.Kind != 0
	switch {
	case !answered:
		if p.probe {
			// The probe was not sent: the next waiter probes.
			s.probing = false
		}
	case res.Signal == connectors.SignalDown:
		s.down++
		s.cut(p, now, "the system answered as down")
		s.failures++
		switch {
		case p.probe:
			s.probing = false
			s.open(now, "the probe found it still down", res.RetryAfter)
		case s.state == Closed && s.failures >= s.cfg.BreakerAfter:
			s.open(now, "consecutive answers said it is down", res.RetryAfter)
		}
	case p.probe && res.Kind == connectors.Ambiguous:
		// A probe that timed out (or got a 500, 502, 504) did not find
		// the system up: closing on it would send every waiting command
		// to a system that may still be down. The next probe asks.
		s.probing = false
		s.cut(p, now, "the system gave no clear answer")
		s.open(now, "the probe got no clear answer", 0)
	default:
		s.failures = 0
		if s.state != Closed {
			s.closeBreaker()
		}
		switch {
		case res.Signal == connectors.SignalBusy:
			s.busy++
			s.cut(p, now, "the system answered busy")
		case res.Kind == connectors.Ambiguous:
			// A timeout, a 500, 502 or 504: no clear answer is
			// overload as much as a 429 is (AIMD's "drop"). Only
			// healthy answers' latency is judged, so without this a
			// system whose every request times out would keep the
			// whole limit hanging on it, each request for its
			// whole timeout.
			s.cut(p, now, "the system gave no clear answer")
		case res.Kind == connectors.Succeeded:
			s.healthy(p, now, took)
		}
	}
	s.logLimit(now)
	s.grant()
}

// cut lowers the limit once per round: an answer to a request sent before
// the last cut describes the limit before it.
func (s *System) cut(p *permit, now time.Time, why string) {
	if !p.sent.After(s.lastCut) {
		return
	}
	if at := s.current(); at == s.refusedAt {
		s.patience = min(2*s.patience, maxPatience)
	} else {
		s.refusedAt, s.patience = at, minPatience
	}
	s.limit = max(1, s.limit*decrease)
	s.lastCut, s.reason = now, why
}

// healthy raises the limit by 1/limit on a successful answer while the
// system is used near its limit (a limit nobody reaches says nothing),
// and cuts it when latency has risen.
func (s *System) healthy(p *permit, now time.Time, took time.Duration) {
	sec := took.Seconds()
	if s.samples == 0 {
		s.short, s.long = sec, sec
	}
	s.samples++
	s.short += (sec - s.short) * 0.2
	s.long += (sec - s.long) * 0.02
	if s.samples >= latencySamples && s.short > latencyRise*s.long &&
		s.short-s.long > latencyMinRise.Seconds() {
		s.cut(p, now, "its latency rose")
		return
	}
	if 2*p.inFlight >= s.current() {
		step := 1 / s.limit
		if r := float64(s.refusedAt); s.limit < r && s.limit+1 >= r {
			step /= s.patience
		}
		s.limit = min(float64(s.cfg.MaxConcurrent), s.limit+step)
	}
}

// logLimit writes a line when the limit changed, at most one per logEvery
// and system: the limit may move with every few answers under load. A
// change too soon after the last line is written once logEvery has
// passed, unless the limit is back where that line left it.
func (s *System) logLimit(now time.Time) {
	cur := s.current()
	if cur != s.lastLimit {
		s.changes++
		s.lastLimit = cur
	}
	if cur == s.loggedLimit {
		return
	}
	if wait := s.logEvery - now.Sub(s.loggedAt); wait > 0 {
		if s.logTimer == nil {
			s.logTimer = time.AfterFunc(wait, s.logLater)
		}
		return
	}
	s.log.Info("external system concurrency limit changed", "from", s.loggedLimit, "to", cur,
		"ceiling", s.cfg.MaxConcurrent, "changes", s.changes, "last_cut", s.reason, "busy_answers", s.busy, "down_answers", s.down)
	s.loggedAt, s.loggedLimit, s.changes = now, cur, 0
}

// logLater writes the line logLimit held back.
func (s *System) logLater() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.logTimer = nil
	s.logLimit(time.Now())
}

// open stops sending until the next probe: after ProbeEvery, or after
// retryAfter when the answer that opened it asked for longer (a 503 with
// a Retry-After: the system asked every client to stay away that long,
// and a probe each ProbeEvery would be a request each second of a
// maintenance window, each costing its command the same wait).
func (s *System) open(now time.Time, why string, retryAfter time.Duration) {
	if s.state != Open {
		if s.state == Closed {
			s.opened++
			s.log.Warn("external system breaker open: requests wait until a probe gets an answer", "reason", why,
				"consecutive_down", s.failures, "probe_every", s.cfg.ProbeEvery, "retry_after", retryAfter)
		}
	}
	s.state = Open
	s.down_.Store(true)
	s.stepAside()
	if s.timer != nil {
		s.timer.Stop()
	}
	s.timer = time.AfterFunc(max(s.cfg.ProbeEvery, retryAfter), s.halfOpen)
}

// crowded reports whether a call that may step aside should (mu held):
// the breaker is not closed and KeepWaiting commands wait already (queued,
// or sleeping until a backoff or Retry-After ends).
func (s *System) crowded() bool {
	return s.state != Closed && s.cfg.KeepWaiting > 0 && s.waiting() >= s.cfg.KeepWaiting
}

// stepAside tells queued calls that may step aside to do so, the last
// queued first, until KeepWaiting commands wait (mu held): the breaker
// opened with more commands waiting than it keeps, each held in its
// executor's memory for nothing but a turn that comes when the system is
// back.
func (s *System) stepAside() {
	excess := s.waiting() - s.cfg.KeepWaiting
	if s.cfg.KeepWaiting <= 0 || excess <= 0 {
		return
	}
	for i := len(s.queue) - 1; i >= 0 && excess > 0; i-- {
		if w := s.queue[i]; w.mayStepAside {
			w.steppedAside = true
			s.steppedAside++
			close(w.ready)
			excess--
		}
	}
	kept := s.queue[:0]
	for _, w := range s.queue {
		if !w.steppedAside {
			kept = append(kept, w)
		}
	}
	clear(s.queue[len(kept):])
	s.queue = kept
}

// halfOpen lets the next request through as a probe.
func (s *System) halfOpen() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.state != Open {
		return
	}
	s.state = HalfOpen
	s.probing = false
	s.grant()
}

func (s *System) closeBreaker() {
	if s.timer != nil {
		s.timer.Stop()
		s.timer = nil
	}
	s.state, s.probing = Closed, false
	s.down_.Store(false)
	s.closed++
	s.log.Info("external system breaker closed: it answers again")
}
