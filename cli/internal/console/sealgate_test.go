package console

import (
	"cmp"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/onceflight/onceflight/internal/httpauth"
	"github.com/onceflight/onceflight/internal/trustlog"
	"github.com/onceflight/onceflight/internal/wire"
	"github.com/onceflight/onceflight/schemas"
	"github.com/onceflight/onceflight/trust"
)

// journalWriter makes one journal partition's records by hand: executor
// transactions sealed with a key, and records nobody sealed.
type journalWriter struct {
	t      *testing.T
	origin string
	status schemas.Status // of the records it writes; succeeded if empty
	off    int64
	recs   []*kgo.Record
}

func (w *journalWriter) record(key string) *kgo.Record {
	v, err := wire.SealRecord(&schemas.Record{IdempotencyKey: key, Entity: "e", Action: "noop.ping", Status: cmp.Or(w.status, schemas.StatusSucceeded), Attempts: 1})
	if err != nil {
		w.t.Fatal(err)
	}
	return w.add(&kgo.Record{Key: []byte(key), Value: v, Headers: []kgo.RecordHeader{{Key: schemas.HeaderKind, Value: []byte(schemas.KindRecord)}}})
}

func (w *journalWriter) add(r *kgo.Record) *kgo.Record {
	r = &kgo.Record{Key: r.Key, Value: r.Value, Headers: r.Headers, Offset: w.off, Timestamp: time.Now()}
	w.off++
	w.recs = append(w.recs, r)
	return r
}

// txn writes records keys and a seal over them signed by s, of epoch,
// after the seal prev (nil: it starts a chain); bad: the seal's digest
// does not match them.
func (w *journalWriter) txn(s *trustlog.Signer, epoch int64, prev *kgo.Record, bad bool, keys ...string) *kgo.Record {
	var hs [][]byte
	for _, k := range keys {
		hs = append(hs, trust.RecordLeafHash(w.record(k)))
	}
	if bad {
		hs[0] = trust.RecordLeafHash(w.recs[0])
	}
	seal := trust.Seal{Origin: w.origin, Epoch: epoch, Records: len(keys), Digest: trust.DigestLeaves(hs), Time: time.Now()}
	if prev != nil {
		seal.Prev = trust.SealHash(prev.Value)
	}
	msg, err := seal.Sign(s)
	if err != nil {
		w.t.Fatal(err)
	}
	return w.add(&kgo.Record{Key: []byte("onceflight.seal"), Value: msg, Headers: []kgo.RecordHeader{{Key: schemas.HeaderKind, Value: []byte(schemas.KindSeal)}}})
}

