package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// auditRun is what the audit phase measures (issue 24 item 6): how long
// `onceflight audit` takes next to a plain read of the same four topics,
// and its peak RSS, which must not grow with the number of keys.
type auditRun struct {
	rawRecords int
	rawTime    time.Duration
	took       time.Duration
	cpu        time.Duration
	rssKB      int64
	verdict    string
	rep        auditReport
}

// auditPhase reads the four topics raw (one read_committed consumer of all
// of them, what kcat does), then runs `onceflight audit` as its own process
// over the same topics, timing it and taking its peak RSS from the exit
// rusage (ru_maxrss: the process's high-water mark, in KiB on Linux).
func (b *bench) auditPhase(ctx context.Context, extraArgs []string) (ar auditRun, err error) {
	all := []string{b.topics.Commands, b.topics.Journal, b.topics.Outcomes, b.topics.Deadletter}
	if ar.rawRecords, ar.rawTime, err = b.rawReadTopics(ctx, all...); err != nil {
		return ar, err
	}
	args := append([]string{"audit", "--format", "json", "--group", b.group}, b.kafkaArgs()...)
	args = append(args, extraArgs...)
	cmd := exec.CommandContext(ctx, b.bin, args...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	start := time.Now()
	runErr := cmd.Run()
	ar.took = time.Since(start)
	_ = os.WriteFile(filepath.Join(b.dir, "audit-audit.json"), out.Bytes(), 0o644)
	var ee *exec.ExitError
	if runErr != nil && (!errors.As(runErr, &ee) || ee.ExitCode() != 5) {
		return ar, fmt.Errorf("audit: %w: %s", runErr, strings.TrimSpace(errb.String()))
	}
	if ps := cmd.ProcessState; ps != nil {
		ar.cpu = ps.UserTime() + ps.SystemTime()
		if ru, ok := ps.SysUsage().(*syscall.Rusage); ok {
			ar.rssKB = ru.Maxrss
		}
	}
	if err := json.Unmarshal(out.Bytes(), &ar.rep); err != nil {
		return ar, fmt.Errorf("audit: decode report: %w", err)
	}
	ar.verdict = ar.rep.verdict()
	if strings.HasPrefix(ar.verdict, "FAIL") {
		return ar, fmt.Errorf("audit failed: %s (report in %s)", ar.verdict, filepath.Join(b.dir, "audit-audit.json"))
	}
	return ar, nil
}

// auditRows are the audit phase's rows: the raw read, and the audit's time
// against it (goal ≤ 2×) with its peak RSS.
func auditRows(ar auditRun) []row {
	raw := row{Phase: "audit", Measure: "raw read of the 4 topics: records/s", Value: rate(ar.rawRecords, ar.rawTime), Unit: "/s",
		Note: fmt.Sprintf("%d records in %.2fs, one read_committed consumer (as kcat)", ar.rawRecords, ar.rawTime.Seconds())}
	r := row{Phase: "audit", Measure: "onceflight audit: time / raw read", Value: ar.took.Seconds(), Unit: "s",
		Vs: "raw read", Ratio: ratio(ar.took.Seconds(), ar.rawTime.Seconds()), RSSMB: float64(ar.rssKB) / 1024, Audit: ar.verdict}
	if r.Ratio > 0 {
		goalAtMost(&r, r.Ratio, 2, "2×")
	}
	if c := ar.rep.Counts.Commands; c > 0 {
		r.CPUPerCmd = perInput(ar.cpu, c)
	}
	r.Note = fmt.Sprintf("%d cmds, %d outcomes, %.1fs CPU; peak RSS is the process's ru_maxrss", ar.rep.Counts.Commands, ar.rep.Counts.Outcomes, ar.cpu.Seconds())
	return []row{raw, r}
}

// rawReadTopics reads topics from their start to their end offsets with one
// plain read_committed consumer, counting data records.
func (b *bench) rawReadTopics(ctx context.Context, topics ...string) (int, time.Duration, error) {
	left := map[string]map[int32]int64{}
	for _, t := range topics {
		ends, _, err := b.endOffsets(ctx, t)
		if err != nil {
			return 0, 0, err
		}
		for p, o := range ends {
			if off := o.EpochOffset().Offset; off > 0 {
				if left[t] == nil {
					left[t] = map[int32]int64{}
				}
				left[t][p] = off
			}
		}
	}
	start := time.Now()
	cl, err := kgo.NewClient(kgo.SeedBrokers(b.brokers...),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.KeepControlRecords(),
		kgo.ConsumeTopics(topics...),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		return 0, 0, fmt.Errorf("raw read client: %w", err)
	}
	defer cl.Close()
	records, n := 0, 0
	for _, ps := range left {
		n += len(ps)
	}
	for n > 0 {
		fs := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			return records, 0, fmt.Errorf("raw read of %v: %w", topics, err)
		}
		fs.EachRecord(func(r *kgo.Record) {
			if !r.Attrs.IsControl() {
				records++
			}
			if end, ok := left[r.Topic][r.Partition]; ok && r.Offset+1 >= end {
				delete(left[r.Topic], r.Partition)
				n--
			}
		})
	}
	return records, time.Since(start), nil
}
