package schemas

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestControlSignature(t *testing.T) {
	k1, err := NewControlKey("k1")
	if err != nil {
		t.Fatal(err)
	}
	k2, _ := NewControlKey("k2")
	ks := &ControlKeys{Keys: []ControlKey{k1}}
	path := filepath.Join(t.TempDir(), "keys.json")
	if err := os.WriteFile(path, ks.Encode(), 0o600); err != nil {
		t.Fatal(err)
	}
	loaded, err := LoadControlKeys(path)
	if err != nil {
		t.Fatal(err)
	}
	c := Command{ID: "1", Source: "cli", Type: TypeResolve, Subject: "order-1", IdempotencyKey: "resolve/k/1",
		Data: []byte(`{"key":"k","as":"failed","reason":"checked","by":"ann"}`)}
	if err := loaded.SignControl(&c); err != nil {
		t.Fatal(err)
	}
	if err := ks.VerifyControl(&c); err != nil {
		t.Fatalf("signed command refused: %v", err)
	}
	// Every signed part matters.
	for name, mut := range map[string]func(*Command){
		"subject": func(c *Command) { c.Fingerprint, _ = Fingerprint(c.Type, "order-2", c.Data) },
		"data": func(c *Command) {
			c.Fingerprint, _ = Fingerprint(c.Type, c.Subject, []byte(`{"key":"k","as":"succeeded"}`))
		},
		"key": func(c *Command) { c.IdempotencyKey = "resolve/k/2" },
		"sig": func(c *Command) { c.ControlSig = "hmac-sha256:00" },
	} {
		m := c
		mut(&m)
		if err := ks.VerifyControl(&m); !errors.Is(err, ErrBadSignature) {
			t.Errorf("%s changed: %v, want ErrBadSignature", name, err)
		}
	}
	u := c
	u.ControlKeyID, u.ControlSig = "", ""
	if err := ks.VerifyControl(&u); !errors.Is(err, ErrNotSigned) {
		t.Errorf("unsigned: %v", err)
	}
	other := &ControlKeys{Keys: []ControlKey{k2}}
	if err := other.VerifyControl(&c); !errors.Is(err, ErrUnknownKey) {
		t.Errorf("unknown key: %v", err)
	}
	forged := c
	k2.ID = "k1" // same id, other secret
	if err := (&ControlKeys{Keys: []ControlKey{k2}}).SignControl(&forged); err != nil {
		t.Fatal(err)
	}
	if err := ks.VerifyControl(&forged); !errors.Is(err, ErrBadSignature) {
		t.Errorf("wrong secret: %v", err)
	}
	var none *ControlKeys
	if err := none.VerifyControl(&c); !errors.Is(err, ErrNoControlKeys) {
		t.Errorf("no keys: %v", err)
	}
}

