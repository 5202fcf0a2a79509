package audit

import (
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"golang.org/x/mod/sumdb/note"

	"github.com/onceflight/onceflight/internal/trustlog"
	"github.com/onceflight/onceflight/schemas"
	"github.com/onceflight/onceflight/trust"
)

// sealJournal renumbers recs from offset 0 and puts a seal signed by s
// after each transaction: txs are the transactions' sizes in records,
// chained as the executor chains them within epoch 1. Records after the
// last transaction get no seal.
func sealJournal(t *testing.T, s note.Signer, recs []*kgo.Record, txs ...int) []*kgo.Record {
	t.Helper()
	return sealJournalAfter(t, s, nil, recs, txs...)
}

// sealJournalAfter is sealJournal with the first seal naming prev.
func sealJournalAfter(t *testing.T, s note.Signer, prev []byte, recs []*kgo.Record, txs ...int) []*kgo.Record {
	t.Helper()
	var out []*kgo.Record
	origin := trust.Origin("onceflight/"+tops.Journal, recs[0].Partition)
	add := func(r *kgo.Record) {
		r.Offset = int64(len(out))
		out = append(out, r)
	}
	i := 0
	for _, n := range txs {
		var hs [][]byte
		for _, r := range recs[i : i+n] {
			add(r)
			hs = append(hs, trust.RecordLeafHash(r))
		}
		i += n
		msg, err := trust.Seal{Origin: origin, Epoch: 1, Prev: prev, Records: n, Digest: trust.DigestLeaves(hs), Time: time.Now()}.Sign(s)
		if err != nil {
			t.Fatal(err)
		}
		prev = trust.SealHash(msg)
		add(&kgo.Record{Topic: tops.Journal, Partition: recs[0].Partition, Key: []byte("onceflight.seal"), Value: msg,
			Headers: []kgo.RecordHeader{{Key: schemas.HeaderKind, Value: []byte(schemas.KindSeal)}, {Key: schemas.HeaderEpoch, Value: []byte(strconv.Itoa(1))}}})
	}
	for _, r := range recs[i:] {
		add(r)
	}
	return out
}

// signerTrusted is a new executor key: its signer, and a trusted-keys
// file of it alone.
func signerTrusted(t *testing.T, name string) (note.Signer, *trust.TrustedKeys) {
	t.Helper()
	skey, vkey, err := trustlog.GenerateKey(name)
	if err != nil {
		t.Fatal(err)
	}
	signer, err := note.NewSigner(skey)
	if err != nil {
		t.Fatal(err)
	}
	tk, err := trust.ParseTrustedKeys("trusted-keys", []byte(vkey+"\n"))
	if err != nil {
		t.Fatal(err)
	}
	return signer, tk
}

func checkNamed(rep Report, name string) (CheckResult, bool) {
	for _, c := range rep.Checks {
		if c.Name == name {
			return c, true
		}
	}
	return CheckResult{}, false
}

