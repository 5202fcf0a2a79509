package inspect

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/onceflight/onceflight/client"
	internal "github.com/onceflight/onceflight/internal/client"
	"github.com/onceflight/onceflight/internal/trustlog"
	"github.com/onceflight/onceflight/internal/wire"
	"github.com/onceflight/onceflight/schemas"
	"github.com/onceflight/onceflight/trust"
)

// ErrNoStory is returned (wrapped) by Explain when neither the journal nor
// the outcomes topic mention the key.
var ErrNoStory = errors.New("no journal record and no outcome")

// Story is everything the journal and the outcomes topic hold about one
// (entity, key): the "result record" a person inspects.
type Story struct {
	Key    string `json:"key"`
	Entity string `json:"entity"`
	// Current is the latest journal record, nil if the journal has none
	// (retention removed it, or only outcomes are left).
	Current *schemas.Record `json:"current,omitempty"`
	Steps   []Step          `json:"steps"`
	// Signatures is "checked" when the journal's seals were checked
	// (ExplainOptions.Trusted), else empty.
	Signatures string `json:"signatures,omitempty"`
	// Unsigned counts the key's journal records no trusted seal covers.
	Unsigned int `json:"unsigned,omitempty"`
}

// ExplainOptions: what Explain checks besides reading.
type ExplainOptions struct {
	// Trusted, if set, are the executors' public keys: a journal record
	// no transaction seal of theirs covers is shown marked (Step.Unsigned)
	// and is not the story's Current, as executors that require signed
	// journals do not act on it (docs/trust.md#signed-transactions).
	Trusted *trust.TrustedKeys
	// OriginPrefix names the journal's partitions in seals; default
	// "onceflight/" + the journal topic.
	OriginPrefix string
}

// Step is one entry of the timeline: a journal record (a state of the
// execution record) or a published outcome event.
type Step struct {
	Time      time.Time `json:"time"`
	Source    string    `json:"source"` // "journal" or "outcomes"
	Partition int32     `json:"partition"`
	Offset    int64     `json:"offset"`
	// Summary says in words what the step is.
	Summary string `json:"summary"`
	// Record is the journal record (Source "journal").
	Record *schemas.Record `json:"record,omitempty"`
	// Outcome is the published event (Source "outcomes").
	Outcome *OutcomeEvent `json:"outcome,omitempty"`
	// Unsigned, for a journal record, says why no trusted executor
	// signature covers it (only with ExplainOptions.Trusted).
	Unsigned string `json:"unsigned,omitempty"`
}

// OutcomeEvent is what a subscriber saw of one outcome event.
type OutcomeEvent struct {
	ID        string         `json:"id"`
	CommandID string         `json:"causation_id"`
	Status    schemas.Status `json:"status"`
	Replayed  bool           `json:"replayed"`
	ErrorCode string         `json:"error_code,omitempty"`
	hash      string         // of the record carried, to place it in the timeline
}

