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

type gateRec struct {
	off  int64
	seal []byte
	leaf []byte
}

// sealed makes the records of one transaction of n leaves at offset off
// and the seal that follows them.
func sealed(t *testing.T, s note.Signer, origin string, epoch int64, prev []byte, off int64, n int) ([]gateRec, []byte) {
	t.Helper()
	var recs []gateRec
	var hs [][]byte
	for i := range n {
		l := leafAt(int(off) + i)
		recs = append(recs, gateRec{off: off + int64(i), leaf: l})
		hs = append(hs, LeafHash(l))
	}
	msg, err := Seal{Origin: origin, Epoch: epoch, Prev: prev, Records: n, Digest: DigestLeaves(hs), Time: time.Now()}.Sign(s)
	if err != nil {
		t.Fatal(err)
	}
	return append(recs, gateRec{off: off + int64(n), seal: msg, leaf: msg}), msg
}

func runGate(g *SealGate, recs []gateRec) (int, error) {
	for _, r := range recs {
		if r.seal != nil {
			if err := g.AddSeal(r.off, r.seal, LeafHash(r.leaf), r.off); err != nil {
				return 0, err
			}
		} else {
			g.Add(r.off, LeafHash(r.leaf), r.off)
		}
	}
	out, err := g.Release()
	if err != nil {
		return len(out), err
	}
	return len(out), g.End()
}

func TestSealGate(t *testing.T) {
	a, va := newSigner(t, "executor-a")
	b, vb := newSigner(t, "executor-b")
	tk := trusted(t, va, vb)
	const origin = "onceflight/j/0"
	// Two owners, chained seals within each epoch: all released.
	t1, s1 := sealed(t, a, origin, 1, nil, 0, 3)
	t2, _ := sealed(t, a, origin, 1, SealHash(s1), 4, 2)
	t3, _ := sealed(t, b, origin, 2, nil, 7, 1)
	good := append(append(append([]gateRec{}, t1...), t2...), t3...)
	if n, err := runGate(NewSealGate(origin, tk), good); err != nil || n != len(good) {
		t.Fatalf("signed journal: %d released, %v", n, err)
	}
	unsigned := func(recs []gateRec, tk *TrustedKeys, want string) {
		t.Helper()
		_, err := runGate(NewSealGate(origin, tk), recs)
		var ue *UnsignedError
		if !errors.As(err, &ue) || !strings.Contains(err.Error(), want) {
			t.Errorf("want an unsigned error with %q, got %v", want, err)
		}
	}
	// A record appended after the last seal.
	unsigned(append(append([]gateRec{}, good...), gateRec{off: 9, leaf: leafAt(99)}), tk, "offsets 9..9")
	// A record inserted between two transactions.
	ins := append(append(append([]gateRec{}, t1...), gateRec{off: 3, leaf: leafAt(98)}), t2...)
	unsigned(ins, tk, "offsets 3..3")
	// A forger's own seal over forged records, signed by an untrusted key.
	m, _ := newSigner(t, "mallory")
	f, _ := sealed(t, m, origin, 1, SealHash(s1), 4, 2)
	unsigned(append(append([]gateRec{}, t1...), f...), tk, "mallory")
	// A seal copied from another partition.
	other, _ := sealed(t, a, "onceflight/j/1", 1, nil, 0, 3)
	unsigned(other, tk, "is for onceflight/j/1")
	// An altered record under a real seal.
	alt := append([]gateRec{}, t1...)
	alt[1].leaf = leafAt(97)
	unsigned(alt, tk, "does not match")
	// Revoked and expired keys.
	unsigned(good, trusted(t, va+" revoked", vb), "revoked")
	unsigned(good, trusted(t, va, vb+" not_after=2020-01-01T00:00:00Z"), "expired")
	// An owner's first transaction (a chain's start, validly signed)
	// appended again later: its epoch is not above the last chain's.
	unsigned(append(append([]gateRec{}, good...), reoff(t3, 9)...), tk, "starts a chain of epoch 2 after the seal at offset 8 of epoch 2")
	unsigned(append(append([]gateRec{}, good...), reoff(t1, 9)...), tk, "starts a chain of epoch 1")
}

// reoff returns recs moved to start at offset off.
func reoff(recs []gateRec, off int64) []gateRec {
	out := append([]gateRec{}, recs...)
	for i := range out {
		out[i].off = off + int64(i)
	}
	return out
}

