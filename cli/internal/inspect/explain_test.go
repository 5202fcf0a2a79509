package inspect

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/onceflight/onceflight/client"
	"github.com/onceflight/onceflight/internal/wire"
	"github.com/onceflight/onceflight/onceflighttest"
	"github.com/onceflight/onceflight/schemas"
)

// TestExplain runs a real executor against an endpoint that answers every
// POST 504: one action confirms (the confirmation finds the effect), the
// other cannot (unresolved, then an operator resolves it). Explain must show
// each step of both.
func TestExplain(t *testing.T) {
	ext := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodGet {
			w.WriteHeader(http.StatusOK)
			fmt.Fprint(w, `{"label":"L1"}`)
			return
		}
		w.WriteHeader(http.StatusGatewayTimeout)
	}))
	defer ext.Close()
	oc, _ := onceflighttest.Start(t, fmt.Sprintf(`actions:
  ship.label:
    connector: http
    url: %[1]s/labels
    confirm_url: %[1]s/labels/{key}
    timeout: 500ms
  ship.pickup:
    connector: http
    url: %[1]s/pickups
    timeout: 500ms
`, ext.URL))
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	run := func(cmd client.Command) client.Outcome {
		t.Helper()
		p, err := oc.Submit(ctx, cmd)
		if err != nil {
			t.Fatal(err)
		}
		o, err := p.Wait(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return o
	}

	// The client's Outcome says how its status was established.
	if o := run(client.Command{Action: "ship.label", Entity: "order-1", Key: "label-1", Data: json.RawMessage(`{"n":1}`)}); o.Status != schemas.StatusSucceeded || o.EstablishedBy != schemas.EstablishedByConfirmation {
		t.Fatalf("label: %s %s, established by %q", o.Status, o.ErrorCode, o.EstablishedBy)
	}
	s, err := Explain(ctx, oc, "label-1", "")
	if err != nil {
		t.Fatal(err)
	}
	var text bytes.Buffer
	if err := WriteStoryText(&text, s); err != nil {
		t.Fatal(err)
	}
	t.Logf("\n%s", text.String())
	// The ambiguous answer is journaled before the confirmation is asked
	// (the second in_progress record: "confirmation pending").
	wantSteps(t, s, []string{"journal:in_progress", "journal:in_progress", "journal:succeeded", "outcomes:succeeded"})
	if r := s.Steps[1].Record; r.Error == nil || r.Error.Code != schemas.CodeConfirmationPending || !strings.Contains(wire.EvidenceText(r), "attempt 1 → ambiguous (after ") ||
		!strings.HasSuffix(wire.EvidenceText(r), "→ confirmation pending") {
		t.Errorf("pending step: %+v: %s", r.Error, wire.EvidenceText(r))
	}
	if sum := s.Steps[1].Summary; !strings.HasPrefix(sum, "attempt 1 answered ambiguously, confirmation pending, deadline ") ||
		!strings.Contains(sum, "; last observed: attempt 1 → ambiguous (after ") || strings.Contains(sum, "started") {
		t.Errorf("pending step's summary: %s", sum)
	}
	if !strings.Contains(text.String(), "evidence: attempt 1 → ambiguous (after ") ||
		!strings.Contains(text.String(), "HTTP 504) → confirm asked by executor → found → succeeded, established by confirmation\n") {
		t.Errorf("explain does not tell the confirmation:\n%s", text.String())
	}
	if s.Entity != "order-1" || s.Current == nil || string(s.Current.Result) == "" || !strings.Contains(string(s.Current.Result), "L1") {
		t.Errorf("story = %+v", s)
	}
	if r := s.Steps[0].Record; r.FencingToken == 0 || r.Deadline == nil {
		t.Errorf("in_progress step lacks fencing token or deadline: %+v", r)
	}

	if o := run(client.Command{Action: "ship.pickup", Entity: "order-2", Key: "pickup-1"}); o.Status != schemas.StatusUnresolved || o.EstablishedBy != schemas.EstablishedByAnswer {
		t.Fatalf("pickup: %s %s, established by %q", o.Status, o.ErrorCode, o.EstablishedBy)
	}
	data, _ := json.Marshal(map[string]string{"key": "pickup-1", "as": "succeeded", "reason": "carrier confirmed by phone", "by": "alice"})
	if o := run(client.Command{Action: "onceflight.resolve", Entity: "order-2", Key: "resolve/pickup-1/1", Data: data}); o.Status != schemas.StatusSucceeded {
		t.Fatalf("resolve: %s %s %s", o.Status, o.ErrorCode, o.ErrorMessage)
	}
	// A repeat of the key answers the recorded (resolved) result.
	if o := run(client.Command{Action: "ship.pickup", Entity: "order-2", Key: "pickup-1"}); !o.Replayed {
		t.Errorf("repeat not replayed: %+v", o)
	}
	s, err = Explain(ctx, oc, "pickup-1", "order-2")
	if err != nil {
		t.Fatal(err)
	}
	text.Reset()
	_ = WriteStoryText(&text, s)
	t.Logf("\n%s", text.String())
	wantSteps(t, s, []string{"journal:in_progress", "journal:unresolved", "outcomes:unresolved", "journal:succeeded", "outcomes:succeeded", "outcomes:succeeded"})
	if !strings.Contains(text.String(), `evidence: attempt 1 → ambiguous (after `) ||
		!strings.Contains(text.String(), `→ resolved by alice: "carrier confirmed by phone" → succeeded, established by operator`) ||
		s.Current.EstablishedBy != schemas.EstablishedByOperator || s.Steps[1].Record.EstablishedBy != schemas.EstablishedByAnswer {
		t.Errorf("explain does not tell the resolution:\n%s", text.String())
	}
	last := s.Steps[3]
	if !strings.Contains(last.Summary, `resolved as succeeded by alice: "carrier confirmed by phone"`) {
		t.Errorf("resolution step: %s", last.Summary)
	}
	if s.Steps[2].Outcome.ErrorCode != schemas.CodeAmbiguous || !s.Steps[5].Outcome.Replayed {
		t.Errorf("outcomes: %+v %+v", s.Steps[2].Outcome, s.Steps[5].Outcome)
	}
	var js bytes.Buffer
	if err := WriteStoryJSON(&js, s); err != nil || !json.Valid(js.Bytes()) {
		t.Errorf("json: %v", err)
	}

	if _, err := Explain(ctx, oc, "nope", ""); !errors.Is(err, ErrNoStory) {
		t.Errorf("unknown key: %v", err)
	}
}

func wantSteps(t *testing.T, s Story, want []string) {
	t.Helper()
	var got []string
	for _, st := range s.Steps {
		status := ""
		if st.Record != nil {
			status = string(st.Record.Status)
		} else {
			status = string(st.Outcome.Status)
		}
		got = append(got, st.Source+":"+status)
	}
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("steps = %v, want %v", got, want)
	}
}
