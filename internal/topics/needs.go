// Package topics holds the settings one build of the executor needs its
// topics to have (retention, cleanup policy, record size) and the check of
// a cluster against them, shared by serve and `onceflight topics`. The topic
// names themselves are wire values and live in schemas (schemas.Topics).
package topics

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"

	"github.com/onceflight/onceflight/schemas"
)

// The journal is the source of truth only while it is complete. Three
// settings decide that, so they are never left to the broker's defaults:
//
//   - retention.ms of the journal must cover key_memory + dedupe_retention:
//     a key is remembered for key_memory after it finished, and its record
//     is what an executor restoring into an empty data dir learns it from;
//   - retention.bytes must be unbounded: size-based deletion removes
//     records of any age;
//   - max.message.bytes of every topic must admit the producer's limit, so
//     that a record is known to fit before it is written (the committer
//     checks each record against the same limit).
//
// serve creates missing topics with these settings and refuses to start on
// existing ones that contradict them; `onceflight topics check` shows the
// same rows and `onceflight topics apply` raises what can be raised. One
// rule set serves all three, so they cannot disagree.

// Needs is what one build of the executor needs of its topics.
type Needs struct {
	Topics schemas.Topics
	// MaxMessageBytes is the producer's record limit (--max-message-bytes).
	MaxMessageBytes int
	// JournalRetention is key_memory + dedupe_retention + 1 day.
	JournalRetention time.Duration
}

// JournalMargin is added to key_memory + dedupe_retention for the
// journal's retention: a day for clock drift and slow segment rolls.
const JournalMargin = 24 * time.Hour

// Create returns the settings a topic is created with.
func (n Needs) Create(topic string) map[string]*string {
	s := func(v string) *string { return &v }
	cfg := map[string]*string{"max.message.bytes": s(strconv.Itoa(n.MaxMessageBytes))}
	if topic == n.Topics.Journal {
		cfg["cleanup.policy"] = s("delete")
		cfg["retention.ms"] = s(strconv.FormatInt(n.JournalRetention.Milliseconds(), 10))
		cfg["retention.bytes"] = s("-1")
	}
	if topic == n.Topics.Status {
		// One record per executor, its latest status: older ones are
		// worthless, so compaction keeps the topic small.
		cfg["cleanup.policy"] = s("compact")
	}
	return cfg
}

// Setting is one topic setting, as found, against what the build needs.
type Setting struct {
	Topic string
	Name  string
	// Found is the topic's value; "" when the broker reported none.
	Found string
	// Need says what is needed, in words ("≥ 4194304", "delete", "-1").
	Need string
	OK   bool
	// Raise is the value `topics apply` sets when OK is false; "" when the
	// change must be made by hand (it could delete records).
	Raise string
	// Why is the reason the setting matters, for the refusal message.
	Why string
}

// Problem is the setting's refusal line: topic, setting, found, needed.
func (s Setting) Problem() string {
	return fmt.Sprintf("topic %s: %s is %s, needs %s (%s)", s.Topic, s.Name, s.Found, s.Need, s.Why)
}

// Check compares the topics' settings, found[topic][name], with n. A
// setting the broker did not report is taken as fine: it is the broker's
// default, which this build cannot judge.
func (n Needs) Check(found map[string]map[string]string) []Setting {
	var out []Setting
	for _, topic := range n.Topics.All() {
		cfg := found[topic]
		mmb := Setting{Topic: topic, Name: "max.message.bytes", Found: cfg["max.message.bytes"], OK: true,
			Need: fmt.Sprintf("at least %d", n.MaxMessageBytes),
			Why:  "the producer's record limit, --max-message-bytes"}
		if v, err := strconv.Atoi(mmb.Found); err == nil && v < n.MaxMessageBytes {
			mmb.OK, mmb.Raise = false, strconv.Itoa(n.MaxMessageBytes)
		}
		out = append(out, mmb)
		if topic != n.Topics.Journal {
			continue
		}
		cp := Setting{Topic: topic, Name: "cleanup.policy", Found: cfg["cleanup.policy"], OK: true, Need: `"delete"`,
			Why: "compaction drops state changes and epoch markers the journal's history is made of; change it by hand (kafka-configs --alter --add-config cleanup.policy=delete) after checking what it would delete"}
		if strings.Contains(cp.Found, "compact") {
			cp.OK = false
			cp.Found = strconv.Quote(cp.Found)
		}
		out = append(out, cp)
		need := n.JournalRetention.Milliseconds()
		rms := Setting{Topic: topic, Name: "retention.ms", Found: cfg["retention.ms"], OK: true,
			Need: fmt.Sprintf("at least %d (%s = key_memory + dedupe_retention + 1d)", need, time.Duration(need)*time.Millisecond),
			Why:  "an executor restoring from it would forget keys it must still recognise"}
		if v, err := strconv.ParseInt(rms.Found, 10, 64); err == nil && v >= 0 && v < need {
			rms.OK, rms.Raise = false, strconv.FormatInt(need, 10)
			rms.Found = fmt.Sprintf("%d (%s)", v, time.Duration(v)*time.Millisecond)
		}
		out = append(out, rms)
		rb := Setting{Topic: topic, Name: "retention.bytes", Found: cfg["retention.bytes"], OK: true, Need: "-1",
			Why: "size-based deletion removes records of any age"}
		if v, err := strconv.ParseInt(rb.Found, 10, 64); err == nil && v >= 0 {
			rb.OK, rb.Raise = false, "-1"
		}
		out = append(out, rb)
	}
	return out
}

// Settings returns each topic's settings as the brokers report them, for
// Needs.Check. A topic the brokers cannot describe is an error naming it.
func Settings(ctx context.Context, adm *kadm.Client, names []string) (map[string]map[string]string, error) {
	rcs, err := adm.DescribeTopicConfigs(ctx, names...)
	if err != nil {
		return nil, fmt.Errorf("describe topic configs: %w", err)
	}
	found := map[string]map[string]string{}
	var errs []error
	for _, rc := range rcs {
		if rc.Err != nil {
			errs = append(errs, fmt.Errorf("topic %s: describe configs: %w", rc.Name, rc.Err))
			continue
		}
		m := map[string]string{}
		for _, c := range rc.Configs {
			if c.Value != nil {
				m[c.Key] = *c.Value
			}
		}
		found[rc.Name] = m
	}
	return found, errors.Join(errs...)
}