// After retention deleted the partition's beginning, the records before
// the first seal read (the end of a transaction whose start is gone) and
// that seal are passed over, unchecked and never released; the chain is
// checked from there, so a forged record later is still refused.
func TestSealGateAfterGap(t *testing.T) {
	a, va := newSigner(t, "executor-a")
	tk := trusted(t, va)
	const origin = "onceflight/j/0"
	t1, s1 := sealed(t, a, origin, 1, nil, 0, 3)
	t2, s2 := sealed(t, a, origin, 1, SealHash(s1), 4, 2)
	t3, _ := sealed(t, a, origin, 1, SealHash(s2), 7, 2)
	all := append(append(append([]gateRec{}, t1...), t2...), t3...)
	// Retention deleted offsets 0..1: the gate starts inside t1.
	tail := all[2:]
	if _, err := runGate(NewSealGate(origin, tk), tail); err == nil || !strings.Contains(err.Error(), "covers 3 records, 1 precede it") {
		t.Fatalf("without StartsAfterGap: %v", err)
	}
	g := NewSealGate(origin, tk)
	g.StartsAfterGap()
	n, err := runGate(g, tail)
	if err != nil || n != len(t2)+len(t3) || g.Skipped() != 2 {
		t.Fatalf("after a gap: %d released, %d skipped, %v", n, g.Skipped(), err)
	}
	// Retention cut at a transaction's end: the first one read is whole
	// and checked (released) as usual.
	g = NewSealGate(origin, tk)
	g.StartsAfterGap()
	if n, err := runGate(g, all[4:]); err != nil || n != len(t2)+len(t3) || g.Skipped() != 0 {
		t.Fatalf("gap at a transaction's end: %d released, %d skipped, %v", n, g.Skipped(), err)
	}
	g = NewSealGate(origin, tk)
	g.StartsAfterGap()
	forged := append(append([]gateRec{}, tail...), gateRec{off: 10, leaf: leafAt(99)})
	if _, err := runGate(g, forged); err == nil || !strings.Contains(err.Error(), "offsets 10..10") {
		t.Fatalf("forged record after a gap: %v", err)
	}
}

func TestRecordLeafHash(t *testing.T) {
	r := &kgo.Record{Key: []byte("k"), Value: []byte(`{"a":1}`), Headers: []kgo.RecordHeader{{Key: "onceflight-kind", Value: []byte("record")}}}
	if !bytes.Equal(RecordLeafHash(r), LeafHash(RecordLeafData(r))) {
		t.Fatal("streamed leaf hash differs")
	}
}

// A scan names each stretch no trusted seal covers and goes on; the
// records trusted seals covered before a refusal are still returned.
func TestSealScan(t *testing.T) {
	a, va := newSigner(t, "executor-a")
	tk := trusted(t, va)
	const origin = "onceflight/j/0"
	t1, _ := sealed(t, a, origin, 1, nil, 0, 3)
	bad, _ := sealed(t, a, origin, 1, SealHash([]byte("not a seal")), 4, 2) // does not follow t1's seal
	t3, _ := sealed(t, a, origin, 2, nil, 7, 1)
	recs := append(append(append([]gateRec{}, t1...), bad...), t3...)
	recs = append(recs, gateRec{off: 9, leaf: leafAt(99)}) // appended, no seal
	sc := NewSealScan(origin, tk, false)
	got, us := scanAll(t, sc, recs)
	if fmt.Sprint(got) != "[0 1 2 3 7 8]" {
		t.Fatalf("released %v, want t1 and t3", got)
	}
	if len(us) != 2 || us[0].From != 4 || us[0].To != 6 || us[1].From != 9 || !strings.Contains(us[0].Why, "does not follow") {
		t.Fatalf("unsigned: %v", us)
	}
}

