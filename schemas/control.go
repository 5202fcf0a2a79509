package schemas

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"time"
)

// Control command types (docs/guarantees.md): operator decisions and reconcile
// requests travel on the commands topic, keyed and ordered with their
// entity, and act only on records of their own subject.
const (
	TypeResolve   = "onceflight.resolve"
	TypeApprove   = "onceflight.approve"
	TypeRelease   = "onceflight.release"
	TypeReconcile = "onceflight.reconcile"
)

// IsDecision reports whether typ is an operator decision, which must be
// signed: resolve, approve, release. A reconcile request only asks the
// connector to confirm, so it needs no signature.
func IsDecision(typ string) bool {
	return typ == TypeResolve || typ == TypeApprove || typ == TypeRelease
}

// Decision is the data of an operator decision: the key it acts on (in
// the command's own subject), the verdict for resolve, why, and who.
type Decision struct {
	Key    string `json:"key"`
	As     string `json:"as,omitempty"`
	Reason string `json:"reason"`
	By     string `json:"by"`
}

// ControlKey is one HMAC key of a control key file.
type ControlKey struct {
	ID      string    `json:"id"`
	Secret  []byte    `json:"secret"` // base64 in the file
	Created time.Time `json:"created,omitzero"`
}

// ControlKeys is a control key file: several keys by id, so a key can be
// rotated (add a key, move the signers to it, then drop the old one).
// Signers use the last key; verifiers accept any.
type ControlKeys struct {
	Keys []ControlKey `json:"keys"`
}

// minControlSecret is the shortest secret accepted: HMAC-SHA256 keys
// shorter than the hash add no strength and suggest a typo.
const minControlSecret = 32

// LoadControlKeys reads a control key file (written by `onceflight keygen`).
func LoadControlKeys(path string) (*ControlKeys, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("control key file: %w", err)
	}
	var ks ControlKeys
	if err := json.Unmarshal(b, &ks); err != nil {
		return nil, fmt.Errorf("control key file %s: %w", path, err)
	}
	if len(ks.Keys) == 0 {
		return nil, fmt.Errorf("control key file %s holds no key", path)
	}
	seen := map[string]bool{}
	for _, k := range ks.Keys {
		switch {
		case k.ID == "":
			return nil, fmt.Errorf("control key file %s: a key has no id", path)
		case seen[k.ID]:
			return nil, fmt.Errorf("control key file %s: key id %q listed twice", path, k.ID)
		case len(k.Secret) < minControlSecret:
			return nil, fmt.Errorf("control key file %s: key %q is %d bytes, want at least %d", path, k.ID, len(k.Secret), minControlSecret)
		}
		seen[k.ID] = true
	}
	return &ks, nil
}

// NewControlKey makes a key with a random 32-byte secret.
func NewControlKey(id string) (ControlKey, error) {
	k := ControlKey{ID: id, Secret: make([]byte, 32), Created: time.Now().UTC().Truncate(time.Second)}
	if _, err := rand.Read(k.Secret); err != nil {
		return ControlKey{}, fmt.Errorf("control key: %w", err)
	}
	return k, nil
}

// Encode is the file form of ks.
func (ks *ControlKeys) Encode() []byte {
	b, _ := json.MarshalIndent(ks, "", "  ")
	return append(b, '\n')
}

func (ks *ControlKeys) find(id string) (ControlKey, bool) {
	for _, k := range ks.Keys {
		if k.ID == id {
			return k, true
		}
	}
	return ControlKey{}, false
}

// SignControl signs c with the last key of ks: it sets ControlKeyID and
// ControlSig. c's Fingerprint is computed from its type, subject and data.
func (ks *ControlKeys) SignControl(c *Command) error {
	if ks == nil || len(ks.Keys) == 0 {
		return errors.New("sign control command: no control key")
	}
	fp, err := Fingerprint(c.Type, c.Subject, c.Data)
	if err != nil {
		return fmt.Errorf("sign control command: %w", err)
	}
	c.Fingerprint = fp
	k := ks.Keys[len(ks.Keys)-1]
	c.ControlKeyID = k.ID
	c.ControlSig = controlMAC(k, c)
	return nil
}

// ErrNotSigned and friends say why VerifyControl refused a command.
var (
	ErrNotSigned     = errors.New("control command is not signed")
	ErrUnknownKey    = errors.New("control command is signed with an unknown key")
	ErrBadSignature  = errors.New("control command signature does not match")
	ErrNoControlKeys = errors.New("no control key is configured")
)

// VerifyControl checks a decoded command's signature against ks. The
// signature covers the key id, id, source, idempotency key and fingerprint
// (itself over type, subject and canonical data), so a signed decision
// cannot be moved to another entity, key or verdict, and a copy of it is
// a repeat of the same command (answered from its record).
func (ks *ControlKeys) VerifyControl(c *Command) error {
	if ks == nil || len(ks.Keys) == 0 {
		return ErrNoControlKeys
	}
	if c.ControlKeyID == "" || c.ControlSig == "" {
		return ErrNotSigned
	}
	k, ok := ks.find(c.ControlKeyID)
	if !ok {
		return fmt.Errorf("%w %q", ErrUnknownKey, c.ControlKeyID)
	}
	want := controlMAC(k, c)
	if !hmac.Equal([]byte(want), []byte(c.ControlSig)) {
		return ErrBadSignature
	}
	return nil
}

// controlMAC is "hmac-sha256:" + hex of HMAC-SHA256 over the framed
// canonical content of c.
func controlMAC(k ControlKey, c *Command) string {
	m := hmac.New(sha256.New, k.Secret)
	writeFramed(m, []byte("onceflight/control-sig/v1"))
	for _, s := range []string{k.ID, c.ID, c.Source, c.IdempotencyKey, c.Fingerprint} {
		writeFramed(m, []byte(s))
	}
	return "hmac-sha256:" + hex.EncodeToString(m.Sum(nil))
}

// SecretString is the base64 form of a secret, for messages and tests.
func (k ControlKey) SecretString() string { return base64.StdEncoding.EncodeToString(k.Secret) }
