package trustlog

import (
	"crypto/ed25519"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strings"

	"golang.org/x/mod/sumdb/note"
)

// GenerateKey makes an Ed25519 key pair named name, in the signed-note
// key formats: skey is "PRIVATE+KEY+<name>+<hash>+<base64>", vkey
// "<name>+<hash>+<base64>" (the line a trusted-keys file holds).
func GenerateKey(name string) (skey, vkey string, err error) {
	skey, vkey, err = note.GenerateKey(rand.Reader, name)
	if err != nil {
		return "", "", fmt.Errorf("generate key %q: %w", name, err)
	}
	return skey, vkey, nil
}

// ErrKeyFileMode is returned (wrapped) by LoadSigner for a private key
// file that others than its owner may read or write.
var ErrKeyFileMode = errors.New("private key file is accessible to group or others")

// Signer is a note signer that also knows its verifier key, so an
// executor can check its own earlier checkpoints without a trusted-keys
// file and `keygen` can print the line for one.
type Signer struct {
	note.Signer
	vkey string
}

// VerifierKey is the public half, "<name>+<hash>+<base64>".
func (s *Signer) VerifierKey() string { return s.vkey }

// NewSigner parses a private key in the signed-note format (Ed25519 only).
func NewSigner(skey string) (*Signer, error) {
	s, err := note.NewSigner(skey)
	if err != nil {
		return nil, err
	}
	// PRIVATE+KEY+<name>+<hash>+<base64(0x01 || 32-byte seed)>
	// (the base64 may itself hold '+'; the name may not).
	parts := strings.SplitN(skey, "+", 5)
	raw, err := base64.StdEncoding.DecodeString(parts[len(parts)-1])
	if err != nil || len(raw) != 1+ed25519.SeedSize || raw[0] != 1 {
		return nil, errors.New("not an Ed25519 signing key")
	}
	pub := ed25519.NewKeyFromSeed(raw[1:]).Public().(ed25519.PublicKey)
	vkey, err := note.NewEd25519VerifierKey(s.Name(), pub)
	if err != nil {
		return nil, err
	}
	return &Signer{Signer: s, vkey: vkey}, nil
}

// LoadSigner reads a private key file written by `onceflight keygen`: one
// line, the note signer key. A file others may read is refused: whoever
// reads it can sign as the executor or operator it names.
func LoadSigner(path string) (*Signer, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("private key file: %w", err)
	}
	if m := st.Mode().Perm(); m&0o077 != 0 {
		return nil, fmt.Errorf("%s: %w (mode %04o); run chmod 600 %s", path, ErrKeyFileMode, m, path)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("private key file: %w", err)
	}
	s, err := NewSigner(strings.TrimSpace(string(b)))
	if err != nil {
		return nil, fmt.Errorf("private key file %s: not a signing key written by onceflight keygen (%v)", path, err)
	}
	return s, nil
}

// WriteSigner writes skey to path with mode 0600, refusing to replace a
// file: a lost private key cannot be recovered, an overwritten one
// silently invalidates every trusted-keys file naming it.
func WriteSigner(path, skey string) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if errors.Is(err, fs.ErrExist) {
		return fmt.Errorf("%s exists: a key file is never overwritten; choose another --out", path)
	}
	if err != nil {
		return fmt.Errorf("write key file: %w", err)
	}
	if _, err := f.WriteString(skey + "\n"); err != nil {
		f.Close()
		return fmt.Errorf("write key file %s: %w", path, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("write key file %s: %w", path, err)
	}
	return nil
}
