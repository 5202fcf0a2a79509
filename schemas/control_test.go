package schemas

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
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
