package cli

import (
	"bytes"
	"context"
	"encoding/base64"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/onceflight/onceflight/internal/kafkatest"
	"github.com/onceflight/onceflight/internal/wire"
	"github.com/onceflight/onceflight/schemas"
)

// The auditor's three commands from the README, against a real serve that
// signs checkpoints: save the checkpoints, verify the journal against them,
// prove a record and check the proof in a directory holding nothing but
// the proof and the public keys. Then each bad input's error and exit code.
func TestAuditWithAPublicKey(t *testing.T) {
	addr := kafkatest.Start(t)
	dir := t.TempDir()
	key, trusted := filepath.Join(dir, "executor.key"), filepath.Join(dir, "trusted-keys")
	code, out, errOut := runCLI("keygen", "--kind", "executor", "--id", "executor-a", "--out", key, "--trusted-keys", trusted)
	if code != exitOK || !strings.Contains(out, "executor-a+") {
		t.Fatalf("keygen: exit %d %s %s", code, out, errOut)
	}
	if st, _ := os.Stat(key); st.Mode().Perm() != 0o600 {
		t.Fatalf("key file mode %v", st.Mode())
	}
	if code, _, errOut := runCLI("keygen", "--kind", "executor", "--out", key); code != exitUsage || !strings.Contains(errOut, "never overwritten") {
		t.Fatalf("keygen over a key: exit %d %s", code, errOut)
	}
	serveSecured(t, addr, "actions:\n  noop.ping:\n    connector: noop\n",
		[]string{"--checkpoint-key-file", key, "--trusted-keys", trusted, "--checkpoint-interval", "100ms"})

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	for _, k := range []string{"r-1", "r-2", "r-3"} {
		if code, _, errOut := execCLI(ctx, "submit", "--brokers", addr, "--action", "noop.ping", "--entity", "order-1", "--key", k, "--wait"); code != exitOK {
			t.Fatalf("submit: exit %d %s", code, errOut)
		}
	}

	// prove waits for a checkpoint that covers the record (exit 5 until then).
	proofs := filepath.Join(dir, "proofs")
	deadline := time.Now().Add(30 * time.Second)
	for {
		code, out, errOut = execCLI(ctx, "audit", "prove", "r-2", "--entity", "order-1", "--brokers", addr, "--trusted-keys", trusted, "--out", proofs)
		if code == exitOK || time.Now().After(deadline) {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	if code != exitOK || !strings.Contains(out, "succeeded r-2") {
		t.Fatalf("prove: exit %d\n%s%s", code, out, errOut)
	}
	saved := filepath.Join(dir, "saved-checkpoints")
	if code, _, errOut := execCLI(ctx, "audit", "checkpoints", "--brokers", addr, "--trusted-keys", trusted, "--out", saved); code != exitOK {
		t.Fatalf("audit checkpoints: exit %d %s", code, errOut)
	}
	code, out, errOut = execCLI(ctx, "audit", "verify", "--brokers", addr, "--checkpoints", saved, "--checkpoints", "topic", "--trusted-keys", trusted)
	if code != exitOK || !strings.Contains(out, "every checkpoint matches the journal") {
		t.Fatalf("verify: exit %d\n%s%s", code, out, errOut)
	}

	// The guarantee audit with the public keys: every journal record is
	// under a seal of a trusted key (check journal_signed).
	code, out, errOut = execCLI(ctx, "audit", "--brokers", addr, "--group", "secured", "--trusted-keys", trusted)
	if code != exitOK || !strings.Contains(out, "journal_signed") {
		t.Fatalf("audit --trusted-keys: exit %d\n%s%s", code, out, errOut)
	}

	// Offline: a directory with the proof and the public keys only.
	files, _ := filepath.Glob(filepath.Join(proofs, "*.tlog-proof"))
	if len(files) == 0 {
		t.Fatal("prove wrote no proof")
	}
	offline := t.TempDir()
	bundle, _ := os.ReadFile(files[len(files)-1])
	tk, _ := os.ReadFile(trusted)
	write := func(name string, b []byte) string {
		p := filepath.Join(offline, name)
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	proof, keys := write("r-2.tlog-proof", bundle), write("keys", tk)
	if code, out, errOut := runCLI("audit", "check-proof", proof, "--trusted-keys", keys); code != exitOK || !strings.Contains(out, `"idempotency_key":"r-2"`) {
		t.Fatalf("check-proof: exit %d\n%s%s", code, out, errOut)
	}
	// One byte of the record changed.
	lines := strings.SplitN(string(bundle), "\n", 3)
	leaf, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(lines[1], "extra "))
	if err != nil {
		t.Fatal(err)
	}
	leaf = bytes.Replace(leaf, []byte(`"succeeded"`), []byte(`"succeedee"`), 1)
	forged := lines[0] + "\nextra " + base64.StdEncoding.EncodeToString(leaf) + "\n" + lines[2]
	for name, c := range map[string]struct {
		b    string
		want string
	}{
		"forged":    {forged, "is not leaf"},
		"truncated": {string(bundle[:len(lines[0])+len(lines[1])+4]), "truncated"},
	} {
		code, out, _ := runCLI("audit", "check-proof", write(name, []byte(c.b)), "--trusted-keys", keys)
		if code != exitAuditFailed || !strings.Contains(out, "REFUSED") || !strings.Contains(out, c.want) {
			t.Errorf("%s proof: exit %d %s", name, code, out)
		}
	}

	// Bad inputs: a clear error naming the file and the problem.
	badKeys := write("bad-keys", []byte("# keys\nexecutor-a+deadbeef+AAAA\n"))
	if code, _, errOut := runCLI("audit", "check-proof", proof, "--trusted-keys", badKeys); code != exitUsage || !strings.Contains(errOut, badKeys+" line 2") {
		t.Errorf("malformed trusted keys: exit %d %s", code, errOut)
	}
	if code, _, errOut := execCLI(ctx, "audit", "--brokers", addr, "--trusted-keys", badKeys); code != exitUsage || !strings.Contains(errOut, badKeys+" line 2") {
		t.Errorf("audit with malformed trusted keys: exit %d %s", code, errOut)
	}
	sv, _ := os.ReadFile(saved)
	badSig := write("bad-sig", bytes.Replace(sv, []byte("onceflight.journal/0\n"), []byte("onceflight.journal/1\n"), 1))
	code, out, _ = execCLI(ctx, "audit", "verify", "--brokers", addr, "--checkpoints", badSig, "--trusted-keys", trusted)
	if code != exitAuditFailed || !strings.Contains(out, "REFUSED") || !strings.Contains(out, "invalid signature") {
		t.Errorf("bad signature: exit %d %s", code, out)
	}
	code, out, _ = execCLI(ctx, "audit", "verify", "--brokers", addr, "--checkpoints", saved, "--trusted-keys", trusted, "--origin-prefix", "onceflight/other")
	if code != exitAuditFailed || !strings.Contains(out, "unknown origin") {
		t.Errorf("unknown origin: exit %d %s", code, out)
	}
	if err := os.Chmod(key, 0o644); err != nil {
		t.Fatal(err)
	}
	cfg := write("onceflight.yaml", []byte("actions:\n  noop.ping:\n    connector: noop\n"))
	code, _, errOut = execCLI(ctx, "serve", "--brokers", addr, "--config", cfg, "--data-dir", t.TempDir(), "--checkpoint-key-file", key)
	if code != exitUsage || !strings.Contains(errOut, key) || !strings.Contains(errOut, "chmod 600") {
		t.Errorf("key file 0644: exit %d %s", code, errOut)
	}
	// Signatures required, no key to sign with: serve refuses to start.
	code, _, errOut = execCLI(ctx, "serve", "--brokers", addr, "--config", cfg, "--data-dir", t.TempDir(), "--require-signed-journal", "--trusted-keys", trusted)
	if code != exitUsage || !strings.Contains(errOut, "--require-signed-journal needs --checkpoint-key-file") {
		t.Errorf("serve requiring signatures without a key: exit %d %s", code, errOut)
	}

	// A record appended by a writer without an executor key, chained
	// correctly after r-3: a refund r-9 that never ran. explain and the
	// guarantee audit, given the public keys, refuse it; a signed key's
	// story stays clean.
	p, off := forgeAfter(t, addr, "r-3", "r-9")
	code, out, _ = execCLI(ctx, "explain", "r-9", "--brokers", addr, "--trusted-keys", trusted)
	if code != exitAuditFailed || !strings.Contains(out, "WARNING: 1 journal record(s)") || !strings.Contains(out, "UNSIGNED (no seal follows them)") {
		t.Errorf("explain of a forged record: exit %d\n%s", code, out)
	}
	if code, out, _ := execCLI(ctx, "explain", "r-9", "--brokers", addr); code != exitOK || strings.Contains(out, "UNSIGNED") {
		t.Errorf("explain without trusted keys: exit %d\n%s", code, out)
	}
	if code, out, _ := execCLI(ctx, "explain", "r-2", "--brokers", addr, "--trusted-keys", trusted, "-o", "json"); code != exitOK || !strings.Contains(out, `"signatures": "checked"`) || strings.Contains(out, `"unsigned"`) {
		t.Errorf("explain of a signed record: exit %d\n%s", code, out)
	}
	code, out, _ = execCLI(ctx, "audit", "--brokers", addr, "--group", "secured", "--trusted-keys", trusted)
	if want := fmt.Sprintf("partition %d offset %d", p, off); code != exitAuditFailed || !strings.Contains(out, "journal_signed") || !strings.Contains(out, want) {
		t.Errorf("audit of a forged record: exit %d, want %q\n%s", code, want, out)
	}
}

// forgeAfter appends to the journal, as a client without an executor key,
// a succeeded record of key forged chained after the last record of key
// after (which must be its partition's last record). It returns the
// partition and offset written.
func forgeAfter(t *testing.T, addr, after, forged string) (int32, int64) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cl, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.ConsumeTopics(schemas.DefaultTopics().Journal),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	var last schemas.Record
	var p int32
	for last.Status != schemas.StatusSucceeded {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("no succeeded record of %s in the journal", after)
		}
		for _, r := range fs.Records() {
			if wire.JournalKind(r) == schemas.KindRecord && string(r.Key) == after {
				if last, err = schemas.UnmarshalRecord(r.Value); err != nil {
					t.Fatal(err)
				}
				p = r.Partition
			}
		}
	}
	now := time.Now().UTC()
	rec := schemas.Record{IdempotencyKey: forged, Entity: last.Entity, Action: last.Action, Status: schemas.StatusSucceeded,
		Fingerprint: last.Fingerprint, Attempts: 1, Epoch: last.Epoch, Executor: last.Executor, StartedAt: &now, FinishedAt: &now, PrevHash: last.Hash}
	v, err := wire.SealRecord(&rec)
	if err != nil {
		t.Fatal(err)
	}
	r := &kgo.Record{Topic: schemas.DefaultTopics().Journal, Partition: p, Key: []byte(forged), Value: v, Headers: []kgo.RecordHeader{
		{Key: schemas.HeaderKind, Value: []byte(schemas.KindRecord)},
		{Key: schemas.HeaderEpoch, Value: []byte(strconv.FormatInt(rec.Epoch, 10))},
	}}
	if err := cl.ProduceSync(ctx, r).FirstErr(); err != nil {
		t.Fatal(err)
	}
	return p, r.Offset
}

type fixedCheckpoints map[int32][]byte

func (f fixedCheckpoints) Checkpoints() map[int32][]byte { return f }

// GET /checkpoints answers the notes in partition order, one after
// another, without credentials; other paths go to the records API.
func TestCheckpointsEndpoint(t *testing.T) {
	next := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusTeapot) })
	srv := httptest.NewServer(withCheckpoints(fixedCheckpoints{1: []byte("note-1\n"), 0: []byte("note-0\n")}, next))
	defer srv.Close()
	resp, err := http.Get(srv.URL + "/checkpoints")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || string(body) != "note-0\n\nnote-1\n\n" {
		t.Fatalf("GET /checkpoints: %d %q", resp.StatusCode, body)
	}
	resp, err = http.Post(srv.URL+"/checkpoints", "text/plain", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusMethodNotAllowed {
		t.Fatalf("POST /checkpoints: %d", resp.StatusCode)
	}
	resp, err = http.Get(srv.URL + "/v1/executions/k")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusTeapot {
		t.Fatalf("other paths: %d", resp.StatusCode)
	}
}
