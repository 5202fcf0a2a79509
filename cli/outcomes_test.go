package cli

import (
	"context"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/onceflight/onceflight/client"
	"github.com/onceflight/onceflight/internal/testlog"
	"github.com/onceflight/onceflight/internal/wire"
	"github.com/onceflight/onceflight/schemas"
)

func TestOutcomesRange(t *testing.T) {
	now := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	at := func(s string) time.Time {
		tm, err := time.Parse(time.RFC3339, s)
		if err != nil {
			t.Fatal(err)
		}
		return tm
	}
	for _, c := range []struct {
		name      string
		o         outcomesOptions
		partition bool
		want      client.Range
	}{
		{"no start follows from the end", outcomesOptions{}, false, client.Range{Follow: true}},
		{"end follows", outcomesOptions{offset: "end"}, false, client.Range{Follow: true}},
		{"beginning reads to the end", outcomesOptions{offset: "beginning"}, false, client.Range{Start: client.FromBeginning()}},
		{"from-beginning alias", outcomesOptions{fromBeginning: true}, false, client.Range{Start: client.FromBeginning()}},
		{"from-beginning follow", outcomesOptions{fromBeginning: true, follow: true}, false, client.Range{Start: client.FromBeginning(), Follow: true}},
		{"follow alone", outcomesOptions{follow: true}, false, client.Range{Follow: true}},
		{"offset", outcomesOptions{offset: "42", partition: 3}, true, client.Range{Partitions: []int32{3}, Start: client.FromOffset(42)}},
		{"offset before the end", outcomesOptions{offset: "-10"}, false, client.Range{Start: client.FromOffset(-10)}},
		{"partition 0 counts", outcomesOptions{}, true, client.Range{Partitions: []int32{0}, Follow: true}},
		{"since a duration", outcomesOptions{since: "15m"}, false, client.Range{Start: client.FromTime(now.Add(-15 * time.Minute))}},
		{"since a time", outcomesOptions{since: "2026-11-30T08:00:00Z"}, false, client.Range{Start: client.FromTime(at("2026-11-30T08:00:00Z"))}},
		{"since unix ms", outcomesOptions{since: "1764576000000"}, false, client.Range{Start: client.FromTime(time.UnixMilli(1764576000000))}},
		{"until alone ends the follow", outcomesOptions{until: "now"}, false, client.Range{Until: now}},
		{"until with follow", outcomesOptions{offset: "beginning", until: "2026-12-01T11:00:00+01:00", follow: true}, false,
			client.Range{Start: client.FromBeginning(), Until: at("2026-12-01T10:00:00Z"), Follow: true}},
	} {
		t.Run(c.name, func(t *testing.T) {
			c.o.output = newEnum("json", "json", "table")
			got, err := c.o.readRange(c.partition, now)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(got.Partitions, c.want.Partitions) || got.Start.Kind != c.want.Start.Kind || got.Start.Offset != c.want.Start.Offset ||
				!got.Start.Time.Equal(c.want.Start.Time) || !got.Until.Equal(c.want.Until) || got.Follow != c.want.Follow {
				t.Errorf("readRange = %+v, want %+v", got, c.want)
			}
		})
	}
	for _, c := range []struct {
		o    outcomesOptions
		want string
	}{
		{outcomesOptions{partition: -1}, "--partition must be >= 0"},
		{outcomesOptions{offset: "start"}, `--offset "start": want beginning, end`},
		{outcomesOptions{since: "yesterday"}, `--since: "yesterday" is not an RFC 3339 time`},
		{outcomesOptions{since: "-5m"}, "negative"},
		{outcomesOptions{until: "soon"}, "--until:"},
		{outcomesOptions{since: "1h", until: "2h"}, "is before --since"},
	} {
		if _, err := c.o.readRange(true, now); err == nil || !strings.Contains(err.Error(), c.want) || exitCode(err) != exitUsage {
			t.Errorf("readRange(%+v) error = %v, want a usage error with %q", c.o, err, c.want)
		}
	}
}