// Ed25519 operator keys: operators sign with the private file, verifiers
// hold the public copy only, and nothing made from the public copy
// passes — neither a signature (it cannot sign) nor an HMAC keyed with the
// public key, which is the "valid-looking HMAC" a verifier could make.
func TestControlEd25519(t *testing.T) {
	k, err := NewOperatorKey("ops-1")
	if err != nil {
		t.Fatal(err)
	}
	ops := &ControlKeys{Keys: []ControlKey{k}}
	pub, left := ops.Public()
	if left != 0 || len(pub.Keys) != 1 || pub.Keys[0].Private != nil {
		t.Fatalf("public copy %+v", pub)
	}
	dir := t.TempDir()
	opsPath, pubPath := filepath.Join(dir, "ops.json"), filepath.Join(dir, "ops.pub.json")
	if err := os.WriteFile(opsPath, ops.Encode(), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(pubPath, pub.Encode(), 0o644); err != nil {
		t.Fatal(err)
	}
	signer, err := LoadControlKeys(opsPath)
	if err != nil {
		t.Fatal(err)
	}
	verifier, err := LoadControlKeys(pubPath)
	if err != nil {
		t.Fatal(err)
	}
	c := Command{ID: "1", Source: "cli", Type: TypeRelease, Subject: "order-1", IdempotencyKey: "release/k/1",
		Data: []byte(`{"key":"k","reason":"redo","by":"ann"}`)}
	if err := signer.SignControl(&c); err != nil {
		t.Fatal(err)
	}
	if err := verifier.VerifyControl(&c); err != nil {
		t.Fatalf("verifier refuses the operator's decision: %v", err)
	}
	// The verifier's copy cannot sign.
	v := c
	if err := verifier.SignControl(&v); err == nil || !strings.Contains(err.Error(), "public only") {
		t.Fatalf("verifier signed: %v", err)
	}
	// A forged release: an HMAC keyed with what the verifier holds.
	forged := c
	forged.IdempotencyKey = "release/k/2"
	forged.ControlSig = controlMAC(ControlKey{ID: "ops-1", Secret: k.Public}, &forged)
	if err := verifier.VerifyControl(&forged); !errors.Is(err, ErrBadSignature) {
		t.Fatalf("HMAC with the public key: %v", err)
	}
	// Another signed command's signature moved onto this one.
	moved := forged
	moved.ControlSig = c.ControlSig
	if err := verifier.VerifyControl(&moved); !errors.Is(err, ErrBadSignature) {
		t.Fatalf("moved signature: %v", err)
	}

	// Bad files: named, with the problem.
	if err := os.Chmod(opsPath, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadControlKeys(opsPath); err == nil || !strings.Contains(err.Error(), opsPath) || !strings.Contains(err.Error(), "chmod 600") {
		t.Fatalf("private key file 0644: %v", err)
	}
	other, _ := NewOperatorKey("ops-1")
	for name, bad := range map[string]ControlKey{
		"wrong private": {ID: "x", Type: KeyEd25519, Public: k.Public, Private: other.Private},
		"short public":  {ID: "x", Type: KeyEd25519, Public: k.Public[:5]},
		"with a secret": {ID: "x", Type: KeyEd25519, Public: k.Public, Secret: make([]byte, 32)},
		"unknown type":  {ID: "x", Type: "rsa", Secret: make([]byte, 32)},
	} {
		p := filepath.Join(dir, "bad.json")
		_ = os.WriteFile(p, (&ControlKeys{Keys: []ControlKey{bad}}).Encode(), 0o600)
		if _, err := LoadControlKeys(p); err == nil || !strings.Contains(err.Error(), p) {
			t.Errorf("%s: %v", name, err)
		}
	}
}

// TestDecisionNotAfterSigned: a decision's not_after is covered by its
// signature (through the fingerprint), so a copy cannot be given a later
// one or lose it; without one, its data is what earlier builds wrote.
func TestDecisionNotAfterSigned(t *testing.T) {
	k, err := NewOperatorKey("ops-1")
	if err != nil {
		t.Fatal(err)
	}
	ks := &ControlKeys{Keys: []ControlKey{k}}
	at := time.Date(2026, 12, 8, 10, 0, 0, 0, time.UTC)
	data, _ := json.Marshal(Decision{Key: "k", Reason: "checked", By: "ann", NotAfter: at})
	if want := `{"key":"k","reason":"checked","by":"ann","not_after":"2026-12-08T10:00:00Z"}`; string(data) != want {
		t.Fatalf("decision data %s, want %s", data, want)
	}
	if old, _ := json.Marshal(Decision{Key: "k", Reason: "checked", By: "ann"}); string(old) != `{"key":"k","reason":"checked","by":"ann"}` {
		t.Fatalf("decision without not_after: %s", old)
	}
	c := Command{ID: "1", Source: "cli", Type: TypeRelease, Subject: "order-1", IdempotencyKey: "release/k/1", Data: data}
	if err := ks.SignControl(&c); err != nil {
		t.Fatal(err)
	}
	for name, d := range map[string]string{
		"later":   `{"key":"k","reason":"checked","by":"ann","not_after":"2027-12-08T10:00:00Z"}`,
		"removed": `{"key":"k","reason":"checked","by":"ann"}`,
	} {
		forged := c
		forged.Data = json.RawMessage(d)
		if forged.Fingerprint, err = Fingerprint(forged.Type, forged.Subject, forged.Data); err != nil {
			t.Fatal(err)
		}
		if err := ks.VerifyControl(&forged); !errors.Is(err, ErrBadSignature) {
			t.Fatalf("not_after %s: verify = %v, want %v", name, err, ErrBadSignature)
		}
	}
	if err := ks.VerifyControl(&c); err != nil {
		t.Fatal(err)
	}
}
