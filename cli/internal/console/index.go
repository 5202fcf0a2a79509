package console

// The index is the console's Pebble database: the projection of the
// journal and outcome topics, written one fetch at a time in one batch with
// the positions it reached, so a restart resumes exactly where the last
// batch ended and nothing is counted twice. It is a cache: deleting the
// directory rebuilds it from the topics (as far as their retention goes).
//
// Key layout (id is the execution's identity: enc(entity) enc(key), where
// enc(s) is s's length as a uvarint and s, so any byte may appear in either):
//
//	p <topic> 0x00 <partition:4>                    -> next offset to read (8)
//	x <id>                                          -> Execution (JSON)
//	s <id> <source:1> <partition:4> <offset:8>      -> stored step (JSON)
//	k enc(key) enc(entity)                          -> "" (find by key)
//	c enc(command id) <id>                          -> "" (find by command id)
//	w <since:8> <id>                                -> "" (waiting for a person, oldest first)
//	n <status>                                      -> count of outcome events (8)
//	d <id> <decision id>                            -> Decision sent from this console (JSON)
//	u <id> <partition:4> <offset:8>                 -> UnsignedRecord (JSON): no trusted seal covers it
//	S                                               -> 1: the journal carries seals, unchecked here
//
// Big-endian numbers keep offsets and times in order under Pebble's
// byte-wise comparison.

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/cockroachdb/pebble/v2"

	"github.com/onceflight/onceflight/schemas"
)

const (
	pfxPos      = 'p'
	pfxExec     = 'x'
	pfxStep     = 's'
	pfxKey      = 'k'
	pfxCommand  = 'c'
	pfxWaiting  = 'w'
	pfxCount    = 'n'
	pfxDecision = 'd'
	// pfxUnsigned: journal records no trusted seal covers (seals.go).
	pfxUnsigned = 'u'
	// pfxSealsSeen: the journal carries seals this index did not check.
	pfxSealsSeen = 'S'
	// pfxTrustedSeal: each journal partition's last trusted seal (seals.go).
	pfxTrustedSeal = 'T'

	srcJournal  = 'j'
	srcOutcomes = 'o'
)

// Execution is the console's summary of one (entity, key): its latest
// journal state and where it came from.
type Execution struct {
	Entity    string         `json:"entity"`
	Key       string         `json:"key"`
	Action    string         `json:"action"`
	Status    schemas.Status `json:"status"`
	Released  bool           `json:"released,omitempty"`
	Attempts  int            `json:"attempts"`
	CommandID string         `json:"command_id"`
	Error     *schemas.Error `json:"error,omitempty"`
	// Evidence is the latest journal record's evidence: what the external
	// system answered to each attempt and confirmation, so a list can
	// say why an execution waits without reading its timeline.
	Evidence []schemas.Evidence `json:"evidence,omitempty"`
	// FirstAt and UpdatedAt are the timestamps of the first and latest
	// journal records (or outcome events, for an execution the journal no
	// longer holds).
	FirstAt   time.Time `json:"first_at"`
	UpdatedAt time.Time `json:"updated_at"`
	// Since is when the current status began: the first record of a run
	// of records with this status. Needs a decision sorts by it.
	Since     time.Time `json:"since"`
	Partition int32     `json:"partition"`
	Offset    int64     `json:"offset"`
	// Journal says whether any journal record was seen; an execution
	// known only from outcome events has none (retention removed them).
	Journal bool `json:"journal"`
	// waitKey is the w index entry this execution holds, if any.
	WaitKey []byte `json:"wait_key,omitempty"`
}

// Waiting reports whether a person must act on e.
func (e Execution) Waiting() bool {
	return !e.Released && (e.Status == schemas.StatusUnresolved || e.Status == schemas.StatusHeld)
}

