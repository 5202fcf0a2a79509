package cli

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/onceflight/onceflight/client"
	"github.com/onceflight/onceflight/schemas"
)

// outcomeStatuses are the statuses an outcome can carry, for --status.
var outcomeStatuses = []schemas.Status{schemas.StatusSucceeded, schemas.StatusFailed, schemas.StatusUnresolved, schemas.StatusRejected, schemas.StatusHeld}

// outcomesOptions are the outcomes command's flags.
type outcomesOptions struct {
	partition     int32
	offset        string
	since, until  string
	fromBeginning bool
	follow        bool
	entity, key   string
	statuses      []string
	output        *enumValue
}

func newOutcomesCmd() *cobra.Command {
	o := &outcomesOptions{output: newEnum("json", "json", "table")}
	var kf *kafkaFlags // set below, before RunE can run
	cmd := &cobra.Command{
		Use:   "outcomes [--partition P] [--offset N|beginning|end] [--since T] [--until T]",
		Short: "Print outcome events, live or replayed",
		Long: `Print outcome events (docs/events.md#execution-records): as JSON lines, each the record value as
published (-o json, the default), or as a table (-o table).

Where to start, in each partition read:
  (no start flag)      the end: follow new events until interrupted, as kcat
                       and the console consumer do
  --offset beginning   the oldest retained event (--from-beginning is the same)
  --offset end         the end, following (the same as no start flag)
  --offset N           offset N; a negative N is that many events before the end
  --since T            the first event stamped at or after T

A read with a start stops at the end as it was when the read began, unless
--follow is given; --until T stops at the first event stamped after T (or,
if T is in the future, keeps following until T). T is an RFC 3339 time
(2026-12-01T09:30:00Z), Unix milliseconds, "now", or a duration meaning
that long ago (15m, 2h).

--partition reads one partition of the outcomes topic (an entity's events
are all in one partition). --entity, --key and --status filter by the
outcome's subject, idempotency key and status (--status takes a list).
Only committed events are shown (read_committed). Order is per partition;
events of different partitions may interleave.`,
		Args: args(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			r, err := o.readRange(cmd.Flags().Changed("partition"), time.Now())
			if err != nil {
				return err
			}
			for _, s := range o.statuses {
				if !slices.Contains(outcomeStatuses, schemas.Status(s)) {
					return usageErrorf("--status %q: want one of %s", s, joinStatuses(outcomeStatuses))
				}
			}
			oc, closeFn, err := kf.onceflightClient(cmd.Context())
			if err != nil {
				return err
			}
			defer closeFn()
			return o.print(cmd.Context(), cmd.OutOrStdout(), oc, r)
		},
	}
	kf = addKafkaFlags(cmd)
	fs := cmd.Flags()
	fs.Int32Var(&o.partition, "partition", 0, "read only this partition (default all)")
	fs.StringVar(&o.offset, "offset", "", "start in each partition: beginning, end, N, or -N (N before the end)")
	fs.StringVar(&o.since, "since", "", "start at the first event stamped at or after this time (RFC 3339, Unix ms, now, or a duration ago)")
	fs.StringVar(&o.until, "until", "", "stop after the events stamped up to this time (same forms as --since)")
	fs.BoolVar(&o.fromBeginning, "from-beginning", false, "start at the oldest retained event (same as --offset beginning)")
	fs.BoolVar(&o.follow, "follow", false, "after the events up to now, keep printing new ones until interrupted")
	fs.StringVar(&o.entity, "entity", "", "only outcomes for this entity")
	fs.StringVar(&o.key, "key", "", "only outcomes for this idempotency key")
	fs.StringSliceVar(&o.statuses, "status", nil, "only outcomes with these statuses: "+joinStatuses(outcomeStatuses))
	fs.VarP(o.output, "output", "o", "output: json (lines as published) or table")
	cmd.MarkFlagsMutuallyExclusive("offset", "since", "from-beginning")
	return cmd
}

func joinStatuses(ss []schemas.Status) string {
	names := make([]string, len(ss))
	for i, s := range ss {
		names[i] = string(s)
	}
	return strings.Join(names, ", ")
}

