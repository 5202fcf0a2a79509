package trust

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"strings"
	"time"

	"golang.org/x/mod/sumdb/note"
)

// TrustedKey is one line of a trusted-keys file.
type TrustedKey struct {
	Name      string
	VKey      string
	NotBefore time.Time // zero: no lower bound
	NotAfter  time.Time // zero: no upper bound
	Revoked   bool
	verifier  note.Verifier
	line      int
}

// ValidAt reports why k may not sign at t ("" when it may): revoked keys
// never may, others within their window.
func (k *TrustedKey) ValidAt(t time.Time) string {
	switch {
	case k.Revoked:
		return fmt.Sprintf("key %s is revoked", k.Name)
	case !k.NotBefore.IsZero() && t.Before(k.NotBefore):
		return fmt.Sprintf("key %s is not valid before %s (signed at %s)", k.Name, k.NotBefore.Format(time.RFC3339), t.Format(time.RFC3339))
	case !k.NotAfter.IsZero() && t.After(k.NotAfter):
		return fmt.Sprintf("key %s expired at %s (signed at %s)", k.Name, k.NotAfter.Format(time.RFC3339), t.Format(time.RFC3339))
	}
	return ""
}

// TrustedKeys is a trusted-keys file: the public keys whose signatures
// are believed, by name.
type TrustedKeys struct {
	Path string
	Keys []*TrustedKey
}

// ParseTrustedKeys parses a trusted-keys file's content; path only names
// it in errors. Format, one key per line ('#' starts a comment):
//
//	<verifier key> [not_before=<RFC 3339>] [not_after=<RFC 3339>] [revoked]
//
// where the verifier key is what `onceflight keygen` printed,
// "<name>+<hash>+<base64 Ed25519 key>".
func ParseTrustedKeys(path string, b []byte) (*TrustedKeys, error) {
	tk := &TrustedKeys{Path: path}
	names := map[string]int{}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for n := 1; sc.Scan(); n++ {
		line, _, _ := strings.Cut(sc.Text(), "#")
		fields := strings.Fields(line)
		if len(fields) == 0 {
			continue
		}
		bad := func(format string, args ...any) error {
			return fmt.Errorf("trusted-keys file %s line %d: %s", path, n, fmt.Sprintf(format, args...))
		}
		v, err := note.NewVerifier(fields[0])
		if err != nil {
			return nil, bad("%q is not a verifier key <name>+<hash>+<base64> as onceflight keygen prints it (%v)", fields[0], err)
		}
		k := &TrustedKey{Name: v.Name(), VKey: fields[0], verifier: v, line: n}
		if first, dup := names[k.Name]; dup {
			return nil, bad("key name %q is already used on line %d", k.Name, first)
		}
		names[k.Name] = n
		for _, f := range fields[1:] {
			attr, val, hasVal := strings.Cut(f, "=")
			switch {
			case attr == "revoked" && !hasVal:
				k.Revoked = true
			case (attr == "not_before" || attr == "not_after") && hasVal:
				t, err := time.Parse(time.RFC3339, val)
				if err != nil {
					return nil, bad("%s=%q is not an RFC 3339 time like 2026-01-02T15:04:05Z", attr, val)
				}
				if attr == "not_before" {
					k.NotBefore = t
				} else {
					k.NotAfter = t
				}
			default:
				return nil, bad("unknown attribute %q (want not_before=TIME, not_after=TIME or revoked)", f)
			}
		}
		if !k.NotBefore.IsZero() && !k.NotAfter.IsZero() && !k.NotAfter.After(k.NotBefore) {
			return nil, bad("not_after %s is not after not_before %s", k.NotAfter.Format(time.RFC3339), k.NotBefore.Format(time.RFC3339))
		}
		tk.Keys = append(tk.Keys, k)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("trusted-keys file %s: %w", path, err)
	}
	if len(tk.Keys) == 0 {
		return nil, fmt.Errorf("trusted-keys file %s holds no key", path)
	}
	return tk, nil
}

// LoadTrustedKeys reads and parses a trusted-keys file.
func LoadTrustedKeys(path string) (*TrustedKeys, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("trusted-keys file: %w", err)
	}
	return ParseTrustedKeys(path, b)
}

// verifiers lists every key, revoked or not: a note is opened first, then
// the key that signed it is judged, so a revoked key's signature is named
// as revoked rather than as unknown.
func (tk *TrustedKeys) verifiers() note.Verifiers {
	vs := make([]note.Verifier, len(tk.Keys))
	for i, k := range tk.Keys {
		vs[i] = k.verifier
	}
	return note.VerifierList(vs...)
}

func (tk *TrustedKeys) byName(name string, hash uint32) *TrustedKey {
	for _, k := range tk.Keys {
		if k.Name == name && k.verifier.KeyHash() == hash {
			return k
		}
	}
	return nil
}