// TestOutcomesReplay reads outcomes written at known partitions, offsets
// and times with each start, end and filter.
func TestOutcomesReplay(t *testing.T) {
	ctx, addr, _ := startEnv(t, nil)
	cl, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.ProducerLinger(0))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for _, o := range []struct {
		p              int32
		entity, key    string
		status         schemas.Status
		afterT0        time.Duration
		replayed, code bool
	}{
		{0, "e1", "k1", schemas.StatusSucceeded, 0, false, false},
		{0, "e1", "k2", schemas.StatusFailed, time.Hour, false, true},
		{1, "e2", "k3", schemas.StatusUnresolved, 2 * time.Hour, false, true},
		{1, "e2", "k4", schemas.StatusSucceeded, 3 * time.Hour, true, false},
	} {
		r := schemas.Record{IdempotencyKey: o.key, Entity: o.entity, Action: "payments.refund", Status: o.status}
		if o.code {
			r.Error = &schemas.Error{Code: "boom", Message: "m"}
		}
		rec, err := wire.EncodeOutcome(r, "cmd-"+o.key, o.replayed)
		if err != nil {
			t.Fatal(err)
		}
		rec.Topic, rec.Partition, rec.Timestamp = schemas.DefaultOutcomesTopic, o.p, t0.Add(o.afterT0)
		if err := cl.ProduceSync(ctx, rec).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	h := func(d int) string { return t0.Add(time.Duration(d) * time.Hour).Format(time.RFC3339) }
	keyRe := regexp.MustCompile(`"idempotencykey":"(k[0-9])"`)
	for _, c := range []struct {
		args []string
		want string // the keys printed, in partition then offset order
	}{
		{[]string{"--offset", "beginning"}, "k1 k2 k3 k4"},
		{[]string{"--from-beginning"}, "k1 k2 k3 k4"},
		{[]string{"--partition", "1", "--offset", "beginning"}, "k3 k4"},
		{[]string{"--offset", "1"}, "k2 k4"},
		{[]string{"--offset", "-1"}, "k2 k4"},
		{[]string{"--offset", "-5"}, "k1 k2 k3 k4"},
		{[]string{"--offset", "9"}, ""},
		{[]string{"--since", h(1)}, "k2 k3 k4"},
		{[]string{"--since", fmt.Sprint(t0.Add(2 * time.Hour).UnixMilli())}, "k3 k4"},
		{[]string{"--offset", "beginning", "--until", h(1)}, "k1 k2"},
		{[]string{"--since", h(1), "--until", h(2)}, "k2 k3"},
		{[]string{"--since", "1h"}, ""},
		{[]string{"--offset", "beginning", "--until", "now"}, "k1 k2 k3 k4"},
		{[]string{"--offset", "beginning", "--status", "succeeded,failed"}, "k1 k2 k4"},
		{[]string{"--offset", "beginning", "--status", "unresolved"}, "k3"},
		{[]string{"--offset", "beginning", "--entity", "e2"}, "k3 k4"},
		{[]string{"--offset", "beginning", "--entity", "e2", "--key", "k4"}, "k4"},
		// An --until still ahead follows until it passes, then ends.
		{[]string{"--offset", "beginning", "--until", time.Now().Add(time.Second).Format(time.RFC3339Nano)}, "k1 k2 k3 k4"},
	} {
		code, out, errOut := execCLI(ctx, append([]string{"outcomes", "--brokers", addr}, c.args...)...)
		if code != exitOK {
			t.Errorf("%v: exit %d, stderr %q", c.args, code, errOut)
			continue
		}
		var keys []string
		for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
			if m := keyRe.FindStringSubmatch(line); m != nil {
				keys = append(keys, m[1])
			}
		}
		slices.Sort(keys) // partitions interleave; keys sort in partition, offset order here
		if got := strings.Join(keys, " "); got != c.want || strings.Count(out, "\n") != len(keys) {
			t.Errorf("%v: printed %q (%d lines), want %q", c.args, got, strings.Count(out, "\n"), c.want)
		}
	}

	code, out, errOut := execCLI(ctx, "outcomes", "--brokers", addr, "--offset", "beginning", "-o", "table", "--partition", "1")
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if code != exitOK || len(lines) != 3 || !strings.HasPrefix(lines[0], "TIME") ||
		!regexp.MustCompile(`^2026-01-01T02:00:00Z +1 +0 +e2 +k3 +payments\.refund +unresolved +boom +false$`).MatchString(lines[1]) ||
		!regexp.MustCompile(`^2026-01-01T03:00:00Z +1 +1 +e2 +k4 +payments\.refund +succeeded +true$`).MatchString(lines[2]) {
		t.Errorf("table: exit %d, stderr %q, out\n%s", code, errOut, out)
	}

	for _, c := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"--partition", "7"}, exitError, "has no partition 7"},
		{[]string{"--status", "done"}, exitUsage, `--status "done"`},
		{[]string{"--offset", "1", "--since", "1h"}, exitUsage, "none of the others can be"},
		{[]string{"-o", "yaml"}, exitUsage, "must be one of json, table"},
	} {
		code, _, errOut := execCLI(ctx, append([]string{"outcomes", "--brokers", addr}, c.args...)...)
		if code != c.code || !strings.Contains(errOut, c.want) {
			t.Errorf("%v: exit %d, stderr %q, want exit %d and %q", c.args, code, errOut, c.code, c.want)
		}
	}
}

// With no start, outcomes follows from the end: it prints what is
// published after it started and nothing older, until interrupted.
func TestOutcomesFollowsFromTheEnd(t *testing.T) {
	ctx, addr, cl := startEnv(t, nil)
	publish := func(key string) {
		rec, err := wire.EncodeOutcome(schemas.Record{IdempotencyKey: key, Entity: "e", Status: schemas.StatusSucceeded}, "c-"+key, false)
		if err != nil {
			t.Fatal(err)
		}
		rec.Topic = schemas.DefaultOutcomesTopic
		if err := cl.ProduceSync(ctx, rec).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	publish("old")

	fctx, stop := context.WithCancel(ctx)
	defer stop()
	var stdout, stderr testlog.Buffer
	done := make(chan error, 1)
	go func() {
		root := newRootCmd()
		root.SetArgs([]string{"outcomes", "--brokers", addr})
		root.SetOut(&stdout)
		root.SetErr(&stderr)
		done <- root.ExecuteContext(fctx)
	}()
	// The follower takes the end when it starts; publish until it has
	// shown a new event, however late it started.
	for i := 0; !strings.Contains(stdout.String(), `"new-`); i++ {
		select {
		case err := <-done:
			t.Fatalf("outcomes ended before it was interrupted: %v, stderr %q", err, stderr.String())
		case <-ctx.Done():
			t.Fatal("no new event shown")
		case <-time.After(50 * time.Millisecond):
		}
		publish(fmt.Sprint("new-", i))
	}
	stop()
	if err := <-done; err != nil {
		t.Fatalf("interrupted follow: %v", err)
	}
	if strings.Contains(stdout.String(), `"old"`) {
		t.Errorf("the follower printed an event from before it started:\n%s", stdout.String())
	}
}
