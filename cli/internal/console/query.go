package console

import (
	"cmp"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/cockroachdb/pebble/v2"

	"github.com/onceflight/onceflight/cli/internal/inspect"
	"github.com/onceflight/onceflight/schemas"
)

// ErrNotFound is returned (wrapped) when the index has no execution of
// the (entity, key) asked for.
var ErrNotFound = errors.New("no such execution")

// View is everything the index holds of one execution.
type View struct {
	Exec Execution
	// Steps is the timeline: journal records and outcome events in the
	// order they happened (inspect.Order, as `onceflight explain`).
	Steps []inspect.Step
	// Decisions are those sent from this console, oldest first.
	Decisions []Decision
	// Unsigned are journal records of the execution that no trusted
	// executor seal covers (with trusted keys only): never its state.
	// With no other record, Exec has only the entity and key.
	Unsigned []UnsignedRecord
}

// Get returns the execution of key for entity.
func (p *Projection) Get(entity, key string) (View, error) {
	id := execID(entity, key)
	e, err := getJSON[Execution](p.db, withPrefix(pfxExec, id))
	if err != nil {
		return View{}, err
	}
	us, err := p.unsigned(id)
	if err != nil {
		return View{}, err
	}
	if e == nil {
		if len(us) == 0 {
			return View{}, fmt.Errorf("key %q of entity %q: %w", key, entity, ErrNotFound)
		}
		// Known only from records nobody trusted signed: no state.
		e = &Execution{Entity: entity, Key: key, Partition: -1, Offset: -1}
	}
	v := View{Exec: *e, Unsigned: us}
	sp := withPrefix(pfxStep, id)
	it, err := p.db.NewIter(&pebble.IterOptions{LowerBound: sp, UpperBound: prefixEnd(sp)})
	if err != nil {
		return View{}, fmt.Errorf("console index: %w", err)
	}
	var prev *schemas.Record
	for it.First(); it.Valid(); it.Next() {
		var st storedStep
		if err := jsonUnmarshal(it.Value(), &st); err != nil {
			_ = it.Close()
			return View{}, err
		}
		if st.Record != nil {
			v.Steps = append(v.Steps, inspect.JournalStep(prev, *st.Record, st.Partition, st.Offset, st.Time))
			prev = st.Record
			continue
		}
		ev := inspect.OutcomeEvent{ID: st.EventID, CommandID: st.CommandID, Status: st.Status, Replayed: st.Replayed, ErrorCode: st.ErrorCode}
		v.Steps = append(v.Steps, inspect.OutcomeStep(ev, st.Hash, st.Partition, st.Offset, st.Time))
	}
	if err := it.Close(); err != nil {
		return View{}, fmt.Errorf("console index: %w", err)
	}
	v.Steps = inspect.Order(v.Steps)
	dp := withPrefix(pfxDecision, id)
	err = p.scan(dp, func(_, val []byte) (bool, error) {
		var d Decision
		if err := jsonUnmarshal(val, &d); err != nil {
			return false, err
		}
		v.Decisions = append(v.Decisions, d)
		return true, nil
	})
	slices.SortFunc(v.Decisions, func(a, b Decision) int { return a.At.Compare(b.At) })
	return v, err
}

// SaveDecision remembers a decision sent for the execution of key for
// entity.
func (p *Projection) SaveDecision(entity, key string, d Decision) error {
	b := p.db.NewBatch()
	defer b.Close()
	if err := setJSON(b, withPrefix(pfxDecision, execID(entity, key), []byte(d.ID)), d); err != nil {
		return err
	}
	if err := b.Commit(pebble.Sync); err != nil {
		return fmt.Errorf("console index: %w", err)
	}
	p.notify()
	return nil
}

// scan calls fn with every key and value under prefix pfx until fn says
// stop.
func (p *Projection) scan(pfx []byte, fn func(k, v []byte) (bool, error)) error {
	it, err := p.db.NewIter(&pebble.IterOptions{LowerBound: pfx, UpperBound: prefixEnd(pfx)})
	if err != nil {
		return fmt.Errorf("console index: %w", err)
	}
	for it.First(); it.Valid(); it.Next() {
		more, err := fn(it.Key(), it.Value())
		if err != nil {
			_ = it.Close()
			return err
		}
		if !more {
			break
		}
	}
	if err := it.Close(); err != nil {
		return fmt.Errorf("console index: %w", err)
	}
	return nil
}

func (p *Projection) execOf(id []byte) (*Execution, error) {
	return getJSON[Execution](p.db, withPrefix(pfxExec, id))
}

