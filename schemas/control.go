package schemas

import (
	"bytes"
	"crypto/ed25519"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/onceflight/onceflight/internal/jcs"
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
// the command's own subject), the verdict for resolve, why, who, and until
// when it may be applied.
type Decision struct {
	Key    string `json:"key"`
	As     string `json:"as,omitempty"`
	Reason string `json:"reason"`
	By     string `json:"by"`
	// NotAfter is when the decision expires: an executor refuses it
	// (rejected expired) once NotAfter has passed, so a signed decision
	// captured from the commands topic or a log cannot be replayed later.
	// The fingerprint, and so the signature, covers it. Zero (decisions
	// of builds before round 25): no expiry.
	NotAfter time.Time `json:"not_after,omitzero"`
}

// DecisionValidity is how long the CLI and the console make a decision
// valid by default (its NotAfter), and MaxDecisionValidity the longest
// they accept: within dedupe_retention's default (7 days) and far within
// key_memory's (90 days), while the decision's own record (or, past
// retention, its stub: key_expired) answers a copy of it. An actions file
// with key_memory under 7 days shortens that: see the closing note of
// round 25.
const (
	DecisionValidity    = 24 * time.Hour
	MaxDecisionValidity = 7 * 24 * time.Hour
)

// Control key types. An HMAC key is a secret every verifier shares, so
// every verifier can also sign; an Ed25519 key's verifiers hold only its
// public half (docs/trust.md#threat-model).
const (
	KeyHMAC    = "hmac-sha256"
	KeyEd25519 = "ed25519"
)

// ControlKey is one key of a control key file: an HMAC secret (Type ""
// or KeyHMAC) or an Ed25519 key (KeyEd25519) whose Private half is only in
// the operators' file.
type ControlKey struct {
	ID      string    `json:"id"`
	Type    string    `json:"type,omitempty"`
	Secret  []byte    `json:"secret,omitempty"`  // HMAC; base64 in the file
	Public  []byte    `json:"public,omitempty"`  // Ed25519 public key
	Private []byte    `json:"private,omitempty"` // Ed25519 seed (32 bytes)
	Created time.Time `json:"created,omitzero"`
}

func (k ControlKey) isEd25519() bool { return k.Type == KeyEd25519 }

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
// A file holding an Ed25519 private key that its group or others may read
// is refused: whoever reads it can sign decisions.
func LoadControlKeys(path string) (*ControlKeys, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("control key file: %w", err)
	}
	st, err := os.Stat(path)
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
		case k.Type != "" && k.Type != KeyHMAC && k.Type != KeyEd25519:
			return nil, fmt.Errorf("control key file %s: key %q has type %q, want %s or %s", path, k.ID, k.Type, KeyEd25519, KeyHMAC)
		case !k.isEd25519() && len(k.Secret) < minControlSecret:
			return nil, fmt.Errorf("control key file %s: key %q is %d bytes, want at least %d", path, k.ID, len(k.Secret), minControlSecret)
		case k.isEd25519() && len(k.Secret) > 0:
			return nil, fmt.Errorf("control key file %s: Ed25519 key %q has a secret: an Ed25519 key has public and private, an HMAC key a secret", path, k.ID)
		case k.isEd25519() && len(k.Public) != ed25519.PublicKeySize:
			return nil, fmt.Errorf("control key file %s: Ed25519 key %q: public is %d bytes, want %d", path, k.ID, len(k.Public), ed25519.PublicKeySize)
		case k.isEd25519() && len(k.Private) != 0 && len(k.Private) != ed25519.SeedSize:
			return nil, fmt.Errorf("control key file %s: Ed25519 key %q: private is %d bytes, want %d", path, k.ID, len(k.Private), ed25519.SeedSize)
		case k.isEd25519() && len(k.Private) != 0 && !ed25519.NewKeyFromSeed(k.Private).Public().(ed25519.PublicKey).Equal(ed25519.PublicKey(k.Public)):
			return nil, fmt.Errorf("control key file %s: Ed25519 key %q: private does not belong to public", path, k.ID)
		case k.isEd25519() && len(k.Private) != 0 && st.Mode().Perm()&0o077 != 0:
			return nil, fmt.Errorf("control key file %s holds the private key %q and is accessible to group or others (mode %04o); run chmod 600 %s, and give verifiers the public copy (onceflight keygen writes it)", path, k.ID, st.Mode().Perm(), path)
		}
		seen[k.ID] = true
	}
	return &ks, nil
}

// NewOperatorKey makes an Ed25519 operator key (private half included).
func NewOperatorKey(id string) (ControlKey, error) {
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return ControlKey{}, fmt.Errorf("operator key: %w", err)
	}
	return ControlKey{ID: id, Type: KeyEd25519, Public: pub, Private: priv.Seed(), Created: time.Now().UTC().Truncate(time.Second)}, nil
}

// Public is the verifiers' copy of ks: its Ed25519 keys without their
// private halves. HMAC keys are left out (their secret is their only
// form); n says how many.
func (ks *ControlKeys) Public() (pub *ControlKeys, hmacLeftOut int) {
	pub = &ControlKeys{}
	for _, k := range ks.Keys {
		if !k.isEd25519() {
			hmacLeftOut++
			continue
		}
		k.Private = nil
		pub.Keys = append(pub.Keys, k)
	}
	return pub, hmacLeftOut
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
	if k.isEd25519() {
		if len(k.Private) == 0 {
			return fmt.Errorf("sign control command: key %q is public only (a verifier's copy); sign with the operator's key file, which holds its private half", k.ID)
		}
		c.ControlKeyID = k.ID
		c.ControlSig = "ed25519:" + base64.StdEncoding.EncodeToString(ed25519.Sign(ed25519.NewKeyFromSeed(k.Private), controlContent(k, c)))
		return nil
	}
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
	if k.isEd25519() {
		// Only an Ed25519 signature counts for an Ed25519 key: an HMAC
		// made with its public half (all a verifier holds) is a forgery.
		b64, ok := strings.CutPrefix(c.ControlSig, "ed25519:")
		sig, err := base64.StdEncoding.DecodeString(b64)
		if !ok || err != nil || !ed25519.Verify(ed25519.PublicKey(k.Public), controlContent(k, c), sig) {
			return ErrBadSignature
		}
		return nil
	}
	want := controlMAC(k, c)
	if !hmac.Equal([]byte(want), []byte(c.ControlSig)) {
		return ErrBadSignature
	}
	return nil
}

// controlContent is what a control signature covers: a domain tag, the
// key id, and the command's id, source, idempotency key and fingerprint,
// each framed with its length.
func controlContent(k ControlKey, c *Command) []byte {
	var b bytes.Buffer
	jcs.WriteFramed(&b, []byte("onceflight/control-sig/v1"))
	for _, s := range []string{k.ID, c.ID, c.Source, c.IdempotencyKey, c.Fingerprint} {
		jcs.WriteFramed(&b, []byte(s))
	}
	return b.Bytes()
}

// controlMAC is "hmac-sha256:" + hex of HMAC-SHA256 over controlContent.
func controlMAC(k ControlKey, c *Command) string {
	m := hmac.New(sha256.New, k.Secret)
	m.Write(controlContent(k, c))
	return "hmac-sha256:" + hex.EncodeToString(m.Sum(nil))
}
