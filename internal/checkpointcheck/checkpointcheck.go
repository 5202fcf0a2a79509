// Package checkpointcheck checks signed checkpoints against the journal
// they sign (docs/trust.md): it replays a partition into its Merkle tree
// and says which checkpoints match, proves a key's records against the
// largest matching one, and lists the trusted checkpoints of a topic. Only
// the trust commands of the command line use it; a Go program that checks
// proofs offline needs only package trust.
package checkpointcheck

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/onceflight/onceflight/internal/client"
	"github.com/onceflight/onceflight/internal/rangeread"
	"github.com/onceflight/onceflight/internal/trustlog"
	"github.com/onceflight/onceflight/internal/wire"
	"github.com/onceflight/onceflight/partitioner"
	"github.com/onceflight/onceflight/schemas"
	"github.com/onceflight/onceflight/trust"
)

// Options configure Verify and Prove: the journal, whose
// checkpoints are checked against which keys.
type Options struct {
	// Client reaches the cluster; it must not be a group consumer (the
	// reads use clients derived from its options) and is not closed.
	Client *kgo.Client
	// Journal topic; default onceflight.journal.
	Journal string
	// OriginPrefix of the checkpoints; default "onceflight/" + Journal.
	OriginPrefix string
	// Trusted are the keys whose checkpoints are believed.
	Trusted *trust.TrustedKeys
	// Checkpoints are signed notes (an auditor's saved copies).
	Checkpoints [][]byte
	// Topic, if set, is a checkpoints topic whose every record is read
	// as a checkpoint too.
	Topic string
	// Partitions restricts the check; empty: every partition.
	Partitions []int32
	// RequireSigned (Verify): every journal record must be covered by a
	// seal signed by a trusted key (docs/trust.md#signed-transactions).
	RequireSigned bool
}

func (o *Options) defaults() {
	if o.Journal == "" {
		o.Journal = schemas.DefaultTopics().Journal
	}
	if o.OriginPrefix == "" {
		o.OriginPrefix = "onceflight/" + o.Journal
	}
}

// ErrBadPartition is rangeread.ErrBadPartition (and audit's): a
// partition Options names that the topic does not have is one mistake for
// every reader of partition ranges, checked with one error.
var ErrBadPartition = rangeread.ErrBadPartition

// VerifyReport is the verdict of Verify.
type VerifyReport struct {
	Journal string `json:"journal"`
	// Partitions lists each checked partition.
	Partitions []PartitionVerdict `json:"partitions"`
	// Refused are checkpoints whose signature, key or origin is refused.
	Refused []string `json:"refused"`
}

// PartitionVerdict is one partition's replay against its checkpoints.
type PartitionVerdict struct {
	Partition int32 `json:"partition"`
	// Records is the number of journal records replayed (tree leaves).
	Records uint64 `json:"records"`
	// Checkpoints is the number of checkpoints checked.
	Checkpoints int `json:"checkpoints"`
	// Largest is the size of the largest checkpoint that matched.
	Largest uint64 `json:"largest_verified"`
	// Problems say what does not hold; empty: all checkpoints match.
	Problems []string `json:"problems"`
}

// OK reports whether every checkpoint was accepted and matches.
func (r VerifyReport) OK() bool {
	if len(r.Refused) > 0 {
		return false
	}
	for _, p := range r.Partitions {
		if len(p.Problems) > 0 {
			return false
		}
	}
	return true
}