// Waiting returns the executions waiting for a person (unresolved or
// held, not released), oldest first, that match f (only its Action and
// Entity are used), at most limit.
func (p *Projection) Waiting(f Filter, limit int) ([]Execution, error) {
	var out []Execution
	err := p.scan([]byte{pfxWaiting}, func(k, _ []byte) (bool, error) {
		e, err := p.execOf(k[9:])
		if err != nil || e == nil {
			return true, err
		}
		if (f.Action == "" || e.Action == f.Action) && (f.Entity == "" || e.Entity == f.Entity) {
			out = append(out, *e)
		}
		return len(out) < limit, nil
	})
	return out, err
}

// WaitSummary counts the executions waiting for a person by status, with
// the oldest's start.
type WaitSummary struct {
	Unresolved, Held             int
	OldestUnresolved, OldestHeld time.Time
}

// WaitingSummary returns the counts of the overview.
func (p *Projection) WaitingSummary() (WaitSummary, error) {
	var s WaitSummary
	err := p.scan([]byte{pfxWaiting}, func(k, _ []byte) (bool, error) {
		e, err := p.execOf(k[9:])
		if err != nil || e == nil {
			return true, err
		}
		switch e.Status {
		case schemas.StatusUnresolved:
			if s.Unresolved == 0 {
				s.OldestUnresolved = e.Since
			}
			s.Unresolved++
		case schemas.StatusHeld:
			if s.Held == 0 {
				s.OldestHeld = e.Since
			}
			s.Held++
		}
		return true, nil
	})
	return s, err
}

// OutcomeCounts returns how many outcome events of each status the index
// has seen.
func (p *Projection) OutcomeCounts() (map[schemas.Status]uint64, error) {
	out := map[schemas.Status]uint64{}
	err := p.scan([]byte{pfxCount}, func(k, v []byte) (bool, error) {
		if len(v) == 8 {
			out[schemas.Status(k[1:])] = binary.BigEndian.Uint64(v)
		}
		return true, nil
	})
	return out, err
}

// Filter is a search.
type Filter struct {
	Key, Entity, Command, Action string
	Status                       schemas.Status
	// From and To bound the time of the execution's latest change.
	From, To time.Time
}

func (f Filter) match(e *Execution) bool {
	switch {
	case f.Key != "" && e.Key != f.Key,
		f.Entity != "" && e.Entity != f.Entity,
		f.Action != "" && e.Action != f.Action,
		f.Status != "" && e.Status != f.Status,
		!f.From.IsZero() && e.UpdatedAt.Before(f.From),
		!f.To.IsZero() && e.UpdatedAt.After(f.To):
		return false
	}
	return true
}

// maxScan bounds how many executions one search reads when it has
// neither a key, an entity nor a command id to go by.
const maxScan = 200_000

// Search returns up to limit executions matching f, newest change first,
// and whether the search stopped early (more matches, or the scan bound).
func (p *Projection) Search(f Filter, limit int) ([]Execution, bool, error) {
	var out []Execution
	var ids [][]byte
	truncated := false
	switch {
	case f.Key != "":
		pfx := withPrefix(pfxKey, enc(nil, f.Key))
		err := p.scan(pfx, func(k, _ []byte) (bool, error) {
			ent, _, err := dec(k[len(pfx):])
			if err != nil {
				return true, nil
			}
			ids = append(ids, execID(ent, f.Key))
			return true, nil
		})
		if err != nil {
			return nil, false, err
		}
	case f.Command != "":
		pfx := withPrefix(pfxCommand, enc(nil, f.Command))
		err := p.scan(pfx, func(k, _ []byte) (bool, error) {
			ids = append(ids, slices.Clone(k[len(pfx):]))
			return true, nil
		})
		if err != nil {
			return nil, false, err
		}
	default:
		pfx := []byte{pfxExec}
		if f.Entity != "" {
			pfx = withPrefix(pfxExec, enc(nil, f.Entity))
		}
		n := 0
		err := p.scan(pfx, func(_, v []byte) (bool, error) {
			n++
			if n > maxScan {
				truncated = true
				return false, nil
			}
			var e Execution
			if err := jsonUnmarshal(v, &e); err != nil {
				return false, err
			}
			if f.match(&e) {
				out = append(out, e)
			}
			return true, nil
		})
		if err != nil {
			return nil, false, err
		}
	}
	for _, id := range ids {
		e, err := p.execOf(id)
		if err != nil {
			return nil, false, err
		}
		if e != nil && f.match(e) && !slices.ContainsFunc(out, func(x Execution) bool { return x.Entity == e.Entity && x.Key == e.Key }) {
			out = append(out, *e)
		}
	}
	slices.SortFunc(out, func(a, b Execution) int {
		return cmp.Or(b.UpdatedAt.Compare(a.UpdatedAt), cmp.Compare(a.Entity, b.Entity), cmp.Compare(a.Key, b.Key))
	})
	if len(out) > limit {
		out, truncated = out[:limit], true
	}
	return out, truncated, nil
}
