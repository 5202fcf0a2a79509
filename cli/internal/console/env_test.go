package console

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/onceflight/onceflight/cli/internal/demo"
	"github.com/onceflight/onceflight/cli/internal/inspect"
	"github.com/onceflight/onceflight/client"
	"github.com/onceflight/onceflight/consumer"
	"github.com/onceflight/onceflight/internal/httpauth"
	"github.com/onceflight/onceflight/onceflighttest"
	"github.com/onceflight/onceflight/schemas"
)

// env is a real executor on kfake, a projection of its topics and
// consoles over it: one for operators and readers (tokens), one
// read-only, one whose forms expire at once.
type env struct {
	h        *onceflighttest.Harness
	p        *Projection
	keys     *schemas.ControlKeys
	url      string // the console with decisions
	roURL    string // --read-only
	expURL   string // forms expire at once
	operator string // token of "alice", operator
	reader   string // token of "bob", reader
	// serve starts one more console over the projection with c (its
	// projection, authentication, actions and redaction filled in) and
	// returns its URL.
	serve func(c Config) string
}

const (
	operatorToken = "op-token-0123456789abcdef"
	readerToken   = "rd-token-0123456789abcdef"
)

// newEnv starts the executor with actions noop.ping, dup.refund (unique
// by order_id, held on duplicates, iban redacted) and messages.send (the
// demo service's /messages: 500 after sending, so unresolved).
func newEnv(t *testing.T) *env {
	t.Helper()
	svc := httptest.NewServer(demo.NewService().Handler())
	t.Cleanup(svc.Close)
	h := onceflighttest.New(t)
	h.UseConfig(fmt.Sprintf(`actions:
  noop.ping:
    connector: noop
    effects_file: %s
  dup.refund:
    connector: noop
    effects_file: %s
    unique_by: [order_id]
    on_duplicate: hold
    redact: [iban]
  messages.send:
    connector: http
    url: %s/messages
    timeout: 500ms
`, h.Effects, h.Effects, svc.URL))
	key, err := schemas.NewControlKey("test")
	if err != nil {
		t.Fatal(err)
	}
	keys := &schemas.ControlKeys{Keys: []schemas.ControlKey{key}}
	h.Tune = func(c *consumer.Config) {
		c.ControlKeys = keys
		c.Logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError}))
	}
	h.Start(filepath.Join(t.TempDir(), "state"))
	if err := onceflighttest.WaitTopics(context.Background(), h.Brokers, schemas.DefaultTopics()); err != nil {
		t.Fatal(err)
	}
	e := &env{h: h, keys: keys, p: startProjection(t, t.TempDir(), h.Brokers)}
	oc, err := client.New(client.WithBrokers(h.Brokers...), client.WithControlKeys(keys))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(oc.Close)
	auth, err := httpauth.New(httpauth.WithTokens(
		httpauth.Token{Name: "alice", Role: httpauth.RoleOperator, Value: operatorToken},
		httpauth.Token{Name: "bob", Role: httpauth.RoleReader, Value: readerToken}))
	if err != nil {
		t.Fatal(err)
	}
	acts, err := inspect.Describe(h.Config, 0)
	if err != nil {
		t.Fatal(err)
	}
	redact := func(a string) []string {
		if ac, ok := h.Config.Action(a); ok {
			return ac.Redact
		}
		return nil
	}
	serve := func(c Config) string {
		c.Projection, c.Auth, c.Actions, c.Redact = e.p, auth, acts, redact
		c.Logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError}))
		s, err := New(c)
		if err != nil {
			t.Fatal(err)
		}
		hs := httptest.NewServer(s)
		t.Cleanup(hs.Close)
		return hs.URL
	}
	e.url = serve(Config{Decider: ClientDecider{C: oc}})
	e.roURL = serve(Config{Decider: ClientDecider{C: oc}, ReadOnly: true})
	e.expURL = serve(Config{Decider: ClientDecider{C: oc}, CSRFTTL: time.Nanosecond})
	e.operator, e.reader, e.serve = operatorToken, readerToken, serve
	return e
}

// startProjection runs a projection of brokers with its index in dir
// until the end of the test.
func startProjection(t *testing.T, dir string, brokers []string) *Projection {
	t.Helper()
	p, _ := runProjection(t, dir, brokers, WithLogger(slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError}))))
	return p
}

// waitExec waits until the projection shows the execution of key for
// entity in status want.
func waitExec(t *testing.T, p *Projection, entity, key string, want schemas.Status) View {
	t.Helper()
	var v View
	onceflighttest.WaitFor(t, 30*time.Second, fmt.Sprintf("%s/%s %s in the console", entity, key, want), func() bool {
		var err error
		v, err = p.Get(entity, key)
		return err == nil && v.Exec.Status == want
	})
	return v
}

// get fetches url with the operator's bearer token (or none if tok is
// empty) and returns the status and body.
func get(t *testing.T, url, tok string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, url, nil)
	if tok != "" {
		req.Header.Set("Authorization", "Bearer "+tok)
	}
	req.Header.Set("Accept", "text/html")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(b)
}