func testSigner(t testing.TB, name string) *trustlog.Signer {
	t.Helper()
	skey, _, err := trustlog.GenerateKey(name)
	if err != nil {
		t.Fatal(err)
	}
	s, err := trustlog.NewSigner(skey)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// trusting is a trusted-keys file of the verifier keys vkeys.
func trusting(t testing.TB, vkeys ...string) *trust.TrustedKeys {
	t.Helper()
	tk, err := trust.ParseTrustedKeys("trusted-keys", []byte(strings.Join(vkeys, "\n")+"\n"))
	if err != nil {
		t.Fatal(err)
	}
	return tk
}

// TestPartSealsJudgesEachRecord: what the console's seal checking of a
// partition believes and refuses, record by record — forged records
// between transactions, a chain signed by an untrusted key, a copy of an
// old transaction appended after it, a seal that does not match its
// records — read in one fetch or one record per fetch.
func TestPartSealsJudgesEachRecord(t *testing.T) {
	exec, stranger := testSigner(t, "executor-a"), testSigner(t, "intruder")
	tk := trusting(t, exec.VerifierKey())
	w := &journalWriter{t: t, origin: "onceflight/onceflight.journal/0"}
	s1 := w.txn(exec, 1, nil, false, "a", "b")   // 0 1 2
	w.record("forged-1")                         // 3
	s2 := w.txn(exec, 1, s1, false, "c")         // 4 5
	w.txn(stranger, 2, nil, false, "intruder")   // 6 7
	s3 := w.txn(exec, 1, s2, false, "d")         // 8 9
	w.txn(stranger, 3, nil, false, "intruder-2") // 10 11
	w.add(w.recs[4])                             // 12: a copy of transaction 4..5
	w.add(w.recs[5])                             // 13
	w.txn(exec, 1, s3, true, "e")                // 14 15: the digest is not theirs
	w.txn(exec, 1, s3, false, "f")               // 16 17
	w.txn(exec, 4, nil, false, "new-owner")      // 18 19
	w.record("forged-tail")                      // 20
	wantOut := []int64{0, 1, 2, 4, 5, 8, 9, 16, 17, 18, 19}
	wantRefused := []int64{3, 6, 7, 10, 11, 12, 13, 14, 15}

	for _, perFetch := range []int{len(w.recs), 1, 3} {
		t.Run(fmt.Sprintf("%d records per fetch", perFetch), func(t *testing.T) {
			ps := newPartSeals(w.origin, tk, 0)
			var out, refused []int64
			var resume int64
			for i := 0; i < len(w.recs); i += perFetch {
				end := min(i+perFetch, len(w.recs))
				for _, r := range w.recs[i:end] {
					ps.add(r)
				}
				o, rf, res := ps.flush(w.recs[end-1].Offset + 1)
				for _, r := range o {
					out = append(out, r.Offset)
				}
				for _, r := range rf {
					refused = append(refused, r.rec.Offset)
				}
				resume = res
			}
			slices.Sort(refused)
			if !slices.Equal(out, wantOut) {
				t.Errorf("believed %v, want %v", out, wantOut)
			}
			if !slices.Equal(refused, wantRefused) {
				t.Errorf("refused %v, want %v", refused, wantRefused)
			}
			if resume != 20 || len(ps.buf) != 1 {
				t.Errorf("resume at %d with %d records waiting, want 20 and the forged tail", resume, len(ps.buf))
			}
		})
	}
}

// TestSplitTransactionPendingThenApplied: a transaction whose seal comes
// in the next fetch shows its records as pending UNSIGNED for that moment,
// then as the execution's state with no UNSIGNED mark left.
func TestSplitTransactionPendingThenApplied(t *testing.T) {
	exec, p := signedIndex(t)
	w := &journalWriter{t: t, origin: "onceflight/onceflight.journal/0"}
	w.txn(exec, 1, nil, false, "k")
	ps := newPartSeals(w.origin, p.trusted, 0)
	fetch := func(recs ...*kgo.Record) int64 { return indexFetch(t, p, ps, recs...) }
	if resume := fetch(w.recs[0]); resume != 0 {
		t.Fatalf("resume at %d, want 0: the record waits for its seal", resume)
	}
	v, err := p.Get("e", "k")
	if err != nil || len(v.Unsigned) != 1 || !v.Unsigned[0].Pending || v.Exec.Journal {
		t.Fatalf("before the seal: %+v %v", v, err)
	}
	if resume := fetch(w.recs[1]); resume != 2 {
		t.Fatalf("resume at %d, want 2", resume)
	}
	v, err = p.Get("e", "k")
	if err != nil || len(v.Unsigned) != 0 || v.Exec.Status != schemas.StatusSucceeded {
		t.Fatalf("after the seal: %+v %v", v, err)
	}
}

// signedIndex is an executor key and an index (never run) that trusts it.
func signedIndex(t *testing.T) (*trustlog.Signer, *Projection) {
	t.Helper()
	exec := testSigner(t, "executor-a")
	p, err := OpenProjection(t.TempDir(), []string{"127.0.0.1:1"}, WithTrustedKeys(trusting(t, exec.VerifierKey()), ""))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close() })
	return exec, p
}

// indexFetch passes recs to ps and writes what they settle into p's
// index, as one fetch of the partition does; it returns the position
// stored.
func indexFetch(t *testing.T, p *Projection, ps *partSeals, recs ...*kgo.Record) int64 {
	t.Helper()
	for _, r := range recs {
		ps.add(r)
	}
	b := p.db.NewIndexedBatch()
	defer b.Close()
	_, resume, err := p.applySealed(b, ps, recs[len(recs)-1].Offset+1)
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Commit(nil); err != nil {
		t.Fatal(err)
	}
	return resume
}