// TestSealScanCopyAfterRefusal: after a stretch the scan refused, a copy
// of an older signed transaction — one that followed an earlier seal, or
// one that started the chain — is not taken for a new chain; the owner's
// real next transaction, which follows the last trusted seal, is.
func TestSealScanCopyAfterRefusal(t *testing.T) {
	a, va := newSigner(t, "executor-a")
	tk := trusted(t, va)
	const origin = "onceflight/j/0"
	t1, s1 := sealed(t, a, origin, 1, nil, 0, 3)          // 0..3
	t2, s2 := sealed(t, a, origin, 1, SealHash(s1), 4, 2) // 4..6
	bad, _ := sealed(t, a, origin, 1, SealHash([]byte("not a seal")), 7, 2)
	moved := func(recs []gateRec, to int64) []gateRec {
		out := make([]gateRec, len(recs))
		for i, r := range recs {
			out[i] = r
			out[i].off = to + int64(i)
		}
		return out
	}
	t3, _ := sealed(t, a, origin, 1, SealHash(s2), 17, 1) // 17..18
	var recs []gateRec
	for _, part := range [][]gateRec{t1, t2, bad, moved(t2, 10), moved(t1, 13), t3} {
		recs = append(recs, part...)
	}
	sc := NewSealScan(origin, tk, false)
	got, us := scanAll(t, sc, recs)
	if fmt.Sprint(got) != "[0 1 2 3 4 5 6 17 18]" {
		t.Fatalf("released %v, want t1, t2 and t3, not the copies", got)
	}
	var refused []string
	for _, u := range us {
		refused = append(refused, fmt.Sprintf("%d-%d", u.From, u.To))
	}
	if fmt.Sprint(refused) != "[7-9 10-12 13-16]" {
		t.Fatalf("refused %v, want the forged stretch and both copies: %v", refused, us)
	}
}

// scanAll passes recs to sc as journal records and returns the offsets
// sc released and the stretches it refused.
func scanAll(t *testing.T, sc *SealScan, recs []gateRec) ([]int64, []*UnsignedError) {
	t.Helper()
	var got []int64
	for _, r := range recs {
		kr := &kgo.Record{Offset: r.off, Key: []byte("onceflight.seal"), Value: r.seal,
			Headers: []kgo.RecordHeader{{Key: "onceflight-kind", Value: []byte("seal")}}}
		if r.seal == nil {
			l, err := SplitLeafData(r.leaf)
			if err != nil {
				t.Fatal(err)
			}
			kr.Key, kr.Value, kr.Headers = l.Key, l.Value, nil
			for _, h := range l.Headers {
				kr.Headers = append(kr.Headers, kgo.RecordHeader{Key: h.Key, Value: []byte(h.Value)})
			}
		}
		for _, v := range sc.Add(kr, r.off) {
			got = append(got, v.(int64))
		}
	}
	rel, us, _ := sc.End()
	for _, v := range rel {
		got = append(got, v.(int64))
	}
	return got, us
}

// TestSealScanKeepsRealTransactionsAroundForgeries: a forged record
// between two real transactions is named alone (the transaction after it
// is still judged and released), and a malformed seal after a real chain
// does not throw that chain away; in both cases a copy of the first
// transaction appended later is refused.
func TestSealScanKeepsRealTransactionsAroundForgeries(t *testing.T) {
	a, va := newSigner(t, "executor-a")
	tk := trusted(t, va)
	const origin = "onceflight/j/0"
	moved := func(recs []gateRec, to int64) []gateRec {
		out := make([]gateRec, len(recs))
		for i, r := range recs {
			out[i] = r
			out[i].off = to + int64(i)
		}
		return out
	}
	t1, s1 := sealed(t, a, origin, 1, nil, 0, 3) // 0..3
	forged := gateRec{off: 4, leaf: leafAt(4)}
	t2, _ := sealed(t, a, origin, 1, SealHash(s1), 5, 2) // 5..7
	var recs []gateRec
	for _, part := range [][]gateRec{t1, {forged}, t2, moved(t1, 8)} {
		recs = append(recs, part...)
	}
	got, us := scanAll(t, NewSealScan(origin, tk, false), recs)
	var refused []string
	for _, u := range us {
		refused = append(refused, fmt.Sprintf("%d-%d", u.From, u.To))
	}
	if fmt.Sprint(got) != "[0 1 2 3 5 6 7]" || fmt.Sprint(refused) != "[4-4 8-11]" {
		t.Fatalf("forged record between transactions: released %v, refused %v (%v); want [0 1 2 3 5 6 7] and [4-4 8-11]", got, refused, us)
	}

	garbage := []byte("not a seal")
	recs = append(append([]gateRec{}, t1...), gateRec{off: 4, leaf: leafAt(4)}, gateRec{off: 5, seal: garbage, leaf: garbage})
	recs = append(recs, moved(t1, 6)...)
	got, us = scanAll(t, NewSealScan(origin, tk, false), recs)
	refused = nil
	for _, u := range us {
		refused = append(refused, fmt.Sprintf("%d-%d", u.From, u.To))
	}
	if fmt.Sprint(got) != "[0 1 2 3]" || fmt.Sprint(refused) != "[4-5 6-9]" {
		t.Fatalf("malformed seal after a chain: released %v, refused %v (%v); want [0 1 2 3] and [4-5 6-9]", got, refused, us)
	}
}
