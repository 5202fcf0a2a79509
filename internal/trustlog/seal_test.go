package trustlog

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"golang.org/x/mod/sumdb/note"

	"github.com/onceflight/onceflight/trust"
)

// sealKey is a new executor key: its signer and its verifier key line
// (the one a trusted-keys file holds).
func sealKey(t *testing.T, name string) (note.Signer, string) {
	t.Helper()
	skey, _, err := GenerateKey(name)
	var s *Signer
	if err == nil {
		s, err = NewSigner(skey)
	}
	if err != nil {
		t.Fatal(err)
	}
	return s, s.VerifierKey()
}

func trustedKeys(t *testing.T, vkeys ...string) *trust.TrustedKeys {
	t.Helper()
	tk, err := trust.ParseTrustedKeys("keys.txt", []byte(strings.Join(vkeys, "\n")+"\n"))
	if err != nil {
		t.Fatal(err)
	}
	return tk
}

// leafAt is the leaf data of journal record i.
func leafAt(i int) []byte {
	return trust.LeafData(fmt.Appendf(nil, "order-%d", i), fmt.Appendf(nil, `{"idempotency_key":"k%d"}`, i),
		[]trust.Header{{Key: "onceflight-kind", Value: "record"}, {Key: "onceflight-epoch", Value: "3"}})
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
		hs = append(hs, trust.LeafHash(l))
	}
	msg, err := trust.Seal{Origin: origin, Epoch: epoch, Prev: prev, Records: n, Digest: trust.DigestLeaves(hs), Time: time.Now()}.Sign(s)
	if err != nil {
		t.Fatal(err)
	}
	return append(recs, gateRec{off: off + int64(n), seal: msg, leaf: msg}), msg
}

func runGate(g *SealGate, recs []gateRec) (int, error) {
	for _, r := range recs {
		if r.seal != nil {
			if err := g.AddSeal(r.off, r.seal, trust.LeafHash(r.leaf), r.off); err != nil {
				return 0, err
			}
		} else {
			g.Add(r.off, trust.LeafHash(r.leaf), r.off)
		}
	}
	out, err := g.Release()
	if err != nil {
		return len(out), err
	}
	return len(out), g.End()
}