// readRange turns the flags into what to read; now anchors relative times.
func (o *outcomesOptions) readRange(partitionSet bool, now time.Time) (client.Range, error) {
	var r client.Range
	if partitionSet {
		if o.partition < 0 {
			return r, usageErrorf("--partition must be >= 0, got %d", o.partition)
		}
		r.Partitions = []int32{o.partition}
	}
	started := true
	switch {
	case o.fromBeginning || o.offset == "beginning":
		r.Start = client.FromBeginning()
	case o.offset == "end":
		// An empty read to the current end would be pointless: like
		// no start, it follows.
		started = false
	case o.offset != "":
		n, err := strconv.ParseInt(o.offset, 10, 64)
		if err != nil {
			return r, usageErrorf("--offset %q: want beginning, end, an offset N or -N (N before the end)", o.offset)
		}
		r.Start = client.FromOffset(n)
	case o.since != "":
		t, err := parseTimeFlag(o.since, now)
		if err != nil {
			return r, usageErrorf("--since: %w", err)
		}
		r.Start = client.FromTime(t)
	default:
		started = false
	}
	if o.until != "" {
		t, err := parseTimeFlag(o.until, now)
		if err != nil {
			return r, usageErrorf("--until: %w", err)
		}
		if !r.Start.Time.IsZero() && t.Before(r.Start.Time) { // Time is set by --since only
			return r, usageErrorf("--until %s is before --since %s", t.Format(time.RFC3339Nano), r.Start.Time.Format(time.RFC3339Nano))
		}
		r.Until = t
	}
	// No start at all means following from the end (kcat, the console
	// consumer); a given start reads to the current end unless --follow.
	r.Follow = o.follow || (!started && o.until == "")
	return r, nil
}

// parseTimeFlag reads the time forms of --since and --until: RFC 3339,
// Unix milliseconds (kcat's s@ts), "now", or a Go duration meaning that
// long before now.
func parseTimeFlag(s string, now time.Time) (time.Time, error) {
	s = strings.TrimSpace(s)
	if s == "now" {
		return now, nil
	}
	if t, err := time.Parse(time.RFC3339Nano, s); err == nil {
		return t, nil
	}
	if ms, err := strconv.ParseInt(s, 10, 64); err == nil {
		return time.UnixMilli(ms), nil
	}
	if d, err := time.ParseDuration(s); err == nil {
		if d < 0 {
			return time.Time{}, fmt.Errorf("duration %q is negative; give how long ago, e.g. 15m", s)
		}
		return now.Add(-d), nil
	}
	return time.Time{}, fmt.Errorf("%q is not an RFC 3339 time (2026-12-01T09:30:00Z), Unix milliseconds, now, or a duration (15m)", s)
}

// keep reports whether an outcome passes the filters.
func (o *outcomesOptions) keep(oc client.Outcome) bool {
	return (o.entity == "" || oc.Entity == o.entity) &&
		(o.key == "" || oc.Key == o.key) &&
		(len(o.statuses) == 0 || slices.Contains(o.statuses, string(oc.Status)))
}

func (o *outcomesOptions) filtering() bool {
	return o.entity != "" || o.key != "" || len(o.statuses) > 0
}

// print reads r and writes the outcomes that pass the filters. In json
// output without filters, a record that is not a decodable outcome is
// printed as it is, like any Kafka tool would; a table or a filter skips it.
func (o *outcomesOptions) print(ctx context.Context, w io.Writer, oc *client.Client, r client.Range) error {
	out := bufio.NewWriter(w)
	defer out.Flush()
	table := o.output.v == "table"
	var tw *tabwriter.Writer
	if table {
		tw = tabwriter.NewWriter(out, 2, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "TIME\tPARTITION\tOFFSET\tENTITY\tKEY\tACTION\tSTATUS\tCODE\tREPLAYED")
	}
	// A live read is watched: show each event as it comes, not when
	// the buffer fills.
	live := r.Follow || (!r.Until.IsZero() && time.Until(r.Until) > 0)
	var err error
	for ev, rerr := range oc.ReadOutcomes(ctx, r) {
		var de *client.DecodeError
		if errors.As(rerr, &de) {
			slog.Debug("undecodable outcome", "partition", de.Partition, "offset", de.Offset, "err", de.Err)
			if table || o.filtering() {
				continue
			}
		} else if rerr != nil {
			err = rerr
			break
		} else if !o.keep(ev) {
			continue
		}
		rec := ev.Event
		if table {
			fmt.Fprintf(tw, "%s\t%d\t%d\t%s\t%s\t%s\t%s\t%s\t%t\n", rec.Timestamp.UTC().Format(time.RFC3339Nano),
				rec.Partition, rec.Offset, ev.Entity, ev.Key, ev.Action, ev.Status, ev.ErrorCode, ev.Replayed)
			if live {
				if err = errors.Join(tw.Flush(), out.Flush()); err != nil {
					break
				}
			}
			continue
		}
		if err = writeJSONLine(out, rec.Value); err != nil {
			break
		}
		if live {
			if err = out.Flush(); err != nil {
				break
			}
		}
	}
	if tw != nil {
		err = errors.Join(err, tw.Flush())
	}
	// Following ends only by interruption, which is the normal way to
	// stop it, not an error.
	if live && errors.Is(err, context.Canceled) {
		return nil
	}
	return err
}