// Explain reads the journal and the outcomes topic of c, each from its
// start to its end at the time of the call, and returns the story of key
// for entity; an empty entity accepts the key's only entity. Like
// client.Status it costs a full read of both topics: it is for people.
func Explain(ctx context.Context, c *client.Client, key, entity string, opts ...ExplainOptions) (Story, error) {
	var o ExplainOptions
	if len(opts) > 0 {
		o = opts[0]
	}
	type found struct {
		steps []Step
		last  *schemas.Record
	}
	byEntity := map[string]*found{}
	at := func(e string) *found {
		f := byEntity[e]
		if f == nil {
			f = &found{}
			byEntity[e] = f
		}
		return f
	}
	topics := c.Topics()
	if o.OriginPrefix == "" {
		o.OriginPrefix = "onceflight/" + topics.Journal
	}
	// Every record of every partition goes through its partition's seal
	// scan: a seal covers its transaction's records whatever their keys.
	scans := map[int32]*trustlog.SealScan{}
	err := internal.Read(ctx, c.Kafka(), topics.Journal, true, false, func(rec *kgo.Record) error {
		if o.Trusted != nil {
			sc := scans[rec.Partition]
			if sc == nil {
				// The first record read is past offset 0 when retention
				// deleted the partition's beginning.
				sc = trustlog.NewSealScan(trust.Origin(o.OriginPrefix, rec.Partition), o.Trusted, rec.Offset > 0)
				scans[rec.Partition] = sc
			}
			sc.Add(rec, nil)
		}
		if string(rec.Key) != key || !isRecord(rec) || rec.Value == nil {
			return nil
		}
		r, err := schemas.UnmarshalRecord(rec.Value)
		if err != nil {
			return fmt.Errorf("journal partition %d offset %d: %w", rec.Partition, rec.Offset, err)
		}
		if entity != "" && r.Entity != entity {
			return nil
		}
		f := at(r.Entity)
		f.steps = append(f.steps, Step{Time: rec.Timestamp, Source: "journal", Partition: rec.Partition, Offset: rec.Offset,
			Summary: summarize(f.last, &r), Record: &r})
		f.last = &r
		return nil
	})
	if err != nil {
		return Story{}, fmt.Errorf("explain %q: read journal %s: %w", key, topics.Journal, err)
	}
	for o, err := range c.ReadOutcomes(ctx, client.Range{Start: client.FromBeginning()}) {
		if _, ok := errors.AsType[*client.DecodeError](err); ok {
			continue // another producer's event on a shared topic
		}
		if err != nil {
			return Story{}, fmt.Errorf("explain %q: read outcomes %s: %w", key, topics.Outcomes, err)
		}
		if o.Key != key || (entity != "" && o.Entity != entity) {
			continue
		}
		ev := OutcomeEvent{ID: o.ID, CommandID: o.CommandID, Status: o.Status, Replayed: o.Replayed, ErrorCode: o.ErrorCode, hash: o.Record.Hash}
		f := at(o.Entity)
		f.steps = append(f.steps, Step{Time: o.Event.Timestamp, Source: "outcomes", Partition: o.Event.Partition, Offset: o.Event.Offset,
			Summary: outcomeSummary(ev), Outcome: &ev})
	}
	switch {
	case len(byEntity) == 0 && entity != "":
		return Story{}, fmt.Errorf("key %q of entity %q: %w", key, entity, ErrNoStory)
	case len(byEntity) == 0:
		return Story{}, fmt.Errorf("key %q: %w", key, ErrNoStory)
	case len(byEntity) > 1:
		ents := slices.Sorted(maps.Keys(byEntity))
		return Story{}, fmt.Errorf("key %q: %w (%s); name the entity", key, client.ErrAmbiguous, strings.Join(ents, ", "))
	}
	for e, f := range byEntity {
		st := Story{Key: key, Entity: e, Current: f.last, Steps: order(f.steps)}
		if o.Trusted != nil {
			markUnsigned(&st, scans)
		}
		return st, nil
	}
	panic("unreachable")
}

// markUnsigned marks the story's journal steps that no trusted seal
// covers and makes Current the last record one covers.
func markUnsigned(st *Story, scans map[int32]*trustlog.SealScan) {
	st.Signatures, st.Current = "checked", nil
	unsigned := map[int32][]*trustlog.UnsignedError{}
	for p, sc := range scans {
		_, unsigned[p], _ = sc.End()
	}
	for i := range st.Steps {
		step := &st.Steps[i]
		if step.Source != "journal" {
			continue
		}
		for _, u := range unsigned[step.Partition] {
			if step.Offset >= u.From && step.Offset <= u.To {
				step.Unsigned = u.Why
			}
		}
		if step.Unsigned != "" {
			st.Unsigned++
			continue
		}
		st.Current = step.Record
	}
}

// order puts the steps of one entity (all in one partition of each topic)
// in the order they happened. Timestamps cannot do it: a record and the
// outcome publishing it are written in one transaction, and either may be
// stamped first. So journal records keep their offset order, and each
// outcome goes after the journal record it carries (the same hash), or,
// failing that, after the last record stamped before it; outcomes after one
// record keep their offset order.
func order(steps []Step) []Step {
	type keyed struct {
		at   int // index of the journal record it follows; -1 before all
		kind int // 0 journal, 1 outcome
		off  int64
		s    Step
	}
	var journal []Step
	for _, st := range steps {
		if st.Record != nil {
			journal = append(journal, st)
		}
	}
	slices.SortFunc(journal, func(a, b Step) int { return cmp.Compare(a.Offset, b.Offset) })
	var ks []keyed
	for i, st := range journal {
		ks = append(ks, keyed{i, 0, st.Offset, st})
	}
	for _, st := range steps {
		if st.Outcome == nil {
			continue
		}
		at := -1
		for i, j := range journal {
			if st.Outcome.hash != "" && j.Record.Hash == st.Outcome.hash {
				at = i
				break
			}
			if !j.Time.After(st.Time) {
				at = i
			}
		}
		ks = append(ks, keyed{at, 1, st.Offset, st})
	}
	slices.SortStableFunc(ks, func(a, b keyed) int {
		return cmp.Or(cmp.Compare(a.at, b.at), cmp.Compare(a.kind, b.kind), cmp.Compare(a.off, b.off))
	})
	out := make([]Step, len(ks))
	for i, k := range ks {
		out[i] = k.s
	}
	return out
}

func isRecord(r *kgo.Record) bool {
	for _, h := range r.Headers {
		if h.Key == schemas.HeaderKind {
			return string(h.Value) == schemas.KindRecord
		}
	}
	return false
}