// storedStep is one journal record or outcome event of an execution.
type storedStep struct {
	Source    string          `json:"source"` // "journal" or "outcomes"
	Partition int32           `json:"partition"`
	Offset    int64           `json:"offset"`
	Time      time.Time       `json:"time"`
	Record    *schemas.Record `json:"record,omitempty"`
	// Outcome fields.
	EventID   string         `json:"event_id,omitempty"`
	CommandID string         `json:"causation_id,omitempty"`
	Status    schemas.Status `json:"status,omitempty"`
	Replayed  bool           `json:"replayed,omitempty"`
	ErrorCode string         `json:"error_code,omitempty"`
	Hash      string         `json:"hash,omitempty"` // of the record the outcome carries
}

// Decision is an operator decision sent from this console, kept so the
// execution page can say whether the executor has applied it yet.
type Decision struct {
	ID     string         `json:"id"`
	Kind   string         `json:"kind"` // resolve, approve, reject, release
	As     schemas.Status `json:"as,omitempty"`
	By     string         `json:"by"`
	Reason string         `json:"reason"`
	At     time.Time      `json:"at"`
	// Key is the idempotency key of the control command itself; its own
	// outcome says whether the executor accepted it.
	Key string `json:"key"`
}

func enc(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

// dec reads one enc'd string from b and returns it and the rest.
func dec(b []byte) (string, []byte, error) {
	n, w := binary.Uvarint(b)
	if w <= 0 || uint64(len(b)-w) < n {
		return "", nil, errors.New("console index: malformed key")
	}
	return string(b[w : w+int(n)]), b[w+int(n):], nil
}

func execID(entity, key string) []byte { return enc(enc(nil, entity), key) }

func withPrefix(p byte, parts ...[]byte) []byte {
	b := []byte{p}
	for _, x := range parts {
		b = append(b, x...)
	}
	return b
}

func posKey(topic string, partition int32) []byte {
	b := append([]byte{pfxPos}, topic...)
	b = append(b, 0)
	return binary.BigEndian.AppendUint32(b, uint32(partition))
}

func stepKey(id []byte, src byte, partition int32, offset int64) []byte {
	b := withPrefix(pfxStep, id, []byte{src})
	b = binary.BigEndian.AppendUint32(b, uint32(partition))
	return binary.BigEndian.AppendUint64(b, uint64(offset))
}

func waitKey(since time.Time, id []byte) []byte {
	b := binary.BigEndian.AppendUint64([]byte{pfxWaiting}, uint64(since.UnixNano()))
	return append(b, id...)
}

// prefixEnd is the first key after every key starting with p.
func prefixEnd(p []byte) []byte {
	end := bytes.Clone(p)
	for i := len(end) - 1; i >= 0; i-- {
		if end[i] < 0xff {
			end[i]++
			return end[:i+1]
		}
	}
	return nil
}

func getJSON[T any](r pebble.Reader, key []byte) (*T, error) {
	v, closer, err := r.Get(key)
	if errors.Is(err, pebble.ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("console index: read: %w", err)
	}
	defer closer.Close()
	var t T
	if err := json.Unmarshal(v, &t); err != nil {
		return nil, fmt.Errorf("console index: decode %q: %w", key[:1], err)
	}
	return &t, nil
}

func setJSON(b *pebble.Batch, key []byte, v any) error {
	data, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("console index: encode: %w", err)
	}
	return b.Set(key, data, nil)
}

func getUint(r pebble.Reader, key []byte) (uint64, bool, error) {
	v, closer, err := r.Get(key)
	if errors.Is(err, pebble.ErrNotFound) {
		return 0, false, nil
	}
	if err != nil {
		return 0, false, fmt.Errorf("console index: read: %w", err)
	}
	defer closer.Close()
	if len(v) != 8 {
		return 0, false, errors.New("console index: malformed number")
	}
	return binary.BigEndian.Uint64(v), true, nil
}

func setUint(b *pebble.Batch, key []byte, n uint64) error {
	return b.Set(key, binary.BigEndian.AppendUint64(nil, n), nil)
}

func jsonUnmarshal(data []byte, v any) error {
	if err := json.Unmarshal(data, v); err != nil {
		return fmt.Errorf("console index: decode: %w", err)
	}
	return nil
}
