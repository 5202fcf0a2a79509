package api

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/onceflight/onceflight/internal/dedupe"
	"github.com/onceflight/onceflight/schemas"
)

type readiness bool

func (r *readiness) Ready() bool { return bool(*r) }

func TestHandler(t *testing.T) {
	store, err := dedupe.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	now := time.Now().UTC()
	b := store.NewBatch()
	b.PutRecord(schemas.Record{IdempotencyKey: "k/1", Entity: "order-1", Action: "a", Status: schemas.StatusUnresolved, FinishedAt: &now,
		Command: schemas.CommandRef{ID: "c1", Partition: 0}})
	b.PutRecord(schemas.Record{IdempotencyKey: "k/1", Entity: "order-2", Action: "a", Status: schemas.StatusFailed, FinishedAt: &now,
		Command: schemas.CommandRef{ID: "c3", Partition: 1}})
	b.PutRecord(schemas.Record{IdempotencyKey: "k2", Entity: "order-1", Action: "a", Status: schemas.StatusSucceeded, EntityVersion: 1, FinishedAt: &now,
		Command: schemas.CommandRef{ID: "c2", Partition: 0}})
	if err := b.Commit(); err != nil {
		t.Fatal(err)
	}
	b.Close()
	ready := readiness(false)
	srv := httptest.NewServer(Handler(&ready, store, prometheus.NewRegistry()))
	defer srv.Close()

	get := func(path string) (int, string) {
		t.Helper()
		resp, err := http.Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(body)
	}
	cases := []struct {
		path string
		code int
		has  string
	}{
		{"/healthz", 200, "ok"},
		{"/readyz", 503, "not ready"},
		{"/v1/executions/k/1", 200, `"status":"unresolved"`},
		{"/v1/executions/k/1", 200, `"entity":"order-2"`},
		{"/v1/executions/k/1?entity=order-2", 200, `"status":"failed"`},
		{"/v1/executions/k/1?entity=order-3", 404, "no record"},
		{"/v1/executions/nope", 404, "no record"},
		{"/v1/executions?status=unresolved", 200, `"k/1"`},
		{"/v1/executions?status=bogus", 400, "status"},
		{"/v1/executions", 400, "status is required"},
		{"/v1/executions?status=succeeded&limit=x", 400, "limit"},
		{"/v1/entities/order-1", 200, `"version":1`},
		{"/v1/entities/none", 404, "no entity"},
		{"/metrics", 200, ""},
	}
	for _, c := range cases {
		code, body := get(c.path)
		if code != c.code || !strings.Contains(body, c.has) {
			t.Errorf("GET %s = %d %q, want %d containing %q", c.path, code, body, c.code, c.has)
		}
	}
	ready = true
	if code, _ := get("/readyz"); code != 200 {
		t.Errorf("readyz after ready: %d", code)
	}
	var list struct {
		Executions []schemas.Record `json:"executions"`
	}
	_, body := get("/v1/executions?status=succeeded")
	if err := json.Unmarshal([]byte(body), &list); err != nil || len(list.Executions) != 1 || list.Executions[0].IdempotencyKey != "k2" {
		t.Errorf("succeeded list: %s (%v)", body, err)
	}
	resp, err := http.Post(srv.URL+"/v1/executions/k2", "application/json", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusMethodNotAllowed {
		t.Errorf("POST: %d, want 405", resp.StatusCode)
	}
}
