// Package api serves the executor's HTTP endpoints (docs/http.md): health,
// readiness and Prometheus metrics, open to anyone who reaches the port, and
// read-only views of execution records, entities and actions under /v1/,
// which only an authenticated identity may read (internal/httpauth).
package api

import (
	"context"
	"encoding/json"
	"net/http"
	"slices"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/onceflight/onceflight/internal/dedupe"
	"github.com/onceflight/onceflight/internal/httpauth"
	"github.com/onceflight/onceflight/internal/storeof"
	"github.com/onceflight/onceflight/schemas"
)

// Executor is what the API needs from the running executor.
type Executor interface {
	Ready() bool
}

// Option configures Handler.
type Option func(*settings)

type settings struct {
	// records is the mux of the /v1/ endpoints, behind auth.
	records *http.ServeMux
	auth    *httpauth.Authenticator
	// redact returns the data fields an action's records hide; nil hides
	// nothing.
	redact func(action string) []string
}

// WithAuth requires an identity with httpauth.RoleReader on every /v1/
// endpoint. Without it (or with a disabled Authenticator) they are open:
// serve allows that only on a loopback address.
func WithAuth(a *httpauth.Authenticator) Option {
	return func(s *settings) { s.auth = a }
}

// WithRedaction hides, in every record answered, the data fields
// paths(record's action) names (config.Action.Redact), as "[redacted]".
func WithRedaction(paths func(action string) []string) Option {
	return func(s *settings) { s.redact = paths }
}

// Handler returns the HTTP handler: HealthHandler's endpoints, and the
// record endpoints under /v1/ with the ones opts add.
func Handler(ex Executor, store *dedupe.Store, gather prometheus.Gatherer, opts ...Option) http.Handler {
	s := &settings{records: http.NewServeMux()}
	for _, o := range opts {
		o(s)
	}
	s.recordRoutes(ex, store)
	mux := healthMux(ex, gather)
	// Every /v1/ path, also one no route matches, answers 401 without
	// credentials: an unknown path says nothing to a stranger.
	mux.Handle("/v1/", noStore(s.auth.Require(httpauth.RoleReader, s.records)))
	return secure(mux)
}

// HealthHandler serves only /healthz, /readyz and /metrics: what a
// probe or Prometheus needs, and nothing that holds customer data, so it
// may listen where they reach it (serve --metrics-http).
func HealthHandler(ex Executor, gather prometheus.Gatherer) http.Handler {
	return secure(healthMux(ex, gather))
}

func healthMux(ex Executor, gather prometheus.Gatherer) *http.ServeMux {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
		if !ex.Ready() {
			reason := "joining the group or restoring partitions"
			if nr, ok := ex.(interface{ NotReady() string }); ok && nr.NotReady() != "" {
				reason = nr.NotReady()
			}
			writeJSON(w, http.StatusServiceUnavailable, map[string]string{"status": "not ready: " + reason})
			return
		}
		writeJSON(w, http.StatusOK, map[string]string{"status": "ready"})
	})
	mux.Handle("GET /metrics", promhttp.HandlerFor(gather, promhttp.HandlerOpts{}))
	mux.HandleFunc("GET /openapi.json", serveOpenAPI)
	return mux
}

// settleWait bounds how long a read waits for the transaction under way to
// reach the state: past it (a broker that does not answer), the answer is
// what the state holds.
const settleWait = 2 * time.Second