// summarize says what changed from prev to r, in the words an operator
// uses. Confirmations are not journal records of their own: a confirmation
// that answered shows as the next state, one that did not as unresolved
// confirmation_timeout.
func summarize(prev, r *schemas.Record) string {
	var b strings.Builder
	// An ambiguous answer journaled before its confirmation is not a new
	// attempt: its detail is in the evidence, printed below.
	pending := r.Status == schemas.StatusInProgress && r.Error != nil && r.Error.Code == schemas.CodeConfirmationPending
	switch {
	case pending:
		fmt.Fprintf(&b, "attempt %d answered ambiguously, confirmation pending", r.Attempts)
		if r.Deadline != nil {
			fmt.Fprintf(&b, ", deadline %s", timeString(*r.Deadline))
		}
	case r.Status == schemas.StatusInProgress:
		fmt.Fprintf(&b, "attempt %d started", r.Attempts)
		if prev != nil && prev.Status == schemas.StatusInProgress && prev.Executor != r.Executor {
			fmt.Fprintf(&b, " by %s, which took the entity over from %s", r.Executor, prev.Executor)
		}
		if r.Deadline != nil {
			fmt.Fprintf(&b, ", deadline %s", timeString(*r.Deadline))
		}
	default:
		fmt.Fprintf(&b, "%s after %d attempt(s)", r.Status, r.Attempts)
	}
	if r.Error != nil && !pending {
		fmt.Fprintf(&b, ": %s (%s)", r.Error.Code, r.Error.Message)
	}
	if res := r.Resolution; res != nil && (prev == nil || prev.Resolution == nil || *prev.Resolution != *res) {
		fmt.Fprintf(&b, "; resolved as %s by %s: %q", res.As, res.By, res.Reason)
	} else if prev != nil && prev.Status == schemas.StatusUnresolved && r.Status == schemas.StatusSucceeded && r.EstablishedBy == "" {
		b.WriteString("; settled by a later confirmation (reconciler)")
	}
	if r.EstablishedBy != "" && r.Status != schemas.StatusInProgress {
		fmt.Fprintf(&b, "; established by %s", r.EstablishedBy)
	}
	if n := len(r.Evidence); n > 0 && (prev == nil || len(prev.Evidence) != n || prev.Evidence[n-1] != r.Evidence[n-1]) {
		ev := r.Evidence[n-1]
		fmt.Fprintf(&b, "; last observed: %s", wire.EntryText(ev))
	}
	fmt.Fprintf(&b, " [fencing token %d, epoch %d, executor %s]", r.FencingToken, r.Epoch, r.Executor)
	return b.String()
}

func outcomeSummary(o OutcomeEvent) string {
	s := fmt.Sprintf("outcome %s published for command %s (event %s)", o.Status, o.CommandID, o.ID)
	if o.ErrorCode != "" {
		s += ", error " + o.ErrorCode
	}
	if o.Replayed {
		s += ", replayed: the recorded result, not a new execution"
	}
	return s
}

// WriteStoryText writes s as a timeline, one line per step.
func WriteStoryText(w io.Writer, s Story) error {
	var b strings.Builder
	fmt.Fprintf(&b, "key %s, entity %s\n", s.Key, s.Entity)
	if s.Current != nil {
		fmt.Fprintf(&b, "now: %s, action %s, %d attempt(s), entity version %d\n", s.Current.Status, s.Current.Action, s.Current.Attempts, s.Current.EntityVersion)
		if ev := wire.EvidenceText(s.Current); ev != "" {
			fmt.Fprintf(&b, "evidence: %s\n", ev)
		}
	}
	if s.Unsigned > 0 {
		fmt.Fprintf(&b, "WARNING: %d journal record(s) of this key are not covered by a trusted executor signature (marked UNSIGNED): someone without an executor key wrote them, and executors requiring signed journals do not act on them (docs/trust.md#threat-model)\n", s.Unsigned)
	}
	for _, st := range s.Steps {
		mark := ""
		if st.Unsigned != "" {
			mark = "UNSIGNED (" + st.Unsigned + ") "
		}
		fmt.Fprintf(&b, "%s  %-8s %d/%-6d %s%s\n", timeString(st.Time), st.Source, st.Partition, st.Offset, mark, st.Summary)
	}
	if _, err := io.WriteString(w, b.String()); err != nil {
		return fmt.Errorf("write story: %w", err)
	}
	return nil
}

// WriteStoryJSON writes s as one indented JSON document.
func WriteStoryJSON(w io.Writer, s Story) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	if err := enc.Encode(s); err != nil {
		return fmt.Errorf("write story: %w", err)
	}
	return nil
}
