package trust_test

import (
	"bytes"
	"errors"
	"fmt"
	"time"

	"golang.org/x/mod/sumdb/note"

	"github.com/onceflight/onceflight/internal/trustlog"
	"github.com/onceflight/onceflight/trust"
)

// A customer disputes refund-7. The operator runs `onceflight audit prove`
// and hands over a tlog-proof bundle; whoever holds the executors' public
// keys checks it offline, with no access to Kafka and no trust in whoever
// wrote the journal topic: the checkpoint must be signed by a trusted key
// and the record must be a leaf of that checkpoint's tree.
func ExampleCheckProof() {
	bundle, trustedKeysFile := proveRefund()

	tk, err := trust.ParseTrustedKeys("trusted-keys", trustedKeysFile)
	if err != nil {
		fmt.Println(err)
		return
	}
	cp, leaf, err := trust.CheckProof(bundle, tk)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Printf("signed by %s: %s holds %d records\n", cp.Signer, cp.Origin, cp.Size)
	fmt.Printf("record of %s: %s\n", leaf.Key, leaf.Value)

	// The record altered (another key claimed) and the proof no longer holds.
	p, err := trust.ParseProof(bundle)
	if err != nil {
		fmt.Println(err)
		return
	}
	p.Leaf = bytes.Replace(p.Leaf, []byte("refund-7"), []byte("refund-8"), 1)
	_, _, err = trust.CheckProof(p.Marshal(), tk)
	fmt.Println("altered bundle refused:", errors.Is(err, trust.ErrProof))
	// Output:
	// signed by executor-a: onceflight/onceflight.journal/3 holds 11 records
	// record of order-7: {"idempotency_key":"refund-7","status":"succeeded"}
	// altered bundle refused: true
}

// proveRefund plays the executor's and the operator's part: a journal
// partition of 11 records, its checkpoint signed with the executor's key,
// and the bundle `onceflight audit prove` writes for the record at index 7.
// It returns the bundle and the trusted-keys file that lists the key.
func proveRefund() (bundle, trustedKeysFile []byte) {
	skey, vkey, err := trustlog.GenerateKey("executor-a")
	if err != nil {
		panic(err)
	}
	signer, err := note.NewSigner(skey)
	if err != nil {
		panic(err)
	}
	leaf := func(i int) []byte {
		return trust.LeafData(fmt.Appendf(nil, "order-%d", i),
			fmt.Appendf(nil, `{"idempotency_key":"refund-%d","status":"succeeded"}`, i),
			[]trust.Header{{Key: "onceflight-kind", Value: "record"}})
	}
	l := &trustlog.Log{}
	for i := range 11 {
		l.Append(trust.LeafHash(leaf(i)))
	}
	root, err := l.RootAt(11)
	if err != nil {
		panic(err)
	}
	cp := &trust.Checkpoint{Origin: trust.Origin("onceflight/onceflight.journal", 3), Size: 11, Root: root, Time: time.Now()}
	msg, err := cp.Sign(signer)
	if err != nil {
		panic(err)
	}
	hashes, err := l.Inclusion(7, 11)
	if err != nil {
		panic(err)
	}
	return trust.Proof{Index: 7, Hashes: hashes, Checkpoint: msg, Leaf: leaf(7)}.Marshal(), []byte(vkey + "\n")
}