// TestNeedsADecisionFlagsUnsignedKeys: an execution whose signed state
// is unresolved stays in Needs a decision, but when its key also has a
// record nobody trusted signed, its row says the console takes no
// decision on it.
func TestNeedsADecisionFlagsUnsignedKeys(t *testing.T) {
	exec, p := signedIndex(t)
	w := &journalWriter{t: t, origin: "onceflight/onceflight.journal/0", status: schemas.StatusUnresolved}
	w.txn(exec, 1, nil, false, "clean", "tampered")
	w.status = schemas.StatusSucceeded
	w.record("tampered") // forged: claims it succeeded
	indexFetch(t, p, newPartSeals(w.origin, p.trusted, 0), w.recs...)
	auth, err := httpauth.New()
	if err != nil {
		t.Fatal(err)
	}
	s, err := New(Config{Projection: p, Auth: auth, LocalUser: "tester"})
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(s)
	defer hs.Close()
	code, body := get(t, hs.URL+"/decide", "")
	if code != http.StatusOK {
		t.Fatalf("/decide: %d\n%s", code, body)
	}
	rowOf := func(key string) string {
		i := strings.Index(body, ">"+key+"</a>")
		if i < 0 {
			t.Fatalf("/decide lacks %s:\n%s", key, body)
		}
		end := strings.Index(body[i:], "</tr>")
		return body[i : i+end]
	}
	if r := rowOf("tampered"); !strings.Contains(r, "UNSIGNED journal records on this key") {
		t.Errorf("the tampered key's row does not say so: %s", r)
	}
	if r := rowOf("clean"); strings.Contains(r, "UNSIGNED") {
		t.Errorf("the clean key's row is flagged: %s", r)
	}
}

// TestCopiedTransactionRefusedAfterRestart: copies of earlier
// transactions, appended after what the console had read, are refused
// whether the console restarted in between or not: after a restart it
// chains to the last seal it trusted before (stored with its position), as
// a console that kept running does. The real transactions after them, one
// that goes on with that chain and a new owner's, are believed either way.
func TestCopiedTransactionRefusedAfterRestart(t *testing.T) {
	for _, restart := range []bool{false, true} {
		t.Run(fmt.Sprintf("restart=%v", restart), func(t *testing.T) {
			p, ps, w, exec, s2 := readTwoTransactions(t, restart)
			for _, r := range slices.Clone(w.recs) {
				w.add(r) // 4..7: both transactions again, seals and all
			}
			w.txn(exec, 1, s2, false, "c")          // 8 9
			w.txn(exec, 2, nil, false, "new-owner") // 10 11
			if resume := indexFetch(t, p, ps, w.recs[4:]...); resume != 12 {
				t.Fatalf("resume at %d, want 12", resume)
			}
			// Seals are never kept aside: no execution to show them on.
			if got, want := unsignedOffsets(t, p), []int64{4, 6}; !slices.Equal(got, want) {
				t.Errorf("UNSIGNED %v, want the copied records %v", got, want)
			}
			for key, off := range map[string]int64{"a": 0, "b": 2, "c": 8, "new-owner": 10} {
				v, err := p.Get("e", key)
				if err != nil || !v.Exec.Journal || v.Exec.Offset != off {
					t.Errorf("%s: %+v %v, want its state from offset %d", key, v, err, off)
				}
			}
		})
	}
}

// TestRestartAfterRetentionGap: when retention deleted what the console
// had not read, the chain it stored breaks at no fault of the journal: the
// first transaction after the gap is believed, whatever seal it names.
func TestRestartAfterRetentionGap(t *testing.T) {
	p, ps, w, exec, s2 := readTwoTransactions(t, true)
	s3 := w.txn(exec, 1, s2, false, "c") // 4 5: deleted before the console read them
	w.txn(exec, 1, s3, false, "d")       // 6 7
	indexFetch(t, p, ps, w.recs[6:]...)
	if got := unsignedOffsets(t, p); len(got) != 0 {
		t.Errorf("UNSIGNED %v, want none", got)
	}
	if v, err := p.Get("e", "d"); err != nil || !v.Exec.Journal || v.Exec.Offset != 6 {
		t.Errorf("d: %+v %v, want its state from offset 6", v, err)
	}
}

