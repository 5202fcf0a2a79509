// Package demo is the built-in demo service of `onceflight demo`: a small
// refunds API that is deliberately not idempotent, so the demo shows what
// Onceflight adds — one effect per key even when the service is slow or
// answers 500 after doing the work.
package demo

import (
	"encoding/json"
	"io"
	"net/http"
	"sync"
	"time"
)

// Service counts effects per idempotency key and answers confirmations.
type Service struct {
	// SlowAfterApply delays the answer of keys whose body has "slow":true,
	// after the effect was applied: the executor's timeout fires, and only
	// confirmation can tell what happened.
	SlowAfterApply time.Duration

	// mu guards the effects and results, written by every request.
	mu      sync.Mutex
	effects map[string]int
	results map[string]json.RawMessage
}

// NewService returns an empty service.
func NewService() *Service {
	return &Service{SlowAfterApply: 2 * time.Second, effects: map[string]int{}, results: map[string]json.RawMessage{}}
}

// Effects returns how many times key took effect.
func (s *Service) Effects(key string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.effects[key]
}

// Handler serves POST /refunds, GET /refunds/{key} (confirmation) and POST
// /messages, which answers 500 after sending (no confirmation endpoint: the
// demo's unresolved case).
func (s *Service) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /refunds", func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(io.LimitReader(r.Body, 1<<20))
		var in struct {
			Amount int  `json:"amount"`
			Slow   bool `json:"slow"`
		}
		if err := json.Unmarshal(body, &in); err != nil || in.Amount <= 0 {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusUnprocessableEntity)
			_, _ = w.Write([]byte(`{"message":"amount must be a positive integer"}`))
			return
		}
		key := r.Header.Get("Idempotency-Key")
		res := s.apply(key, in.Amount)
		if in.Slow {
			time.Sleep(s.SlowAfterApply)
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		_, _ = w.Write(res)
	})
	mux.HandleFunc("GET /refunds/{key}", func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		res, ok := s.results[r.PathValue("key")]
		s.mu.Unlock()
		if !ok {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(res)
	})
	mux.HandleFunc("POST /messages", func(w http.ResponseWriter, r *http.Request) {
		s.apply(r.Header.Get("Idempotency-Key"), 0)
		http.Error(w, "upstream mail relay failed after queueing", http.StatusInternalServerError)
	})
	return mux
}

func (s *Service) apply(key string, amount int) json.RawMessage {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.effects[key]++
	res, _ := json.Marshal(map[string]any{"refund_id": "re_" + key, "amount": amount})
	s.results[key] = res
	return res
}