func (s *settings) recordRoutes(ex Executor, store *dedupe.Store) {
	mux := s.records
	// Every read first waits for the transaction under way: its outcomes
	// may already be in a client's hands, and the record that client asks
	// for next must not be older than the outcome it read (storeof.Settled).
	settle := func(r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), settleWait)
		defer cancel()
		_ = storeof.Settled(ex, ctx)
	}
	// A key is scoped to its entity (docs/events.md#execution-records): the records of every entity
	// that used key (normally one), or with ?entity= that entity's only.
	mux.HandleFunc("GET /v1/executions/{key...}", func(w http.ResponseWriter, r *http.Request) {
		key := r.PathValue("key")
		settle(r)
		var recs []schemas.Record
		var err error
		if ent, ok := r.URL.Query()["entity"]; ok {
			var rec schemas.Record
			var found bool
			if rec, found, err = store.Lookup(ent[0], key); found {
				recs = []schemas.Record{rec}
			}
		} else {
			recs, err = store.LookupKey(key)
		}
		_, oneEntity := r.URL.Query()["entity"]
		recs = withIntents(recs, storeof.Intents(ex), func(in *schemas.Record) bool {
			return in.IdempotencyKey == key && (!oneEntity || in.Entity == r.URL.Query().Get("entity"))
		})
		switch {
		case err != nil:
			writeError(w, http.StatusInternalServerError, err.Error())
		case len(recs) == 0:
			writeError(w, http.StatusNotFound, "no record for key "+strconv.Quote(key)+" in the partitions this instance holds")
		default:
			writeJSON(w, http.StatusOK, map[string]any{"executions": s.redacted(recs)})
		}
	})
	mux.HandleFunc("GET /v1/executions", func(w http.ResponseWriter, r *http.Request) {
		st := schemas.Status(r.URL.Query().Get("status"))
		switch st {
		case schemas.StatusInProgress, schemas.StatusSucceeded, schemas.StatusFailed, schemas.StatusUnresolved, schemas.StatusRejected, schemas.StatusHeld:
		default:
			writeError(w, http.StatusBadRequest, "query parameter status is required: one of in_progress, succeeded, failed, unresolved, rejected, held")
			return
		}
		limit := 1000
		if l := r.URL.Query().Get("limit"); l != "" {
			n, err := strconv.Atoi(l)
			if err != nil || n < 1 || n > 100000 {
				writeError(w, http.StatusBadRequest, "limit must be an integer from 1 to 100000")
				return
			}
			limit = n
		}
		settle(r)
		// A key with an intent in flight is in_progress, whatever the
		// state still holds of it: each intent can take one stored
		// record out of this status, so that many more are read for a
		// full page.
		ins := storeof.Intents(ex)
		recs, err := store.ByStatus(st, limit+len(ins))
		if err != nil {
			writeError(w, http.StatusInternalServerError, err.Error())
			return
		}
		recs = withIntents(recs, ins, func(*schemas.Record) bool { return st == schemas.StatusInProgress })
		recs = slices.DeleteFunc(recs, func(r schemas.Record) bool { return r.Status != st })
		if len(recs) > limit {
			recs = recs[:limit]
		}
		if recs == nil {
			recs = []schemas.Record{}
		}
		writeJSON(w, http.StatusOK, map[string]any{"executions": s.redacted(recs)})
	})
	mux.HandleFunc("GET /v1/entities/{entity...}", func(w http.ResponseWriter, r *http.Request) {
		ent := r.PathValue("entity")
		settle(r)
		es, ok, err := store.Entity(ent)
		for _, in := range storeof.Intents(ex) {
			if in.Entity == ent {
				es.InFlightKey, es.LastKey, es.Partition, ok = in.IdempotencyKey, in.IdempotencyKey, in.Command.Partition, true
			}
		}
		switch {
		case err != nil:
			writeError(w, http.StatusInternalServerError, err.Error())
		case !ok:
			writeError(w, http.StatusNotFound, "no entity "+strconv.Quote(ent)+" in the partitions this instance holds")
		default:
			writeJSON(w, http.StatusOK, map[string]any{"entity": ent, "state": es})
		}
	})
}

// withIntents is recs with the intents of executions in flight
// (storeof.Intents) in place of their keys' records, which the state still
// holds as they were before the intent; intents of keys recs lacks are
// added when add says so.
func withIntents(recs, intents []schemas.Record, add func(*schemas.Record) bool) []schemas.Record {
	for i := range intents {
		in := &intents[i]
		j := slices.IndexFunc(recs, func(r schemas.Record) bool {
			return r.Entity == in.Entity && r.IdempotencyKey == in.IdempotencyKey
		})
		switch {
		case j >= 0:
			recs[j] = *in
		case add(in):
			recs = append(recs, *in)
		}
	}
	return recs
}

// redacted applies the redaction of each record's action, in place.
func (s *settings) redacted(recs []schemas.Record) []schemas.Record {
	if s.redact == nil {
		return recs
	}
	for i := range recs {
		recs[i] = RedactRecord(recs[i], s.redact(recs[i].Action))
	}
	return recs
}

// secure sets the headers every answer carries: nothing here is a page a
// browser should run, frame, sniff or send a referrer from.
func secure(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hd := w.Header()
		hd.Set("Content-Security-Policy", "default-src 'none'; frame-ancestors 'none'")
		hd.Set("X-Content-Type-Options", "nosniff")
		hd.Set("Referrer-Policy", "no-referrer")
		h.ServeHTTP(w, r)
	})
}

// noStore keeps record answers (customer data) out of browser and proxy
// caches.
func noStore(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "no-store")
		h.ServeHTTP(w, r)
	})
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}

func writeError(w http.ResponseWriter, code int, msg string) {
	writeJSON(w, code, map[string]string{"error": msg})
}