// WriteText writes the report for a person.
func (r VerifyReport) WriteText(w io.Writer) error {
	var b strings.Builder
	for _, s := range r.Refused {
		fmt.Fprintf(&b, "REFUSED  %s\n", s)
	}
	for _, p := range r.Partitions {
		verdict := "ok"
		if len(p.Problems) > 0 {
			verdict = "FAILED"
		}
		fmt.Fprintf(&b, "%-6s   %s partition %d: %d records, %d checkpoints, largest verified %d\n",
			verdict, r.Journal, p.Partition, p.Records, p.Checkpoints, p.Largest)
		for _, s := range p.Problems {
			fmt.Fprintf(&b, "         %s\n", s)
		}
	}
	if r.OK() {
		b.WriteString("every checkpoint matches the journal\n")
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// collect opens every checkpoint (given and from the topic) and groups the
// accepted ones by partition, sorted by size.
func collect(ctx context.Context, o *Options, nPart int) (map[int32][]held, []string, error) {
	var notes []*kgo.Record
	for _, n := range o.Checkpoints {
		notes = append(notes, &kgo.Record{Value: n})
	}
	if o.Topic != "" {
		fromTopic, err := readTopic(ctx, o.Client, o.Topic)
		if err != nil {
			return nil, nil, err
		}
		notes = append(notes, fromTopic...)
	}
	known := func(origin string) bool {
		s, ok := strings.CutPrefix(origin, o.OriginPrefix+"/")
		p, err := strconv.Atoi(s)
		return ok && err == nil && p >= 0 && p < nPart && strconv.Itoa(p) == s
	}
	by := map[int32][]held{}
	var refused []string
	for i, n := range notes {
		cp, err := trust.OpenCheckpoint(n.Value, o.Trusted, known)
		if err != nil {
			where := fmt.Sprintf("checkpoint %d", i+1)
			if n.Topic != "" {
				where = fmt.Sprintf("%s partition %d offset %d", n.Topic, n.Partition, n.Offset)
			}
			refused = append(refused, fmt.Sprintf("%s: %v", where, err))
			continue
		}
		p, _ := strconv.Atoi(strings.TrimPrefix(cp.Origin, o.OriginPrefix+"/"))
		by[int32(p)] = append(by[int32(p)], held{cp, n.Headers})
	}
	for p := range by {
		slices.SortStableFunc(by[p], func(a, b held) int { return cmp.Compare(a.Size, b.Size) })
	}
	return by, refused, nil
}

// held is an accepted checkpoint, with its record's headers when it came
// from the topic (a tree to go on from).
type held struct {
	*trust.Checkpoint
	headers []kgo.RecordHeader
}

// readTopic reads every record of a checkpoints topic.
func readTopic(ctx context.Context, cl *kgo.Client, topic string) ([]*kgo.Record, error) {
	adm := kadm.NewClient(cl)
	listed, err := adm.ListEndOffsets(ctx, topic)
	ends, err := client.Offsets(listed, err, []string{topic})
	if err != nil {
		return nil, err
	}
	listed, err = adm.ListStartOffsets(ctx, topic)
	starts, err := client.Offsets(listed, err, []string{topic})
	if err != nil {
		return nil, err
	}
	rs := map[string]map[int32][2]int64{topic: {}}
	for p, end := range ends[topic] {
		if s := starts[topic][p]; s < end {
			rs[topic][p] = [2]int64{s, end}
		}
	}
	var out []*kgo.Record
	err = rangeread.Read(ctx, cl, rs, func(batch []*kgo.Record) { out = append(out, batch...) })
	return out, err
}

// journalPartitions lists the journal's partitions and their bounds.
func journalPartitions(ctx context.Context, cl *kgo.Client, journal string) (starts, ends map[int32]int64, err error) {
	adm := kadm.NewClient(cl)
	listed, err := adm.ListEndOffsets(ctx, journal)
	e, err := client.Offsets(listed, err, []string{journal})
	if err != nil {
		return nil, nil, err
	}
	listed, err = adm.ListStartOffsets(ctx, journal)
	s, err := client.Offsets(listed, err, []string{journal})
	if err != nil {
		return nil, nil, err
	}
	return s[journal], e[journal], nil
}

// replay reads each journal partition in ps from from[p] to its end
// (every committed record, in offset order) and calls each with it.
func replay(ctx context.Context, cl *kgo.Client, journal string, ps []int32, from, ends map[int32]int64, each func(r *kgo.Record)) error {
	rs := map[string]map[int32][2]int64{journal: {}}
	for _, p := range ps {
		if from[p] < ends[p] {
			rs[journal][p] = [2]int64{from[p], ends[p]}
		}
	}
	return rangeread.Read(ctx, cl, rs, func(batch []*kgo.Record) {
		for _, r := range batch {
			each(r)
		}
	})
}

// fullLogs replays ps from their starts into full trees; each, if set,
// sees every record with its leaf index.
func fullLogs(ctx context.Context, cl *kgo.Client, journal string, ps []int32, starts, ends map[int32]int64, each func(index uint64, r *kgo.Record)) (map[int32]*trustlog.Log, error) {
	logs := map[int32]*trustlog.Log{}
	for _, p := range ps {
		logs[p] = &trustlog.Log{}
	}
	err := replay(ctx, cl, journal, ps, starts, ends, func(r *kgo.Record) {
		l := logs[r.Partition]
		if each != nil {
			each(l.Size(), r)
		}
		l.Append(trust.RecordLeafHash(r))
	})
	return logs, err
}

// Verify replays the journal and checks every checkpoint against it: the
// first Size records of its partition must hash to its root. A deleted,
// altered, reordered or inserted record before a checkpoint's size, a
// journal truncated below it or recreated from scratch, each fails. Two
// checkpoints of one partition must also be consistent (the smaller a
// prefix of the larger): two signed histories are a fork.
func Verify(ctx context.Context, o Options) (VerifyReport, error) {
	o.defaults()
	if o.Trusted == nil {
		return VerifyReport{}, errors.New("audit verify: no trusted keys")
	}
	starts, ends, err := journalPartitions(ctx, o.Client, o.Journal)
	if err != nil {
		return VerifyReport{}, err
	}
	for _, p := range o.Partitions {
		if _, ok := ends[p]; !ok {
			return VerifyReport{}, fmt.Errorf("partition %d: %w (%s has %d partitions)", p, ErrBadPartition, o.Journal, len(ends))
		}
	}
	by, refused, err := collect(ctx, &o, len(ends))
	if err != nil {
		return VerifyReport{}, err
	}
	ps := o.Partitions
	if len(ps) == 0 {
		for p := range ends {
			ps = append(ps, p)
		}
		slices.Sort(ps)
	}
	unsigned, err := checkSeals(ctx, o, ps, starts, ends)
	if err != nil {
		return VerifyReport{}, err
	}
	var full, seeded []int32
	for _, p := range ps {
		if starts[p] == 0 {
			full = append(full, p)
		} else {
			seeded = append(seeded, p)
		}
	}
	logs, err := fullLogs(ctx, o.Client, o.Journal, full, starts, ends, nil)
	if err != nil {
		return VerifyReport{}, err
	}
	verdicts := map[int32]*PartitionVerdict{}
	for _, p := range full {
		verdicts[p] = verifyFull(p, logs[p], by[p])
	}
	vs, err := verifySeeded(ctx, o, seeded, starts, ends, by)
	if err != nil {
		return VerifyReport{}, err
	}
	maps.Copy(verdicts, vs)
	rep := VerifyReport{Journal: o.Journal, Refused: refused}
	for _, p := range ps {
		v := *verdicts[p]
		v.Problems = append(v.Problems, unsigned[p]...)
		rep.Partitions = append(rep.Partitions, v)
	}
	return rep, nil
}

// checkSeals replays ps (when o.RequireSigned) through a seal checker
// each and returns, per partition, every stretch of records no trusted
// seal covers.
func checkSeals(ctx context.Context, o Options, ps []int32, starts, ends map[int32]int64) (map[int32][]string, error) {
	out := map[int32][]string{}
	if !o.RequireSigned {
		return out, nil
	}
	cs := map[int32]*trustlog.SealScan{}
	for _, p := range ps {
		cs[p] = trustlog.NewSealScan(trust.Origin(o.OriginPrefix, p), o.Trusted, starts[p] > 0)
	}
	err := replay(ctx, o.Client, o.Journal, ps, starts, ends, func(r *kgo.Record) { cs[r.Partition].Add(r, nil) })
	if err != nil {
		return nil, err
	}
	for _, p := range ps {
		_, us, _ := cs[p].End()
		for _, u := range us {
			out[p] = append(out[p], u.Error())
		}
	}
	return out, nil
}

func stamp(cp held) string {
	return fmt.Sprintf("signed by %s at %s", cp.Signer, cp.Time.Format(time.RFC3339))
}

func tooBig(cp held, have uint64) string {
	return fmt.Sprintf("checkpoint of %d records (%s) but the journal holds %d: records were deleted or the journal was truncated or recreated",
		cp.Size, stamp(cp), have)
}

func mismatch(cp held) string {
	return fmt.Sprintf("the journal's first %d records do not match the checkpoint of that size (%s): a record before it was altered, reordered, deleted or inserted, or the journal was recreated",
		cp.Size, stamp(cp))
}

// verifyFull checks a partition replayed from its first record.
func verifyFull(p int32, l *trustlog.Log, cps []held) *PartitionVerdict {
	v := &PartitionVerdict{Partition: p, Records: l.Size(), Checkpoints: len(cps)}
	for _, cp := range cps {
		if cp.Size > l.Size() {
			v.Problems = append(v.Problems, tooBig(cp, l.Size()))
			continue
		}
		if root, _ := l.RootAt(cp.Size); !bytes.Equal(root, cp.Root) {
			v.Problems = append(v.Problems, mismatch(cp))
			continue
		}
		v.Largest = max(v.Largest, cp.Size)
	}
	// Each checkpoint with the next larger one: with both matching the
	// replay it holds by construction; checked so that two signed
	// histories are named as such.
	for i := 1; i < len(cps); i++ {
		a, b := cps[i-1], cps[i]
		if b.Size > l.Size() || a.Size == 0 {
			continue
		}
		proof, err := l.Consistency(a.Size, b.Size)
		if err == nil {
			err = trust.VerifyConsistency(a.Size, b.Size, proof, a.Root, b.Root)
		}
		if err != nil {
			v.Problems = append(v.Problems, fmt.Sprintf("checkpoints of %d (%s) and %d records (%s) are not consistent: two different histories were signed",
				a.Size, stamp(a), b.Size, stamp(b)))
		}
	}
	return v
}

// verifySeeded checks partitions whose first records were deleted
// (retention): each goes on from the smallest checkpoint on the topic that
// ends at or after the journal's start (its compact range checked against
// its signed root) and checks the checkpoints from there on. Those before
// it are counted but cannot be checked against records that are gone.
func verifySeeded(ctx context.Context, o Options, ps []int32, starts, ends map[int32]int64, by map[int32][]held) (map[int32]*PartitionVerdict, error) {
	out := map[int32]*PartitionVerdict{}
	trees := map[int32]*trustlog.Tree{}
	from := map[int32]int64{}
	var run []int32
	for _, p := range ps {
		v := &PartitionVerdict{Partition: p, Checkpoints: len(by[p])}
		out[p] = v
		for _, cp := range by[p] {
			if cp.headers == nil {
				continue
			}
			t, next, err := trustlog.ResumeFrom(cp.Checkpoint, cp.headers)
			if err != nil || next < starts[p] || next > ends[p] {
				continue
			}
			trees[p], from[p] = t, next
			v.Largest = cp.Size
			break
		}
		if trees[p] == nil {
			if len(by[p]) > 0 {
				v.Problems = append(v.Problems, fmt.Sprintf("the journal starts at offset %d (records before it deleted, by retention?) and no checkpoint on the checkpoints topic ends at or after it: nothing can be checked", starts[p]))
			}
			continue
		}
		run = append(run, p)
	}
	pending := map[int32][]held{}
	for _, p := range run {
		for _, cp := range by[p] {
			if cp.Size > trees[p].Size() {
				pending[p] = append(pending[p], cp)
			}
		}
	}
	err := replay(ctx, o.Client, o.Journal, run, from, ends, func(r *kgo.Record) {
		t := trees[r.Partition]
		t.Append(trust.RecordLeafHash(r))
		for q := pending[r.Partition]; len(q) > 0 && q[0].Size == t.Size(); q = pending[r.Partition] {
			v := out[r.Partition]
			if bytes.Equal(t.Root(), q[0].Root) {
				v.Largest = max(v.Largest, q[0].Size)
			} else {
				v.Problems = append(v.Problems, mismatch(q[0]))
			}
			pending[r.Partition] = q[1:]
		}
	})
	if err != nil {
		return nil, err
	}
	for _, p := range run {
		v := out[p]
		v.Records = trees[p].Size()
		for _, cp := range pending[p] {
			v.Problems = append(v.Problems, tooBig(cp, v.Records))
		}
	}
	return out, nil
}

// Proved is one record with its proof bundle.
type Proved struct {
	Partition int32
	Offset    int64
	Index     uint64
	Record    schemas.Record
	Bundle    []byte
}

// ErrNoCheckpoint means no trusted checkpoint covers the records to prove.
var ErrNoCheckpoint = errors.New("no trusted checkpoint covers the record")

// Prove finds the journal records of (entity, key) and proves each
// against the largest trusted checkpoint of its partition that matches
// the journal and covers it.
func Prove(ctx context.Context, o Options, entity, key string) ([]Proved, error) {
	o.defaults()
	starts, ends, err := journalPartitions(ctx, o.Client, o.Journal)
	if err != nil {
		return nil, err
	}
	p := partitioner.ForEntity(entity, len(ends))
	by, _, err := collect(ctx, &o, len(ends))
	if err != nil {
		return nil, err
	}
	if starts[p] > 0 {
		return nil, fmt.Errorf("journal partition %d starts at offset %d: records before it were deleted, so its tree cannot be rebuilt", p, starts[p])
	}
	var found []Proved
	logs, err := fullLogs(ctx, o.Client, o.Journal, []int32{p}, starts, ends, func(index uint64, r *kgo.Record) {
		if wire.JournalKind(r) != schemas.KindRecord || string(r.Key) != key {
			return
		}
		rec, err := schemas.UnmarshalRecord(r.Value)
		if err != nil || rec.Entity != entity {
			return
		}
		found = append(found, Proved{Partition: p, Offset: r.Offset, Index: index, Record: rec, Bundle: trust.RecordLeafData(r)})
	})
	if err != nil {
		return nil, err
	}
	if len(found) == 0 {
		return nil, fmt.Errorf("no journal record of key %q of entity %q in %s partition %d", key, entity, o.Journal, p)
	}
	l := logs[p]
	var cp *trust.Checkpoint
	for _, c := range slices.Backward(by[p]) {
		if c.Size <= l.Size() {
			if root, _ := l.RootAt(c.Size); bytes.Equal(root, c.Root) {
				cp = c.Checkpoint
				break
			}
		}
	}
	last := found[len(found)-1].Index
	if cp == nil || cp.Size <= last {
		return nil, fmt.Errorf("%w: key %q's last record is leaf %d of partition %d; wait for the next checkpoint (or give a later one)", ErrNoCheckpoint, key, last, p)
	}
	for i := range found {
		hs, err := l.Inclusion(found[i].Index, cp.Size)
		if err != nil {
			return nil, err
		}
		found[i].Bundle = trust.Proof{Index: found[i].Index, Hashes: hs, Checkpoint: cp.Note, Leaf: found[i].Bundle}.Marshal()
	}
	return found, nil
}

// SavedCheckpoints reads o.Topic and returns the checkpoints signed by a
// trusted key, as signed notes, and why the others were refused.
func SavedCheckpoints(ctx context.Context, o Options) (good [][]byte, refused []string, err error) {
	o.defaults()
	_, ends, err := journalPartitions(ctx, o.Client, o.Journal)
	if err != nil {
		return nil, nil, err
	}
	by, refused, err := collect(ctx, &o, len(ends))
	if err != nil {
		return nil, nil, err
	}
	ps := make([]int32, 0, len(by))
	for p := range by {
		ps = append(ps, p)
	}
	slices.Sort(ps)
	for _, p := range ps {
		for _, cp := range by[p] {
			good = append(good, cp.Note)
		}
	}
	return good, refused, nil
}
