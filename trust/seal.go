package trust

import (
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"golang.org/x/mod/sumdb/note"
)

// A seal is what an executor writes at the end of each journal
// transaction, per partition it wrote to: a signed note saying "the n
// records before me in this partition are mine, and my previous seal in
// this epoch was this one". The records are named by the SHA-256 of their
// leaf hashes; seals of one epoch chain by the SHA-256 of the previous
// seal. A record no trusted seal covers was not written by an executor.
//
// Body, one field per line (docs/trust.md#signed-transactions):
//
//	onceflight-seal/v1
//	<origin>
//	epoch <n>
//	prev <base64 SHA-256 of the previous seal's note, or ->
//	records <n>
//	digest <base64 SHA-256 of the records' leaf hashes, concatenated>
//	head <the chain head after them: the last record's hash, or ->
//	time <RFC 3339>
type Seal struct {
	Origin  string
	Epoch   int64
	Prev    []byte
	Records int
	Digest  []byte
	Head    string
	Time    time.Time
}

const sealTag = "onceflight-seal/v1"

// DigestLeaves is the digest of a seal over its records' leaf hashes.
func DigestLeaves(leafHashes [][]byte) []byte {
	h := sha256.New()
	for _, l := range leafHashes {
		h.Write(l)
	}
	return h.Sum(nil)
}

// SealHash is what the next seal's prev names.
func SealHash(note []byte) []byte {
	s := sha256.Sum256(note)
	return s[:]
}

func b64OrDash(b []byte) string {
	if len(b) == 0 {
		return "-"
	}
	return base64.StdEncoding.EncodeToString(b)
}

// Sign makes the seal's signed note.
func (s Seal) Sign(signer note.Signer) ([]byte, error) {
	head := s.Head
	if head == "" {
		head = "-"
	}
	text := fmt.Sprintf("%s\n%s\nepoch %d\nprev %s\nrecords %d\ndigest %s\nhead %s\ntime %s\n",
		sealTag, s.Origin, s.Epoch, b64OrDash(s.Prev), s.Records, b64OrDash(s.Digest), head, s.Time.UTC().Format(time.RFC3339Nano))
	msg, err := note.Sign(&note.Note{Text: text}, signer)
	if err != nil {
		return nil, fmt.Errorf("sign seal of %s: %w", s.Origin, err)
	}
	return msg, nil
}

// ParseSeal reads a seal's text without checking its signature: a
// reader that keeps a partition's records itself (the console) learns how
// many records before the seal it claims, and hands only those to the
// seal checks, which check the rest.
func ParseSeal(msg []byte) (Seal, error) { return parseSeal(msg) }

// OpenSeal reads a seal and checks its signature: by a trusted key, valid
// when the seal says it was signed. A verifier that checks a journal's
// transactions itself needs it with DigestLeaves and SealHash; the
// executor's own checks are built on it, once per chain of seals.
func OpenSeal(msg []byte, tk *TrustedKeys) (Seal, error) {
	s, err := parseSeal(msg)
	if err != nil {
		return s, err
	}
	return s, verifySeal(msg, s, tk)
}

// parseSeal reads a seal's text without checking its signature.
func parseSeal(msg []byte) (Seal, error) {
	var s Seal
	text, _, ok := bytes.Cut(msg, []byte("\n\n"))
	if !ok {
		return s, errors.New("not a signed note")
	}
	lines := strings.Split(string(text), "\n")
	if len(lines) != 8 || lines[0] != sealTag {
		return s, fmt.Errorf("not an %s note", sealTag)
	}
	s.Origin = lines[1]
	field := func(i int, name string) string {
		v, _ := strings.CutPrefix(lines[i], name+" ")
		return v
	}
	var err error
	bad := func(what string) error { return fmt.Errorf("seal line %q: bad %s", lines[0], what) }
	if s.Epoch, err = strconv.ParseInt(field(2, "epoch"), 10, 64); err != nil {
		return s, bad("epoch")
	}
	for _, f := range []struct {
		i    int
		name string
		to   *[]byte
	}{{3, "prev", &s.Prev}, {5, "digest", &s.Digest}} {
		v := field(f.i, f.name)
		if v == "-" {
			continue
		}
		if *f.to, err = base64.StdEncoding.DecodeString(v); err != nil || len(*f.to) != sha256.Size {
			return s, bad(f.name)
		}
	}
	if s.Records, err = strconv.Atoi(field(4, "records")); err != nil || s.Records < 0 {
		return s, bad("records")
	}
	if s.Head = field(6, "head"); s.Head == "-" {
		s.Head = ""
	}
	if s.Time, err = time.Parse(time.RFC3339Nano, field(7, "time")); err != nil {
		return s, bad("time")
	}
	return s, nil
}

// verifySeal checks a seal's signature: a trusted key, valid when it
// signed.
func verifySeal(msg []byte, s Seal, tk *TrustedKeys) error {
	n, err := note.Open(msg, tk.verifiers())
	if err != nil {
		var unk *note.UnverifiedNoteError
		if errors.As(err, &unk) {
			return fmt.Errorf("no signature by a key in %s (signed by %s)", tk.Path, sigNames(unk.Note))
		}
		return err
	}
	var why []string
	for _, sig := range n.Sigs {
		k := tk.byName(sig.Name, sig.Hash)
		if k == nil {
			continue
		}
		if r := k.ValidAt(s.Time); r != "" {
			why = append(why, r)
			continue
		}
		return nil
	}
	return errors.New(strings.Join(why, "; "))
}
