package api

import (
	"net/http"
	"strconv"

	"github.com/onceflight/onceflight/cli/internal/inspect"
)

// WithActions serves GET /v1/actions and GET /v1/actions/{action}: the
// description of the configured actions (internal/inspect), computed once at
// start, since the actions file does not change while serve runs. They sit
// behind the same authentication as the records: they name internal
// endpoints and how each action can fail.
func WithActions(acts []inspect.Action) Option {
	return func(s *settings) {
		s.records.HandleFunc("GET /v1/actions", func(w http.ResponseWriter, _ *http.Request) {
			writeJSON(w, http.StatusOK, map[string]any{"actions": acts})
		})
		s.records.HandleFunc("GET /v1/actions/{action}", func(w http.ResponseWriter, r *http.Request) {
			name := r.PathValue("action")
			for _, a := range acts {
				if a.Name == name {
					writeJSON(w, http.StatusOK, a)
					return
				}
			}
			writeError(w, http.StatusNotFound, "no action "+strconv.Quote(name)+" is configured")
		})
	}
}
