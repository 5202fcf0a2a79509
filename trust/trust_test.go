package trust_test

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"golang.org/x/mod/sumdb/note"

	"github.com/onceflight/onceflight/internal/trustlog"
	. "github.com/onceflight/onceflight/trust"
)

func newSigner(t *testing.T, name string) (note.Signer, string) {
	t.Helper()
	skey, vkey, err := trustlog.GenerateKey(name)
	if err != nil {
		t.Fatal(err)
	}
	s, err := note.NewSigner(skey)
	if err != nil {
		t.Fatal(err)
	}
	return s, vkey
}

func trusted(t *testing.T, lines ...string) *TrustedKeys {
	t.Helper()
	tk, err := ParseTrustedKeys("keys.txt", []byte(strings.Join(lines, "\n")+"\n"))
	if err != nil {
		t.Fatal(err)
	}
	return tk
}

func leafAt(i int) []byte {
	return LeafData(fmt.Appendf(nil, "order-%d", i), fmt.Appendf(nil, `{"idempotency_key":"k%d"}`, i),
		[]Header{{"onceflight-kind", "record"}, {"onceflight-epoch", "3"}})
}

// The compact tree an executor keeps and the full log an auditor builds
// agree on every root, and a tree resumed from its compact range goes on
// as the original.
func TestTreeMatchesLog(t *testing.T) {
	tr, l := trustlog.NewTree(), &trustlog.Log{}
	for i := range 37 {
		if i == 20 {
			r, err := trustlog.ResumeTree(tr.Size(), tr.Hashes())
			if err != nil {
				t.Fatal(err)
			}
			tr = r
		}
		h := LeafHash(leafAt(i))
		tr.Append(h)
		l.Append(h)
		root, err := l.RootAt(uint64(i + 1))
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(root, tr.Root()) {
			t.Fatalf("size %d: tree root %x, log root %x", i+1, tr.Root(), root)
		}
		if n := len(tr.Hashes()); n > 6 {
			t.Fatalf("size %d: compact range holds %d hashes, want at most log2(n)+1", i+1, n)
		}
	}
	for _, sz := range [][2]uint64{{1, 37}, {5, 20}, {16, 37}, {36, 37}} {
		p, err := l.Consistency(sz[0], sz[1])
		if err != nil {
			t.Fatal(err)
		}
		r1, _ := l.RootAt(sz[0])
		r2, _ := l.RootAt(sz[1])
		if err := VerifyConsistency(sz[0], sz[1], p, r1, r2); err != nil {
			t.Fatalf("consistency %v: %v", sz, err)
		}
		other, _ := l.RootAt(sz[0] - 1)
		if sz[0] > 1 && VerifyConsistency(sz[0], sz[1], p, other, r2) == nil {
			t.Fatalf("consistency %v verified against a wrong old root", sz)
		}
	}
}

func TestProofRoundTripAndOneByte(t *testing.T) {
	s, vkey := newSigner(t, "executor-a")
	tk := trusted(t, vkey)
	l := &trustlog.Log{}
	for i := range 11 {
		l.Append(LeafHash(leafAt(i)))
	}
	root, _ := l.RootAt(11)
	cp := &Checkpoint{Origin: "onceflight/onceflight.journal/3", Size: 11, Root: root, Time: time.Now()}
	msg, err := cp.Sign(s)
	if err != nil {
		t.Fatal(err)
	}
	hs, err := l.Inclusion(7, 11)
	if err != nil {
		t.Fatal(err)
	}
	bundle := Proof{Index: 7, Hashes: hs, Checkpoint: msg, Leaf: leafAt(7)}.Marshal()
	got, lf, err := CheckProof(bundle, tk)
	if err != nil {
		t.Fatal(err)
	}
	if got.Origin != cp.Origin || got.Signer != "executor-a" || string(lf.Key) != "order-7" {
		t.Fatalf("checked %+v %+v", got, lf)
	}

	// One byte of the record changed: the proof fails.
	bad := leafAt(7)
	bad[len(bad)-3] ^= 1
	if _, _, err := CheckProof(Proof{Index: 7, Hashes: hs, Checkpoint: msg, Leaf: bad}.Marshal(), tk); !errors.Is(err, ErrProof) {
		t.Fatalf("altered record: %v", err)
	}
	// Another index: fails.
	if _, _, err := CheckProof(Proof{Index: 6, Hashes: hs, Checkpoint: msg, Leaf: leafAt(7)}.Marshal(), tk); !errors.Is(err, ErrProof) {
		t.Fatalf("wrong index: %v", err)
	}
	// Truncated anywhere: a clear error, never a pass.
	for _, cut := range []int{10, 30, len(bundle) / 2, len(bundle) - 40} {
		_, _, err := CheckProof(bundle[:cut], tk)
		if err == nil {
			t.Fatalf("truncated at %d: verified", cut)
		}
	}
	if _, _, err := CheckProof(bundle[:30], tk); err == nil || !strings.Contains(err.Error(), "truncated") {
		t.Fatalf("truncated proof: %v", err)
	}
	// A checkpoint signed by another key: refused, naming the signer.
	_, other := newSigner(t, "executor-b")
	if _, _, err := CheckProof(bundle, trusted(t, other)); !errors.Is(err, ErrCheckpoint) || !strings.Contains(err.Error(), "executor-a") {
		t.Fatalf("untrusted signer: %v", err)
	}
}

