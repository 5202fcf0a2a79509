package cli

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/onceflight/onceflight/cli/internal/api"
	"github.com/onceflight/onceflight/cli/internal/ingress"
	"github.com/onceflight/onceflight/client"
	"github.com/onceflight/onceflight/internal/config"
	"github.com/onceflight/onceflight/internal/httpauth"
	"github.com/onceflight/onceflight/schemas"
)

// ingressOptions are serve's --ingress flags.
type ingressOptions struct {
	addr      string
	tokenFile string
	maxWait   time.Duration
	rate      float64
	burst     int
}

// startIngress serves the HTTP ingress on o.addr beside the record API
// (records, built for the credentials this listener accepts, so the
// Location it answers with resolves on the same listener), publishing
// through oc. Without a token file it listens only on a loopback address:
// an open ingress would let anyone on the network trigger refunds.
//
// Commands carry customer data and trigger effects, so POST needs the
// ingress token: a producer's credential, which --http's readers do not
// hold. The record endpoints here accept the --http credentials (auth)
// and the ingress token too, as the reader of its own Locations; before,
// they answered anyone who reached the ingress. It returns the listener's
// address; the server stops when ctx ends.
func startIngress(o ingressOptions, oc *client.Client, cfg *config.Config, maxData int,
	auth *httpauth.Authenticator, records func(*httpauth.Authenticator) http.Handler, log *slog.Logger) (*http.Server, string, error) {
	var token []byte
	if o.tokenFile != "" {
		// The same rule as every other secret file: not readable by others.
		if err := httpauth.CheckPrivate(o.tokenFile); err != nil {
			return nil, "", usageErrorf("--ingress-token-file: %v", err)
		}
		b, err := os.ReadFile(o.tokenFile)
		if err != nil {
			return nil, "", fmt.Errorf("--ingress-token-file: %w", err)
		}
		if token = bytes.TrimSpace(b); len(token) == 0 {
			return nil, "", fmt.Errorf("--ingress-token-file %s is empty", o.tokenFile)
		}
		// The ingress token triggers effects and reads the records on this
		// listener, so it is held to the rules of --http-token-file's tokens,
		// and may not be one of them: a reader of records would then also
		// be a producer of refunds.
		if len(token) < httpauth.MinTokenBytes {
			return nil, "", usageErrorf("--ingress-token-file %s: the token is %d characters, want at least %d (openssl rand -hex 32)", o.tokenFile, len(token), httpauth.MinTokenBytes)
		}
		probe := &http.Request{Header: http.Header{"Authorization": {"Bearer " + string(token)}}}
		if id, err := auth.Authenticate(probe); err == nil {
			return nil, "", usageErrorf("--ingress-token-file %s holds the token of %s in --http-token-file: the one token would read the records and also submit commands; give the ingress a token of its own", o.tokenFile, id.Name)
		}
		auth = auth.With(httpauth.WithTokens(httpauth.Token{Name: "ingress", Role: httpauth.RoleReader, Value: string(token)}))
	} else if !loopback(o.addr) {
		return nil, "", usageErrorf("--ingress %s is not a loopback address: give --ingress-token-file, or listen on 127.0.0.1", o.addr)
	}
	ln, err := net.Listen("tcp", o.addr)
	if err != nil {
		return nil, "", fmt.Errorf("--ingress %s: %w", o.addr, err)
	}
	mux := http.NewServeMux()
	commands := func(h http.Handler) http.Handler { return logCommands(log, h) }
	if token == nil {
		// Without a token only loopback reaches it; a web page must not
		// reach it either, through DNS rebinding, to trigger effects.
		commands = func(h http.Handler) http.Handler { return logCommands(log, httpauth.LoopbackHostOnly(log, h)) }
	}
	mux.Handle("POST /v1/commands/{action}", commands(ingress.Handler(ingress.Config{
		Client: oc, Token: token, MaxDataBytes: maxData, MaxWait: o.maxWait, Rate: o.rate, Burst: o.burst,
		Known: func(a string) bool { _, ok := cfg.Action(a); return ok },
		Redact: func(rec schemas.Record) schemas.Record {
			if a, ok := cfg.Action(rec.Action); ok {
				return api.RedactRecord(rec, a.Redact)
			}
			return rec
		},
	})))
	mux.Handle("/", records(auth))
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("ingress server", "err", err)
		}
	}()
	return srv, ln.Addr().String(), nil
}

// loopback reports whether addr (host:port) listens only on a loopback
// interface; an empty host listens on every interface.
func loopback(addr string) bool { return httpauth.Loopback(addr) }

// logCommands logs every command the ingress refuses for its credentials
// at WARN, as the record API logs refused reads, and every other answer at
// DEBUG: who sent what from where, by action, entity and key (the data is
// in the body, which is never logged; the token never is).
func logCommands(log *slog.Logger, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		sw := &statusWriter{ResponseWriter: w, code: http.StatusOK}
		next.ServeHTTP(sw, r)
		refused := sw.code == http.StatusUnauthorized || sw.code == http.StatusForbidden
		if !refused && !log.Enabled(r.Context(), slog.LevelDebug) {
			return // the attributes below are built per command only when logged
		}
		ent := r.URL.Query().Get("entity")
		if ent == "" {
			ent = r.Header.Get("Onceflight-Entity")
		}
		// A stranger's input: bounded, and quoted by the handler.
		attrs := []any{"action", clip(r.PathValue("action")), "entity", clip(ent), "key", clip(r.Header.Get("Idempotency-Key")), "status", sw.code, "remote", r.RemoteAddr}
		if refused {
			log.Warn("ingress: command refused: not authenticated", attrs...)
			return
		}
		log.Debug("ingress: command", attrs...)
	})
}

// statusWriter remembers the status an answer was sent with.
type statusWriter struct {
	http.ResponseWriter
	code int
}

func (w *statusWriter) WriteHeader(code int) {
	w.code = code
	w.ResponseWriter.WriteHeader(code)
}

// Unwrap lets http.ResponseController reach the connection's writer.
func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// clip bounds a logged value from a request.
func clip(s string) string {
	const most = 200
	if len(s) <= most {
		return s
	}
	return strings.ToValidUTF8(s[:most], "") + "…"
}
