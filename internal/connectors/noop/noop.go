// Package noop is the connector that succeeds at once without touching
// anything (docs/connectors.md), for tests, demos and benchmarks. With an effects file
// it also leaves a durable trace of every execution, so crash tests can count
// effects across process restarts and Confirm has something true to say.
package noop

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/onceflight/onceflight/connectors"
)

var result = json.RawMessage(`{"noop":true}`)

// Connector is the noop connector. It is safe for concurrent use.
type Connector struct {
	effects string
	mu      sync.Mutex // serialises appends from this process
}

// Option configures a Connector.
type Option func(*Connector)

// WithEffectsFile makes every execution append one JSON line
// {"key":...,"attempt":...} to path (O_APPEND, fsync'd before Execute
// returns), and makes Confirm answer from that file.
func WithEffectsFile(path string) Option {
	return func(c *Connector) { c.effects = path }
}

// New returns a noop connector.
func New(opts ...Option) *Connector {
	c := &Connector{}
	for _, o := range opts {
		o(c)
	}
	return c
}

type effect struct {
	Key string `json:"key"`
	// Entity scopes Key (docs/events.md#execution-records): Confirm must not take another
	// entity's effect with the same key for this one.
	Entity  string `json:"entity,omitempty"`
	Attempt int    `json:"attempt"`
}

// Effectless reports true without an effects file: then an execution
// changes nothing anywhere, and the executor records no intent before it.
func (c *Connector) Effectless() bool { return c.effects == "" }

// Execute succeeds with {"noop":true} unless the deadline has passed or ctx
// is done, in which case nothing happens and it answers Unavailable.
func (c *Connector) Execute(ctx context.Context, req connectors.Request) connectors.Result {
	if !req.Deadline.IsZero() && !time.Now().Before(req.Deadline) {
		return connectors.Result{Kind: connectors.Unavailable, Message: "deadline passed before the request was sent"}
	}
	if err := ctx.Err(); err != nil {
		return connectors.Result{Kind: connectors.Unavailable, Message: fmt.Sprintf("not sent: %v", err)}
	}
	if c.effects == "" {
		return connectors.Result{Kind: connectors.Succeeded, Result: result}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	line, err := json.Marshal(effect{Key: req.Key, Entity: req.Entity, Attempt: req.Attempt})
	if err != nil {
		return connectors.Result{Kind: connectors.Rejected, Message: fmt.Sprintf("noop: encode effect: %v", err)}
	}
	f, err := os.OpenFile(c.effects, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		return connectors.Result{Kind: connectors.Unavailable, Message: fmt.Sprintf("noop: open effects file: %v", err)}
	}
	// From here on part of the line may be on disk: failures are ambiguous,
	// and Confirm (which reads whole lines only) settles them.
	_, werr := f.Write(append(line, '\n'))
	serr := f.Sync()
	cerr := f.Close()
	if err := errors.Join(werr, serr, cerr); err != nil {
		return connectors.Result{Kind: connectors.Ambiguous, Message: fmt.Sprintf("noop: append effect: %v", err)}
	}
	return connectors.Result{Kind: connectors.Succeeded, Result: result}
}

// CanConfirm reports whether Confirm can answer: only with an effects file.
func (c *Connector) CanConfirm() bool { return c.effects != "" }

// Confirm answers Succeeded if the effects file records key, NotFound if it
// does not, and Ambiguous (unknown) without an effects file or on read errors.
func (c *Connector) Confirm(ctx context.Context, req connectors.Request) connectors.Result {
	if c.effects == "" {
		return connectors.Result{Kind: connectors.Ambiguous, Message: "noop without effects file cannot confirm"}
	}
	n, err := c.count(func(e effect) bool { return e.Key == req.Key && e.Entity == req.Entity })
	if err != nil {
		return connectors.Result{Kind: connectors.Ambiguous, Message: err.Error()}
	}
	if n > 0 {
		return connectors.Result{Kind: connectors.Succeeded, Result: result}
	}
	return connectors.Result{Kind: connectors.NotFound}
}

// Effects counts the executions of key recorded in the effects file. A
// missing file counts as none; a torn last line (crash mid-append) is
// ignored.
func (c *Connector) Effects(key string) (int, error) {
	return c.count(func(e effect) bool { return e.Key == key })
}

// count counts the effects file's lines that match.
func (c *Connector) count(match func(effect) bool) (int, error) {
	if c.effects == "" {
		return 0, errors.New("noop: no effects file configured")
	}
	f, err := os.Open(c.effects)
	if errors.Is(err, os.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("noop: read effects file: %w", err)
	}
	defer f.Close()
	n := 0
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64*1024), 1<<20)
	for sc.Scan() {
		var e effect
		if json.Unmarshal(sc.Bytes(), &e) == nil && match(e) {
			n++
		}
	}
	if err := sc.Err(); err != nil {
		return 0, fmt.Errorf("noop: scan effects file: %w", err)
	}
	return n, nil
}