func TestCheckpointRefusals(t *testing.T) {
	s, vkey := newSigner(t, "executor-a")
	at := time.Date(2026, 6, 1, 0, 0, 0, 0, time.UTC)
	cp := &Checkpoint{Origin: "onceflight/j/0", Size: 1, Root: LeafHash(leafAt(0)), Time: at}
	msg, err := cp.Sign(s)
	if err != nil {
		t.Fatal(err)
	}
	known := func(o string) bool { return o == "onceflight/j/0" }
	if _, err := OpenCheckpoint(msg, trusted(t, vkey), known); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name string
		msg  []byte
		tk   string
		kn   func(string) bool
		want string
	}{
		{"revoked", msg, vkey + " revoked", nil, "revoked"},
		{"expired", msg, vkey + " not_after=2026-05-01T00:00:00Z", nil, "expired at 2026-05-01"},
		{"not yet valid", msg, vkey + " not_before=2026-07-01T00:00:00Z", nil, "not valid before"},
		{"unknown origin", msg, vkey, func(string) bool { return false }, `unknown origin "onceflight/j/0"`},
		{"bad signature", bytes.Replace(msg, []byte("\n1\n"), []byte("\n2\n"), 1), vkey, nil, "invalid signature"},
	} {
		_, err := OpenCheckpoint(c.msg, trusted(t, c.tk), c.kn)
		if !errors.Is(err, ErrCheckpoint) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want %q", c.name, err, c.want)
		}
	}
	// A file of several notes splits back into them.
	two := append(append(append([]byte{}, msg...), '\n'), msg...)
	ns, err := SplitNotes(two)
	if err != nil || len(ns) != 2 || !bytes.Equal(ns[1], msg) {
		t.Fatalf("split: %d notes, %v", len(ns), err)
	}
}

// OpenSeal is what a verifier of transactions checks each chain's last
// seal with: a trusted key valid when the seal was signed, and an intact
// note.
func TestOpenSeal(t *testing.T) {
	s, vkey := newSigner(t, "executor-a")
	other, ovkey := newSigner(t, "executor-b")
	at := time.Date(2026, 6, 1, 0, 0, 0, 0, time.UTC)
	seal := Seal{Origin: "onceflight/j/0", Epoch: 2, Prev: SealHash([]byte("prev")), Records: 1, Digest: DigestLeaves([][]byte{LeafHash(leafAt(0))}), Time: at}
	msg, err := seal.Sign(s)
	if err != nil {
		t.Fatal(err)
	}
	got, err := OpenSeal(msg, trusted(t, vkey))
	if err != nil || got.Origin != seal.Origin || got.Epoch != 2 || got.Records != 1 || !bytes.Equal(got.Digest, seal.Digest) || !got.Time.Equal(at) {
		t.Fatalf("open: %+v, %v", got, err)
	}
	forged, err := seal.Sign(other)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name string
		msg  []byte
		tk   string
		want string
	}{
		{"revoked", msg, vkey + " revoked", "revoked"},
		{"expired", msg, vkey + " not_after=2026-05-01T00:00:00Z", "expired at 2026-05-01"},
		{"untrusted key", forged, vkey, "signed by executor-b"},
		{"altered", bytes.Replace(msg, []byte("records 1\n"), []byte("records 2\n"), 1), vkey, "invalid signature"},
		{"not a seal", []byte("hello\n\n— x y\n"), vkey + "\n" + ovkey, "not an onceflight-seal/v1 note"},
	} {
		if _, err := OpenSeal(c.msg, trusted(t, c.tk)); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want %q", c.name, err, c.want)
		}
	}
}

