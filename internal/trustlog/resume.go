package trustlog

import (
	"bytes"
	"encoding/base64"
	"fmt"
	"strconv"
	"strings"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/onceflight/onceflight/trust"
)

// Headers of a checkpoint record on the checkpoints topic: where its tree
// ends in the journal and the tree's compact range, so that a new owner,
// or an auditor after retention deleted the journal's first records, goes
// on from it without the records before. Neither is signed: ResumeFrom
// checks the range against the signed root, and a wrong offset makes the
// next checkpoints disagree with the journal.
const (
	HeaderJournalNext  = "onceflight-journal-next"
	HeaderCompactRange = "onceflight-compact-range"
)

// CheckpointHeaders are the headers of a checkpoint record for a tree that
// ends before journal offset next.
func CheckpointHeaders(t *Tree, next int64) []kgo.RecordHeader {
	hs := t.Hashes()
	enc := make([]string, len(hs))
	for i, h := range hs {
		enc[i] = base64.StdEncoding.EncodeToString(h)
	}
	return []kgo.RecordHeader{
		{Key: HeaderJournalNext, Value: strconv.AppendInt(nil, next, 10)},
		{Key: HeaderCompactRange, Value: []byte(strings.Join(enc, ","))},
	}
}

// ResumeFrom is the tree of a verified checkpoint from its record's
// headers, and the journal offset after its last leaf.
func ResumeFrom(cp *trust.Checkpoint, headers []kgo.RecordHeader) (*Tree, int64, error) {
	next := int64(-1)
	var hashes [][]byte
	var err error
	for _, h := range headers {
		switch h.Key {
		case HeaderJournalNext:
			if next, err = strconv.ParseInt(string(h.Value), 10, 64); err != nil {
				return nil, 0, fmt.Errorf("checkpoint %s size %d: header %s %q is not an offset", cp.Origin, cp.Size, h.Key, h.Value)
			}
		case HeaderCompactRange:
			for s := range strings.SplitSeq(string(h.Value), ",") {
				if s == "" {
					continue
				}
				b, err := base64.StdEncoding.DecodeString(s)
				if err != nil {
					return nil, 0, fmt.Errorf("checkpoint %s size %d: header %s is not base64 hashes", cp.Origin, cp.Size, h.Key)
				}
				hashes = append(hashes, b)
			}
		}
	}
	if next < 0 {
		return nil, 0, fmt.Errorf("checkpoint %s size %d: no %s header", cp.Origin, cp.Size, HeaderJournalNext)
	}
	t, err := ResumeTree(cp.Size, hashes)
	if err != nil {
		return nil, 0, fmt.Errorf("checkpoint %s: %w", cp.Origin, err)
	}
	if !bytes.Equal(t.Root(), cp.Root) {
		return nil, 0, fmt.Errorf("checkpoint %s size %d: its compact range does not hash to its signed root", cp.Origin, cp.Size)
	}
	return t, next, nil
}