// TestUntrustedRunForgetsTrustedSeals: a console run without trusted keys
// moves the journal positions without checking seals, so it forgets the
// last trusted seals: the next run with trusted keys goes on from the
// position it finds with a fresh gate, and believes the executor's chain
// that went on meanwhile, rather than refusing it as not following the
// seal stored before.
func TestUntrustedRunForgetsTrustedSeals(t *testing.T) {
	p, _, w, exec, s2 := readTwoTransactions(t, false)
	s3 := w.txn(exec, 1, s2, false, "c") // 4 5: read by the run without keys
	w.txn(exec, 1, s3, false, "d")       // 6 7
	if err := p.dropTrustedSeals(); err != nil {
		t.Fatal(err)
	}
	ps, err := p.openPartSeals(0, 6)
	if err != nil {
		t.Fatal(err)
	}
	indexFetch(t, p, ps, w.recs[6:]...)
	if got := unsignedOffsets(t, p); len(got) != 0 {
		t.Errorf("UNSIGNED %v, want none", got)
	}
	if v, err := p.Get("e", "d"); err != nil || !v.Exec.Journal || v.Exec.Offset != 6 {
		t.Errorf("d: %+v %v, want its state from offset 6", v, err)
	}
}

// readTwoTransactions indexes two chained transactions of an executor's
// (offsets 0..3, keys a and b) and, with restart, closes the index and
// opens it again as a console's restart does. It returns the index, the
// partition's seal checking to go on with, the journal, the executor's
// key and the second transaction's seal.
func readTwoTransactions(t *testing.T, restart bool) (*Projection, *partSeals, *journalWriter, *trustlog.Signer, *kgo.Record) {
	t.Helper()
	exec := testSigner(t, "executor-a")
	tk := trusting(t, exec.VerifierKey())
	dir := t.TempDir()
	p, closeIndex := openSignedIndex(t, dir, tk)
	w := &journalWriter{t: t, origin: "onceflight/onceflight.journal/0"}
	s1 := w.txn(exec, 1, nil, false, "a") // 0 1
	s2 := w.txn(exec, 1, s1, false, "b")  // 2 3
	ps, err := p.openPartSeals(0, 0)
	if err != nil {
		t.Fatal(err)
	}
	resume := indexFetch(t, p, ps, w.recs...)
	if resume != 4 {
		t.Fatalf("resume at %d, want 4", resume)
	}
	if restart {
		closeIndex()
		p, _ = openSignedIndex(t, dir, tk)
		if ps, err = p.openPartSeals(0, resume); err != nil {
			t.Fatal(err)
		}
	}
	return p, ps, w, exec, s2
}

// openSignedIndex opens the index in dir (never run), trusting tk, and
// returns it with the function that closes it (at the end of the test if
// not called before).
func openSignedIndex(t *testing.T, dir string, tk *trust.TrustedKeys) (*Projection, func()) {
	t.Helper()
	p, err := OpenProjection(dir, []string{"127.0.0.1:1"}, WithTrustedKeys(tk, ""))
	if err != nil {
		t.Fatal(err)
	}
	closed := false
	closeIt := func() {
		if !closed {
			closed = true
			if err := p.Close(); err != nil {
				t.Error(err)
			}
		}
	}
	t.Cleanup(closeIt)
	return p, closeIt
}

// unsignedOffsets are the offsets of the records p keeps aside as
// refused (pending ones left out), in order.
func unsignedOffsets(t *testing.T, p *Projection) []int64 {
	t.Helper()
	var out []int64
	err := p.scan([]byte{pfxUnsigned}, func(_, v []byte) (bool, error) {
		var u UnsignedRecord
		if err := jsonUnmarshal(v, &u); err != nil {
			return false, err
		}
		if !u.Pending {
			out = append(out, u.Offset)
		}
		return true, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(out)
	return out
}
