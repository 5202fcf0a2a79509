// Package api serves the executor's HTTP endpoints (docs/cli.md): health,
// readiness, Prometheus metrics and read-only views of execution records.
package api

import (
	"encoding/json"
	"net/http"
	"strconv"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/onceflight/onceflight/dedupe"
	"github.com/onceflight/onceflight/schemas"
)

// Executor is what the API needs from the running executor.
type Executor interface {
	Ready() bool
}

// Handler returns the HTTP handler, with the endpoints opts add.
func Handler(ex Executor, store *dedupe.Store, gather prometheus.Gatherer, opts ...Option) http.Handler {
	mux := http.NewServeMux()
	for _, o := range opts {
		o(mux)
	}
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
	// A key is scoped to its entity (docs/events.md#execution-records): the records of every entity
	// that used key (normally one), or with ?entity= that entity's only.
	mux.HandleFunc("GET /v1/executions/{key...}", func(w http.ResponseWriter, r *http.Request) {
		key := r.PathValue("key")
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
		switch {
		case err != nil:
			writeError(w, http.StatusInternalServerError, err.Error())
		case len(recs) == 0:
			writeError(w, http.StatusNotFound, "no record for key "+strconv.Quote(key)+" in the partitions this instance holds")
		default:
			writeJSON(w, http.StatusOK, map[string]any{"executions": recs})
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
		recs, err := store.ByStatus(st, limit)
		if err != nil {
			writeError(w, http.StatusInternalServerError, err.Error())
			return
		}
		if recs == nil {
			recs = []schemas.Record{}
		}
		writeJSON(w, http.StatusOK, map[string]any{"executions": recs})
	})
	mux.HandleFunc("GET /v1/entities/{entity...}", func(w http.ResponseWriter, r *http.Request) {
		ent := r.PathValue("entity")
		es, ok, err := store.Entity(ent)
		switch {
		case err != nil:
			writeError(w, http.StatusInternalServerError, err.Error())
		case !ok:
			writeError(w, http.StatusNotFound, "no entity "+strconv.Quote(ent)+" in the partitions this instance holds")
		default:
			writeJSON(w, http.StatusOK, map[string]any{"entity": ent, "state": es})
		}
	})
	return mux
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}

func writeError(w http.ResponseWriter, code int, msg string) {
	writeJSON(w, code, map[string]string{"error": msg})
}
