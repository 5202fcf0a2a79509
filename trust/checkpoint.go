package trust

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/transparency-dev/formats/log"
	"golang.org/x/mod/sumdb/note"
)

// timeExtension names the checkpoint's extension line (C2SP
// tlog-checkpoint allows lines after the root hash) carrying when it was
// signed: a key's validity window is judged at that time, so a checkpoint
// signed while its key was valid stays valid after the key expires.
const timeExtension = "onceflight-time "

// Checkpoint is a signed statement "the partition's tree had Size leaves
// and this Root", as a C2SP tlog-checkpoint.
type Checkpoint struct {
	Origin string
	Size   uint64
	Root   []byte
	Time   time.Time
	// Signer is the trusted key that signed it (set by OpenCheckpoint).
	Signer string
	// Note is the signed note as published (set by Sign and
	// OpenCheckpoint): what an auditor saves.
	Note []byte
}

// Origin is the checkpoint origin of a journal partition: prefix (by
// default "onceflight/" + the journal topic) + "/" + the partition.
func Origin(prefix string, partition int32) string {
	return fmt.Sprintf("%s/%d", prefix, partition)
}

// Sign signs cp with s and sets cp.Note.
func (cp *Checkpoint) Sign(s note.Signer) ([]byte, error) {
	body := log.Checkpoint{Origin: cp.Origin, Size: cp.Size, Hash: cp.Root}.Marshal()
	if !cp.Time.IsZero() {
		body = fmt.Appendf(body, "%s%s\n", timeExtension, cp.Time.UTC().Format(time.RFC3339))
	}
	msg, err := note.Sign(&note.Note{Text: string(body)}, s)
	if err != nil {
		return nil, fmt.Errorf("sign checkpoint %s: %w", cp.Origin, err)
	}
	cp.Note = msg
	return msg, nil
}

// ErrCheckpoint classifies every refusal of OpenCheckpoint.
var ErrCheckpoint = errors.New("checkpoint refused")

// OpenCheckpoint verifies a signed checkpoint against the trusted keys:
// a signature by a trusted key valid at the checkpoint's time, and an
// origin that knownOrigin accepts (nil: any).
func OpenCheckpoint(msg []byte, tk *TrustedKeys, knownOrigin func(string) bool) (*Checkpoint, error) {
	n, err := note.Open(msg, tk.verifiers())
	if err != nil {
		var unk *note.UnverifiedNoteError
		if errors.As(err, &unk) {
			return nil, fmt.Errorf("%w: no signature by a key in %s (signed by %s)", ErrCheckpoint, tk.Path, sigNames(unk.Note))
		}
		return nil, fmt.Errorf("%w: %v", ErrCheckpoint, err)
	}
	var c log.Checkpoint
	rest, err := c.Unmarshal([]byte(n.Text))
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrCheckpoint, err)
	}
	cp := &Checkpoint{Origin: c.Origin, Size: c.Size, Root: c.Hash, Note: msg}
	if len(cp.Root) != 32 {
		return nil, fmt.Errorf("%w: %s: root hash is %d bytes, want 32", ErrCheckpoint, cp.Origin, len(cp.Root))
	}
	for l := range strings.SplitSeq(strings.TrimSuffix(string(rest), "\n"), "\n") {
		if v, ok := strings.CutPrefix(l, timeExtension); ok {
			if cp.Time, err = time.Parse(time.RFC3339, v); err != nil {
				return nil, fmt.Errorf("%w: %s: bad time line %q", ErrCheckpoint, cp.Origin, l)
			}
		}
	}
	if knownOrigin != nil && !knownOrigin(cp.Origin) {
		return nil, fmt.Errorf("%w: unknown origin %q (not a partition of the journal being checked)", ErrCheckpoint, cp.Origin)
	}
	var why []string
	for _, s := range n.Sigs {
		k := tk.byName(s.Name, s.Hash)
		if k == nil {
			continue
		}
		if cp.Time.IsZero() && (!k.NotBefore.IsZero() || !k.NotAfter.IsZero() || k.Revoked) {
			why = append(why, fmt.Sprintf("key %s has a validity window or is revoked, and the checkpoint has no time", k.Name))
			continue
		}
		if r := k.ValidAt(cp.Time); r != "" {
			why = append(why, r)
			continue
		}
		cp.Signer = k.Name
		return cp, nil
	}
	return nil, fmt.Errorf("%w: %s size %d: %s", ErrCheckpoint, cp.Origin, cp.Size, strings.Join(why, "; "))
}

func sigNames(n *note.Note) string {
	if n == nil || len(n.UnverifiedSigs) == 0 {
		return "nobody"
	}
	var s []string
	for _, sig := range n.UnverifiedSigs {
		s = append(s, sig.Name)
	}
	return strings.Join(s, ", ")
}

// SplitNotes splits a checkpoints file into its signed notes. The file is
// the notes one after the other, each followed by an empty line (the
// form `onceflight audit checkpoints` and the HTTP endpoint write); a
// note is its text, an empty line, and signature lines starting "— ".
func SplitNotes(b []byte) ([][]byte, error) {
	var out [][]byte
	lines := bytes.SplitAfter(b, []byte("\n"))
	var cur []byte
	inSigs := false
	for i, l := range lines {
		if len(l) == 0 {
			continue
		}
		blank := len(bytes.TrimRight(l, "\r\n")) == 0
		switch {
		case inSigs && blank:
			out = append(out, cur)
			cur, inSigs = nil, false
		case inSigs && !bytes.HasPrefix(l, []byte("— ")):
			return nil, fmt.Errorf("line %d: want a signature line starting \"— \" or an empty line after a note's signatures", i+1)
		case !inSigs && blank:
			if len(cur) == 0 {
				continue // blank lines between notes
			}
			cur = append(cur, l...)
			inSigs = true
		default:
			cur = append(cur, l...)
		}
	}
	if inSigs {
		out = append(out, cur)
	} else if len(bytes.TrimSpace(cur)) > 0 {
		return nil, errors.New("the last note has no signature lines")
	}
	return out, nil
}
