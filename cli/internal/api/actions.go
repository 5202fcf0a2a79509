package api

import (
	"encoding/json"
	"net/http"
	"net/url"
	"regexp"
	"strconv"
	"strings"

	"github.com/onceflight/onceflight/cli/internal/inspect"
)

// WithActions serves GET /v1/actions and GET /v1/actions/{action}: the
// description of the configured actions (internal/inspect), computed once at
// start, since the actions file does not change while serve runs. They sit
// behind the same authentication as the records: they name internal
// endpoints and how each action can fail.
func WithActions(acts []inspect.Action) Option {
	acts = PublicActions(acts)
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

// urlIn finds the URLs an action's description quotes (its endpoints, and
// the texts of its answers and confirmation rule).
var urlIn = regexp.MustCompile(`[A-Za-z][A-Za-z0-9+.-]*://[^\s"'<>]+`)

// secretParam names query parameters that carry a credential
// (?api_key=, ?access_token=, ?sig=, ?password=).
var secretParam = regexp.MustCompile(`(?i)key|token|secret|pass|sig|auth|cred`)

// PublicActions returns acts with the credentials their URLs carry
// replaced by "[redacted]": a password in the URL's user info and the
// values of query parameters named like a credential. The actions file
// should give credentials as references (docs/configuration.md), but a
// URL such as https://psp.example/refunds?api_key=… is valid there, and a
// reader of the records must not learn how to call the external system
// itself. Only the descriptions are changed, not the configuration.
func PublicActions(acts []inspect.Action) []inspect.Action {
	out := make([]inspect.Action, 0, len(acts))
	for _, a := range acts {
		pub, err := publicAction(a)
		if err != nil {
			pub = inspect.Action{Name: a.Name, Connector: a.Connector, Warnings: []string{"the description could not be shown without its credentials"}}
		}
		out = append(out, pub)
	}
	return out
}

func publicAction(a inspect.Action) (inspect.Action, error) {
	b, err := json.Marshal(a)
	if err != nil {
		return inspect.Action{}, err
	}
	var v any
	if err := json.Unmarshal(b, &v); err != nil {
		return inspect.Action{}, err
	}
	var secrets []string
	walkStrings(v, func(s string) string {
		for _, raw := range urlIn.FindAllString(s, -1) {
			u, err := url.Parse(raw)
			if err != nil {
				continue
			}
			if pw, ok := u.User.Password(); ok && pw != "" {
				_, rawPW, _ := strings.Cut(u.User.String(), ":")
				secrets = append(secrets, rawPW, pw)
			}
			for _, kv := range strings.Split(u.RawQuery, "&") {
				if k, val, ok := strings.Cut(kv, "="); ok && val != "" && secretParam.MatchString(k) {
					secrets = append(secrets, val)
				}
			}
		}
		return s
	})
	if len(secrets) == 0 {
		return a, nil
	}
	v = walkStrings(v, func(s string) string { return scrub(s, secrets) })
	if b, err = json.Marshal(v); err != nil {
		return inspect.Action{}, err
	}
	var pub inspect.Action
	err = json.Unmarshal(b, &pub)
	return pub, err
}

// walkStrings replaces every string in a decoded JSON value by f's.
func walkStrings(v any, f func(string) string) any {
	switch t := v.(type) {
	case string:
		return f(t)
	case map[string]any:
		for k, e := range t {
			t[k] = walkStrings(e, f)
		}
	case []any:
		for i, e := range t {
			t[i] = walkStrings(e, f)
		}
	}
	return v
}