func TestSealGate(t *testing.T) {
	a, va := sealKey(t, "executor-a")
	b, vb := sealKey(t, "executor-b")
	tk := trustedKeys(t, va, vb)
	const origin = "onceflight/j/0"
	// Two owners, chained seals within each epoch: all released.
	t1, s1 := sealed(t, a, origin, 1, nil, 0, 3)
	t2, _ := sealed(t, a, origin, 1, trust.SealHash(s1), 4, 2)
	t3, _ := sealed(t, b, origin, 2, nil, 7, 1)
	good := append(append(append([]gateRec{}, t1...), t2...), t3...)
	if n, err := runGate(NewSealGate(origin, tk), good); err != nil || n != len(good) {
		t.Fatalf("signed journal: %d released, %v", n, err)
	}
	unsigned := func(recs []gateRec, tk *trust.TrustedKeys, want string) {
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
	m, _ := sealKey(t, "mallory")
	f, _ := sealed(t, m, origin, 1, trust.SealHash(s1), 4, 2)
	unsigned(append(append([]gateRec{}, t1...), f...), tk, "mallory")
	// A seal copied from another partition.
	other, _ := sealed(t, a, "onceflight/j/1", 1, nil, 0, 3)
	unsigned(other, tk, "is for onceflight/j/1")
	// An altered record under a real seal.
	alt := append([]gateRec{}, t1...)
	alt[1].leaf = leafAt(97)
	unsigned(alt, tk, "does not match")
	// Revoked and expired keys.
	unsigned(good, trustedKeys(t, va+" revoked", vb), "revoked")
	unsigned(good, trustedKeys(t, va, vb+" not_after=2020-01-01T00:00:00Z"), "expired")
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
	a, va := sealKey(t, "executor-a")
	tk := trustedKeys(t, va)
	const origin = "onceflight/j/0"
	t1, s1 := sealed(t, a, origin, 1, nil, 0, 3)
	t2, s2 := sealed(t, a, origin, 1, trust.SealHash(s1), 4, 2)
	t3, _ := sealed(t, a, origin, 1, trust.SealHash(s2), 7, 2)
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

// A scan names each stretch no trusted seal covers and goes on; the
// records trusted seals covered before a refusal are still returned.
func TestSealScan(t *testing.T) {
	a, va := sealKey(t, "executor-a")
	tk := trustedKeys(t, va)
	const origin = "onceflight/j/0"
	t1, _ := sealed(t, a, origin, 1, nil, 0, 3)
	bad, _ := sealed(t, a, origin, 1, trust.SealHash([]byte("not a seal")), 4, 2) // does not follow t1's seal
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
	a, va := sealKey(t, "executor-a")
	tk := trustedKeys(t, va)
	const origin = "onceflight/j/0"
	t1, s1 := sealed(t, a, origin, 1, nil, 0, 3)                // 0..3
	t2, s2 := sealed(t, a, origin, 1, trust.SealHash(s1), 4, 2) // 4..6
	bad, _ := sealed(t, a, origin, 1, trust.SealHash([]byte("not a seal")), 7, 2)
	t3, _ := sealed(t, a, origin, 1, trust.SealHash(s2), 17, 1) // 17..18
	var recs []gateRec
	for _, part := range [][]gateRec{t1, t2, bad, reoff(t2, 10), reoff(t1, 13), t3} {
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
			l, err := trust.SplitLeafData(r.leaf)
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
	a, va := sealKey(t, "executor-a")
	tk := trustedKeys(t, va)
	const origin = "onceflight/j/0"
	t1, s1 := sealed(t, a, origin, 1, nil, 0, 3) // 0..3
	forged := gateRec{off: 4, leaf: leafAt(4)}
	t2, _ := sealed(t, a, origin, 1, trust.SealHash(s1), 5, 2) // 5..7
	var recs []gateRec
	for _, part := range [][]gateRec{t1, {forged}, t2, reoff(t1, 8)} {
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
	recs = append(recs, reoff(t1, 6)...)
	got, us = scanAll(t, NewSealScan(origin, tk, false), recs)
	refused = nil
	for _, u := range us {
		refused = append(refused, fmt.Sprintf("%d-%d", u.From, u.To))
	}
	if fmt.Sprint(got) != "[0 1 2 3]" || fmt.Sprint(refused) != "[4-5 6-9]" {
		t.Fatalf("malformed seal after a chain: released %v, refused %v (%v); want [0 1 2 3] and [4-5 6-9]", got, refused, us)
	}
}

// TestSealGateAfter: a gate that goes on after the last seal an earlier
// gate trusted (a reader's restart) refuses what that gate would have
// refused had it kept reading — copies of older transactions, whether they
// started the chain or followed a seal — and takes the owner's next
// transaction and a later owner's chain.
func TestSealGateAfter(t *testing.T) {
	a, va := sealKey(t, "executor-a")
	tk := trustedKeys(t, va)
	const origin = "onceflight/j/0"
	t1, s1 := sealed(t, a, origin, 1, nil, 0, 3)                // 0..3
	t2, s2 := sealed(t, a, origin, 1, trust.SealHash(s1), 4, 2) // 4..6
	first := NewSealGate(origin, tk)
	if n, err := runGate(first, append(append([]gateRec{}, t1...), t2...)); err != nil || n != 7 {
		t.Fatalf("before the restart: %d released, %v", n, err)
	}
	note, off := first.LastTrusted()
	if string(note) != string(s2) || off != 6 {
		t.Fatalf("LastTrusted = %q at %d, want t2's seal at 6", note, off)
	}
	after := func() *SealGate {
		t.Helper()
		g, err := NewSealGateAfter(origin, tk, note, off)
		if err != nil {
			t.Fatal(err)
		}
		return g
	}
	for name, copied := range map[string][]gateRec{"chain start": reoff(t1, 7), "chained": reoff(t2, 7)} {
		if _, err := runGate(after(), copied); err == nil || !strings.Contains(err.Error(), "offsets 7..") {
			t.Errorf("a copy of the %s transaction after the restart: %v", name, err)
		}
		// A gate that never stopped refuses it too.
		if _, err := runGate(first.Successor(), copied); err == nil {
			t.Errorf("a copy of the %s transaction without a restart: taken", name)
		}
	}
	t3, _ := sealed(t, a, origin, 1, trust.SealHash(s2), 7, 1)
	t4, _ := sealed(t, a, origin, 2, nil, 9, 2)
	if n, err := runGate(after(), append(append([]gateRec{}, t3...), t4...)); err != nil || n != 5 {
		t.Fatalf("the real next transactions: %d released, %v", n, err)
	}
	if g, err := NewSealGateAfter(origin, tk, nil, 0); err != nil || g.last != nil {
		t.Errorf("no seal yet: %v, want a fresh gate", err)
	}
	if _, err := NewSealGateAfter("onceflight/j/1", tk, note, off); err == nil {
		t.Error("a seal of another partition taken to go on after")
	}
	if _, err := NewSealGateAfter(origin, tk, []byte("not a seal"), off); err == nil {
		t.Error("a malformed seal taken to go on after")
	}
}

// TestSealCut: which of the records read since the last seal a seal
// leaves uncovered, the rule AddSeal, SealScan and the console share.
func TestSealCut(t *testing.T) {
	a, _ := sealKey(t, "executor-a")
	const origin = "onceflight/j/0"
	seal := func(origin string, records int) []byte {
		msg, err := trust.Seal{Origin: origin, Epoch: 1, Records: records, Digest: make([]byte, 32), Time: time.Now()}.Sign(a)
		if err != nil {
			t.Fatal(err)
		}
		return msg
	}
	for _, c := range []struct {
		name   string
		msg    []byte
		n      int
		cut    int
		whyHas string
	}{
		{"covers all", seal(origin, 3), 3, 0, ""},
		{"covers the last two", seal(origin, 2), 5, 3, "the next seal, at offset 9, covers only the 2 records after them"},
		{"covers none", seal(origin, 0), 2, 2, "covers only the 0 records"},
		{"nothing read", seal(origin, 0), 0, 0, ""},
		{"counts more than were read", seal(origin, 4), 3, 0, ""},
		{"another partition's", seal("onceflight/j/1", 1), 3, 0, ""},
		{"malformed", []byte("not a seal"), 3, 0, ""},
	} {
		cut, why := SealCut(origin, 9, c.msg, c.n)
		if cut != c.cut || (c.whyHas == "") != (why == "") || !strings.Contains(why, c.whyHas) {
			t.Errorf("%s: cut %d (%q), want %d (%q)", c.name, cut, why, c.cut, c.whyHas)
		}
	}
}
