package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/onceflight/onceflight/internal/wire"
	"github.com/onceflight/onceflight/schemas"
)

// fakeExecutor answers every command on the default topics with an outcome
// whose status is the command data's "status" field (succeeded when absent);
// commands with "ignore" get none. It stands in for the real executor so the
// client commands can be tested end to end on the embedded broker.
func fakeExecutor(ctx context.Context, t *testing.T, addr string, seen chan<- schemas.Command) {
	cl, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.ConsumeTopics(schemas.DefaultCommandsTopic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.ProducerLinger(0))
	if err != nil {
		t.Error(err)
		return
	}
	defer cl.Close()
	for ctx.Err() == nil {
		cl.PollFetches(ctx).EachRecord(func(r *kgo.Record) {
			c, err := schemas.DecodeCommand(r, schemas.DefaultMaxDataBytes)
			if err != nil {
				t.Errorf("fake executor: %v", err)
				return
			}
			if seen != nil {
				seen <- c
			}
			var d struct {
				Status schemas.Status `json:"status"`
				Ignore bool           `json:"ignore"`
			}
			_ = json.Unmarshal(c.Data, &d)
			if d.Ignore {
				return
			}
			if d.Status == "" {
				d.Status = schemas.StatusSucceeded
			}
			o, err := wire.EncodeOutcome(schemas.Record{IdempotencyKey: c.IdempotencyKey, Entity: c.Subject, Action: c.Type, Status: d.Status}, c.ID, false)
			if err != nil {
				t.Error(err)
				return
			}
			o.Topic = schemas.DefaultOutcomesTopic
			if err := cl.ProduceSync(ctx, o).FirstErr(); err != nil && ctx.Err() == nil {
				t.Error(err)
			}
		})
	}
}

func startEnv(t *testing.T, seen chan<- schemas.Command) (context.Context, string, *kgo.Client) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	addr, cl := testBroker(ctx, t)
	d := schemas.DefaultTopics()
	if _, err := kadm.NewClient(cl).CreateTopics(ctx, 3, 1, nil, d.Commands, d.Outcomes, d.Journal); err != nil {
		t.Fatal(err)
	}
	exCtx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); fakeExecutor(exCtx, t, addr, seen) }()
	t.Cleanup(func() { stop(); <-done })
	return ctx, addr, cl
}

func runCLI(args ...string) (int, string, string) {
	var stdout, stderr bytes.Buffer
	code := run(args, &stdout, &stderr)
	return code, stdout.String(), stderr.String()
}

func TestSubmitWait(t *testing.T) {
	_, addr, _ := startEnv(t, nil)
	base := []string{"submit", "--brokers", addr, "--action", "payments.refund", "--entity", "order-1"}

	code, out, errOut := runCLI(append(base, "--wait", "--key", "r-1", "--data", `{"amount":1}`)...)
	if code != exitOK {
		t.Fatalf("succeeded: exit %d, stderr %q", code, errOut)
	}
	o, err := schemas.DecodeOutcome(&kgo.Record{Value: []byte(out), Headers: []kgo.RecordHeader{{Key: "content-type", Value: []byte("application/cloudevents+json")}}})
	if err != nil || o.IdempotencyKey != "r-1" || strings.Count(out, "\n") != 1 {
		t.Fatalf("printed %q (%v)", out, err)
	}

	code, _, errOut = runCLI(append(base, "--wait", "--mode", "structured", "--data", `{"status":"failed"}`)...)
	if code != exitNotSucceded || !strings.Contains(errOut, "failed") {
		t.Fatalf("failed: exit %d, stderr %q", code, errOut)
	}

	code, _, errOut = runCLI(append(base, "--wait", "--timeout", "500ms", "--data", `{"ignore":true}`)...)
	if code != exitNoOutcome || !strings.Contains(errOut, "no outcome") {
		t.Fatalf("timeout: exit %d, stderr %q", code, errOut)
	}

	code, out, errOut = runCLI(append(base, "--id", "fixed-id")...)
	var ack struct {
		ID        string `json:"id"`
		Partition int32  `json:"partition"`
		Offset    int64  `json:"offset"`
	}
	if code != exitOK || json.Unmarshal([]byte(out), &ack) != nil || ack.ID != "fixed-id" {
		t.Fatalf("no wait: exit %d, out %q, stderr %q", code, out, errOut)
	}

	// outcomes --from-beginning: the three answered commands, then exit.
	// The one waited for only 500ms may be answered after this starts:
	// ask again until it is (a loaded machine), not past a bound.
	for range 40 {
		code, out, errOut = runCLI("outcomes", "--brokers", addr, "--from-beginning")
		if code != exitOK || strings.Count(out, "\n") >= 3 {
			break
		}
		time.Sleep(250 * time.Millisecond)
	}
	if code != exitOK || strings.Count(out, "\n") != 3 {
		t.Fatalf("outcomes: exit %d, %d lines, stderr %q", code, strings.Count(out, "\n"), errOut)
	}
	code, out, _ = runCLI("outcomes", "--brokers", addr, "--from-beginning", "--key", "r-1")
	if code != exitOK || strings.Count(out, "\n") != 1 {
		t.Fatalf("outcomes --key: exit %d, out %q", code, out)
	}
}