func TestTrustedKeysFileErrors(t *testing.T) {
	_, vkey := newSigner(t, "executor-a")
	for _, c := range []struct{ file, want string }{
		{"", "holds no key"},
		{"# nothing\n", "holds no key"},
		{"executor-a+zz\n", "line 1: \"executor-a+zz\" is not a verifier key"},
		{"# c\n" + vkey + " not_after=tomorrow\n", "line 2: not_after=\"tomorrow\" is not an RFC 3339 time"},
		{vkey + " expired\n", `line 1: unknown attribute "expired"`},
		{vkey + "\n" + vkey + "\n", `line 2: key name "executor-a" is already used on line 1`},
		{vkey + " not_before=2026-02-01T00:00:00Z not_after=2026-01-01T00:00:00Z\n", "line 1: not_after 2026-01-01T00:00:00Z is not after"},
	} {
		_, err := ParseTrustedKeys("/etc/onceflight/trusted-keys", []byte(c.file))
		if err == nil || !strings.Contains(err.Error(), "/etc/onceflight/trusted-keys") || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q: %v, want %q", c.file, err, c.want)
		}
	}
}

func TestSignerFilePermissions(t *testing.T) {
	skey, _, err := trustlog.GenerateKey("executor-a")
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(t.TempDir(), "executor.key")
	if err := trustlog.WriteSigner(p, skey); err != nil {
		t.Fatal(err)
	}
	if err := trustlog.WriteSigner(p, skey); err == nil || !strings.Contains(err.Error(), "never overwritten") {
		t.Fatalf("overwrite: %v", err)
	}
	s, err := trustlog.LoadSigner(p)
	if err != nil || s.Name() != "executor-a" {
		t.Fatalf("load: %v", err)
	}
	// The verifier key it derives is keygen's, whatever the key's base64
	// holds ('+' included): tried on many keys.
	for range 200 {
		skey, vkey, _ := trustlog.GenerateKey("executor-a")
		s, err := trustlog.NewSigner(skey)
		if err != nil || s.VerifierKey() != vkey {
			t.Fatalf("signer of %s: %v, verifier %q want %q", skey, err, s.VerifierKey(), vkey)
		}
	}
	if err := os.Chmod(p, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := trustlog.LoadSigner(p); !errors.Is(err, trustlog.ErrKeyFileMode) || !strings.Contains(err.Error(), p) || !strings.Contains(err.Error(), "0644") {
		t.Fatalf("mode 0644: %v", err)
	}
	bad := filepath.Join(t.TempDir(), "bad.key")
	_ = os.WriteFile(bad, []byte("hello\n"), 0o600)
	if _, err := trustlog.LoadSigner(bad); err == nil || !strings.Contains(err.Error(), bad) {
		t.Fatalf("not a key: %v", err)
	}
}

func TestLeafDataRoundTrip(t *testing.T) {
	l, err := SplitLeafData(leafAt(4))
	if err != nil || !slices.Contains(l.Headers, Header{Key: "onceflight-kind", Value: "record"}) || string(l.Key) != "order-4" || !strings.Contains(string(l.Value), "k4") {
		t.Fatalf("%+v %v", l, err)
	}
	full := leafAt(4)
	for cut := range len(full) {
		if _, err := SplitLeafData(full[:cut]); err == nil {
			t.Fatalf("leaf cut at %d of %d accepted", cut, len(full))
		}
	}
}

func TestRecordLeafHash(t *testing.T) {
	r := &kgo.Record{Key: []byte("k"), Value: []byte(`{"a":1}`), Headers: []kgo.RecordHeader{{Key: "onceflight-kind", Value: []byte("record")}}}
	if !bytes.Equal(RecordLeafHash(r), LeafHash(RecordLeafData(r))) {
		t.Fatal("streamed leaf hash differs")
	}
}