// With trusted keys, the audit fails on a journal record no trusted seal
// covers — one appended with a correct hash chain by a writer without an
// executor key — and names it; a journal sealed throughout passes; a
// seal by an unknown key covers nothing; without keys the check is left
// out.
func TestJournalSigned(t *testing.T) {
	signer, tk := signerTrusted(t, "executor-a")
	mallory, _ := signerTrusted(t, "mallory")

	// base's journal: marker, k1 in_progress, k1 succeeded, k2
	// in_progress, k2 succeeded, written as four transactions.
	in := base(t)
	in.Trusted = tk
	in.Journal = sealJournal(t, signer, in.Journal, 1, 1, 2, 1)
	linkOutcomes(t, &in)
	rep := Check(in)
	if c, ok := checkNamed(rep, CheckJournalSigned); !ok || !c.OK || !rep.OK() {
		t.Fatalf("sealed journal: %+v", rep.Checks)
	}

	// The last record (k2 succeeded, chained correctly) without a seal:
	// what a writer without a key can append.
	in = base(t)
	in.Trusted = tk
	in.Journal = sealJournal(t, signer, in.Journal, 1, 1, 2)
	rep = Check(in)
	c, _ := checkNamed(rep, CheckJournalSigned)
	if c.OK || c.Count != 1 || len(c.Violations) != 1 || c.Violations[0].Offset != 7 || c.Violations[0].Partition != pe ||
		!strings.Contains(c.Violations[0].Message, "offsets 7..7 are not covered by a trusted executor signature: no seal follows them") {
		t.Fatalf("unsealed tail: %+v", c)
	}
	if h, _ := checkNamed(rep, CheckHashChain); !h.OK {
		t.Fatalf("the forged record's chain is correct, yet: %+v", h)
	}
	if rep.Counts.JournalRecords != 3 {
		t.Fatalf("%d journal records judged, want the 3 signed ones", rep.Counts.JournalRecords)
	}
	var text strings.Builder
	_ = rep.WriteText(&text)
	if !strings.Contains(text.String(), fmt.Sprintf("partition %d offset 7", pe)) {
		t.Fatalf("report does not name the record:\n%s", text.String())
	}

	// A forger's own seal, chained to the last real one, after a forged
	// record: refused for its key.
	in = base(t)
	in.Trusted = tk
	recs := in.Journal
	j := sealJournal(t, signer, recs[:3], 1, 2)
	forged := sealJournalAfter(t, mallory, trust.SealHash(j[len(j)-1].Value), recs[3:4], 1)
	j = append(j, forged...)
	for i, r := range j {
		r.Offset = int64(i)
	}
	rep = Check(in2(in, j))
	c, _ = checkNamed(rep, CheckJournalSigned)
	if c.OK || c.Count != 1 || !strings.Contains(c.Violations[0].Message, "mallory") {
		t.Fatalf("forger's seal: %+v", c)
	}

	// A forged, chained in_progress of k1 after its succeeded record
	// would break once_per_key; unsigned, it is judged only as unsigned,
	// as restore never applies it.
	in = base(t)
	in.Trusted = tk
	in.Journal = sealJournal(t, signer, journal(t, pe,
		marker(1),
		rec("k1", ent, schemas.StatusInProgress, 1, 1, 0),
		rec("k1", ent, schemas.StatusSucceeded, 1, 0, 0),
		rec("k2", ent, schemas.StatusInProgress, 1, 2, 2*time.Second),
		rec("k2", ent, schemas.StatusSucceeded, 1, 0, 2*time.Second),
		rec("k1", ent, schemas.StatusInProgress, 2, 3, 4*time.Second),
	), 1, 1, 2, 1)
	rep = Check(in)
	if c, _ := checkNamed(rep, CheckJournalSigned); c.OK || c.Violations[0].Offset != 9 {
		t.Fatalf("forged in_progress: %+v", c)
	}
	if c, _ := checkNamed(rep, CheckOncePerKey); !c.OK {
		t.Fatalf("an unsigned record was judged by once_per_key: %+v", c)
	}
	in.Trusted = nil
	if c, _ := checkNamed(Check(in), CheckOncePerKey); c.OK {
		t.Fatal("without trusted keys the forged in_progress passes once_per_key: the test shows nothing")
	}

	// Without trusted keys the check is left out.
	in = base(t)
	in.Journal = sealJournal(t, signer, in.Journal, 1, 1, 2)
	if _, ok := checkNamed(Check(in), CheckJournalSigned); ok {
		t.Fatal("journal_signed checked without trusted keys")
	}
}

func in2(in Input, j []*kgo.Record) Input {
	in.Journal = j
	return in
}

// After retention deleted the journal's beginning in the middle of a
// transaction, the records before the first seal left are not judged (a
// note counts them) and the rest is checked.
func TestJournalSignedAfterRetention(t *testing.T) {
	signer, tk := signerTrusted(t, "executor-a")
	in := base(t)
	in.Trusted = tk
	// marker+seal (0,1), k1 ip+seal (2,3), k1 ok, k2 ip, seal (4,5,6), k2 ok, seal (7,8)
	all := sealJournal(t, signer, in.Journal, 1, 1, 2, 1)
	in.Journal = all[5:] // retention deleted offsets 0..4
	in.JournalStart = map[int32]int64{pe: 5}
	rep := Check(in)
	if c, _ := checkNamed(rep, CheckJournalSigned); !c.OK {
		t.Fatalf("after retention: %+v", c)
	}
	if !hasNote(rep, "2 record(s) up to its first transaction seal follow records retention deleted") {
		t.Fatalf("notes: %v", rep.Notes)
	}
	// A record appended after that is still refused.
	last := *all[7]
	last.Offset = 9
	in.Journal = append(append([]*kgo.Record{}, all[5:]...), &last)
	if c, _ := checkNamed(Check(in), CheckJournalSigned); c.OK || c.Violations[0].Offset != 9 {
		t.Fatalf("forged after retention: %+v", c)
	}
}

// TestSealedRecordOnAnotherPartition: with trusted keys a record is
// judged once a seal covers it, from a copy of its decoding; the copy
// keeps that the record is on another partition than its entity's.
func TestSealedRecordOnAnotherPartition(t *testing.T) {
	signer, tk := signerTrusted(t, "executor-a")
	in := base(t)
	in.Trusted = tk
	in.Journal = append(sealJournal(t, signer, in.Journal, 1, 1, 2, 1),
		sealJournal(t, signer, journal(t, otherPartition(pe), marker(1),
			rec("k1", ent, schemas.StatusInProgress, 1, 9, 0),
			rec("k1", ent, schemas.StatusSucceeded, 1, 0, 0)), 3)...)
	rep := Check(in)
	if c, _ := checkNamed(rep, CheckJournalSigned); !c.OK {
		t.Fatalf("journal_signed: %+v", c)
	}
	c, _ := checkNamed(rep, CheckSingleFlight)
	if c.OK || c.Count != 2 || !strings.Contains(c.Violations[0].Message, "written outside its single flight") || c.Violations[0].Partition != otherPartition(pe) {
		t.Fatalf("single_flight: %+v", c)
	}
}