func TestStatusAndResolve(t *testing.T) {
	seen := make(chan schemas.Command, 10)
	ctx, addr, cl := startEnv(t, seen)
	writeJournal := func(recs ...schemas.Record) {
		t.Helper()
		for _, r := range recs {
			v, _ := wire.MarshalRecord(r)
			rec := &kgo.Record{Topic: schemas.DefaultJournalTopic, Key: []byte(r.IdempotencyKey), Value: v,
				Headers: []kgo.RecordHeader{{Key: schemas.HeaderKind, Value: []byte(schemas.KindRecord)}}}
			if err := cl.ProduceSync(ctx, rec).FirstErr(); err != nil {
				t.Fatal(err)
			}
		}
	}
	writeJournal(
		schemas.Record{IdempotencyKey: "done", Entity: "order-1", Status: schemas.StatusInProgress},
		schemas.Record{IdempotencyKey: "done", Entity: "order-1", Status: schemas.StatusSucceeded},
		schemas.Record{IdempotencyKey: "stuck", Entity: "order-2", Status: schemas.StatusUnresolved},
	)

	code, out, _ := runCLI("status", "--brokers", addr, "done")
	if code != exitOK || !strings.Contains(out, `"status":"succeeded"`) {
		t.Fatalf("status done: exit %d, out %q", code, out)
	}
	code, _, errOut := runCLI("status", "--brokers", addr, "nope")
	if code != exitError || !strings.Contains(errOut, "no record for key") {
		t.Fatalf("status nope: exit %d, stderr %q", code, errOut)
	}
	code, out, _ = runCLI("status", "--brokers", addr, "--unresolved")
	if code != exitOK || strings.Count(out, "\n") != 1 || !strings.Contains(out, `"stuck"`) {
		t.Fatalf("status --unresolved: exit %d, out %q", code, out)
	}

	code, _, errOut = runCLI("resolve", "--brokers", addr, "stuck", "--as", "failed", "--reason", "x", "--by", "me")
	if code != exitError || !strings.Contains(errOut, "onceflight keygen") {
		t.Fatalf("resolve without a key file: exit %d, stderr %q", code, errOut)
	}
	keyFile := filepath.Join(t.TempDir(), "keys.json")
	if code, out, errOut := runCLI("keygen", "--out", keyFile, "--id", "ops-1"); code != exitOK || !strings.Contains(out, "ops-1") {
		t.Fatalf("keygen: exit %d, out %q, stderr %q", code, out, errOut)
	}
	if code, _, _ := runCLI("keygen", "--out", keyFile, "--id", "ops-1"); code != exitUsage {
		t.Fatalf("keygen with a taken id: exit %d", code)
	}
	if code, _, _ := runCLI("keygen", "--out", keyFile, "--id", "ops-2"); code != exitOK {
		t.Fatalf("keygen rotation: exit %d", code)
	}
	keys, err := schemas.LoadControlKeys(keyFile)
	if err != nil || len(keys.Keys) != 2 {
		t.Fatalf("key file after rotation: %v, %v", keys, err)
	}
	if fi, err := os.Stat(keyFile); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("key file mode: %v %v", fi.Mode(), err)
	}
	withKey := func(a ...string) []string { return append(a, "--brokers", addr, "--control-key-file", keyFile) }

	code, _, errOut = runCLI(withKey("resolve", "done", "--as", "failed", "--reason", "x", "--by", "me")...)
	if code != exitError || !strings.Contains(errOut, "only unresolved or held") {
		t.Fatalf("resolve of a final record: exit %d, stderr %q", code, errOut)
	}
	for _, v := range []string{"0s", "-1h", "169h"} {
		if code, _, errOut := runCLI(withKey("resolve", "stuck", "--as", "succeeded", "--reason", "x", "--by", "ann", "--valid-for", v)...); code != exitUsage || !strings.Contains(errOut, "--valid-for") {
			t.Fatalf("resolve --valid-for %s: exit %d, stderr %q", v, code, errOut)
		}
	}
	before := time.Now()
	code, out, errOut = runCLI(withKey("resolve", "stuck", "--as", "succeeded", "--reason", "seen in the PSP dashboard", "--by", "ann")...)
	if code != exitOK || out == "" {
		t.Fatalf("resolve: exit %d, out %q, stderr %q", code, out, errOut)
	}
	c := <-seen
	var d resolveData
	if err := json.Unmarshal(c.Data, &d); err != nil {
		t.Fatal(err)
	}
	// Signed with the decision: valid for --valid-for (24h) from now.
	if lo, hi := before.Add(schemas.DecisionValidity-time.Second), time.Now().Add(schemas.DecisionValidity); d.NotAfter.Before(lo) || d.NotAfter.After(hi) {
		t.Fatalf("resolve not_after %s, want within [%s, %s]", d.NotAfter, lo, hi)
	}
	d.NotAfter = time.Time{}
	if c.Type != schemas.TypeResolve || c.Subject != "order-2" || c.IdempotencyKey != "resolve/stuck/"+c.ID ||
		d != (resolveData{Key: "stuck", As: "succeeded", Reason: "seen in the PSP dashboard", By: "ann"}) {
		t.Fatalf("resolve command = %+v, data %+v", c, d)
	}
	if err := keys.VerifyControl(&c); err != nil || c.ControlKeyID != "ops-2" {
		t.Fatalf("resolve command signature (key %q): %v", c.ControlKeyID, err)
	}
	// keygen's public copy (Ed25519 by default) verifies it and cannot sign.
	pubFile := strings.TrimSuffix(keyFile, ".json") + ".pub.json"
	pub, err := schemas.LoadControlKeys(pubFile)
	if err != nil || !strings.HasPrefix(c.ControlSig, "ed25519:") {
		t.Fatalf("public copy: %v, signature %q", err, c.ControlSig)
	}
	if err := pub.VerifyControl(&c); err != nil {
		t.Fatalf("public copy refuses the decision: %v", err)
	}
	code, _, errOut = runCLI("resolve", "stuck", "--as", "failed", "--reason", "x", "--by", "me", "--brokers", addr, "--control-key-file", pubFile)
	if code != exitError || !strings.Contains(errOut, "public only") {
		t.Fatalf("resolve signed with the public copy: exit %d, stderr %q", code, errOut)
	}

	// The same key for two entities: status lists both, --entity narrows,
	// and release needs --entity.
	writeJournal(schemas.Record{IdempotencyKey: "done", Entity: "order-3", Status: schemas.StatusHeld})
	code, out, _ = runCLI("status", "--brokers", addr, "done")
	if code != exitOK || strings.Count(out, "\n") != 2 {
		t.Fatalf("status of a key of two entities: exit %d, out %q", code, out)
	}
	code, out, _ = runCLI("status", "--brokers", addr, "done", "--entity", "order-3")
	if code != exitOK || strings.Count(out, "\n") != 1 || !strings.Contains(out, `"held"`) {
		t.Fatalf("status --entity: exit %d, out %q", code, out)
	}
	code, out, _ = runCLI("status", "--brokers", addr, "--held")
	if code != exitOK || strings.Count(out, "\n") != 1 || !strings.Contains(out, `"order-3"`) {
		t.Fatalf("status --held: exit %d, out %q", code, out)
	}
	if code, _, _ := runCLI(withKey("release", "done", "--reason", "redo")...); code != exitUsage {
		t.Fatalf("release without --entity: exit %d", code)
	}
	code, _, errOut = runCLI(withKey("approve", "done", "--reason", "ok", "--by", "ann", "--valid-for", "10m")...)
	if code != exitOK {
		t.Fatalf("approve of the only held record of the key: exit %d, stderr %q", code, errOut)
	}
	if c := <-seen; c.Type != schemas.TypeApprove || c.Subject != "order-3" || keys.VerifyControl(&c) != nil {
		t.Fatalf("approve command = %+v", c)
	} else if err := json.Unmarshal(c.Data, &d); err != nil || d.NotAfter.After(time.Now().Add(10*time.Minute)) || d.NotAfter.Before(time.Now().Add(9*time.Minute)) {
		t.Fatalf("approve --valid-for 10m: not_after %s (%v)", d.NotAfter, err)
	}
	code, _, errOut = runCLI(withKey("release", "done", "--entity", "order-1", "--reason", "refund redone", "--by", "ann")...)
	if code != exitOK {
		t.Fatalf("release: exit %d, stderr %q", code, errOut)
	}
	if c := <-seen; c.Type != schemas.TypeRelease || c.Subject != "order-1" || keys.VerifyControl(&c) != nil {
		t.Fatalf("release command = %+v", c)
	}
}
