package e2e

import (
	"bufio"
	"encoding/json"
	"fmt"
	"hash/crc32"
	"strings"
	"testing"
	"time"

	"github.com/onceflight/onceflight/partitioner"
)

// kcatRecord is one line of `kcat -C -J`.
type kcatRecord struct {
	Topic     string   `json:"topic"`
	Partition int32    `json:"partition"`
	Offset    int64    `json:"offset"`
	Headers   []string `json:"headers"` // name, value, name, value, ...
	Key       *string  `json:"key"`
	Payload   *string  `json:"payload"`
}

func (r kcatRecord) header(name string) (string, bool) {
	for i := 0; i+1 < len(r.Headers); i += 2 {
		if r.Headers[i] == name {
			return r.Headers[i+1], true
		}
	}
	return "", false
}

// kcatConsume reads a whole topic with kcat (read_committed) and returns its
// records.
func kcatConsume(t *testing.T, kcat, brokers, topic string) []kcatRecord {
	t.Helper()
	out := runKcat(t, kcat, "", "-C", "-b", brokers, "-t", topic, "-o", "beginning", "-e", "-q", "-J",
		"-X", "isolation.level=read_committed")
	var recs []kcatRecord
	sc := bufio.NewScanner(strings.NewReader(out))
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" {
			continue
		}
		var r kcatRecord
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			t.Fatalf("kcat -J line is not JSON: %v: %q", err, line)
		}
		recs = append(recs, r)
	}
	return recs
}

// kcatOutcomes reads the outcomes topic with kcat.
func kcatOutcomes(t *testing.T, kcat, brokers string) []outcome {
	t.Helper()
	var outs []outcome
	for _, r := range kcatConsume(t, kcat, brokers, topicOutcomes) {
		if r.Payload == nil {
			t.Fatalf("outcome %d/%d without value", r.Partition, r.Offset)
		}
		o, err := parseOutcome([]byte(*r.Payload))
		if err != nil {
			t.Fatalf("outcome %d/%d: %v: %q", r.Partition, r.Offset, err, *r.Payload)
		}
		outs = append(outs, o)
	}
	return outs
}

// misroutedEntity returns an entity ID that kcat's default (CRC32) partitioner
// puts on another partition than Kafka's murmur2 one.
func misroutedEntity(prefix string, skip int) string {
	for i := 0; ; i++ {
		e := fmt.Sprintf("%s-%d", prefix, i)
		crc := int32(crc32.ChecksumIEEE([]byte(e)) % numPartitions)
		if crc != partitioner.ForEntity(e, numPartitions) {
			if skip == 0 {
				return e
			}
			skip--
		}
	}
}

// TestKcatBlackBox talks to the executor with kcat only: commands in both
// CloudEvents modes and with both partitioners, outcomes and deadletters read
// back with kcat.
func TestKcatBlackBox(t *testing.T) {
	kcat := kcatPath(t)
	brokers := startBroker(t)
	cfg, effects := noopConfig(t)
	startServe(t, serveOpts{brokers: brokers, config: cfg, executorID: "ex-kcat"})

	misS, misB := misroutedEntity("kcat-s", 0), misroutedEntity("kcat-b", 0)
	cmds := []command{
		{id: "kc-struct-crc", key: "kk-struct-crc", entity: misS, structured: true, kcatCRC: true},
		{id: "kc-bin-crc", key: "kk-bin-crc", entity: misB, kcatCRC: true},
		{id: "kc-struct-m2", key: "kk-struct-m2", entity: "kcat-m-1", structured: true},
		{id: "kc-bin-m2", key: "kk-bin-m2", entity: "kcat-m-2"},
		// Repeats: the same key and data again, once per mode and
		// partitioner.
		{id: "kc-struct-crc-again", key: "kk-struct-crc", entity: misS, structured: true, kcatCRC: true, repeat: true},
		{id: "kc-bin-m2-again", key: "kk-bin-m2", entity: "kcat-m-2", repeat: true},
	}
	for _, c := range cmds {
		c.data = fmt.Sprintf(`{"key":%q,"n":1}`, c.key)
		kcatProduce(t, kcat, brokers, c)
	}
	const malformed = `{"specversion":"1.0","id":"kc-bad" this is not JSON`
	runKcat(t, kcat, malformed+"\n", "-P", "-b", brokers, "-t", topicCommands, "-k", "kcat-bad",
		"-H", "content-type=application/cloudevents+json")

	// Wait until every command has an outcome, reading with kcat.
	outs := waitOutcomes(t, fromKcat(kcat, brokers), commandIDs(cmds), nil, 60*time.Second)

	// The default partitioner really did put commands on a partition
	// that is not their entity's, so forwarding was exercised. Forwarded
	// copies carry onceflight-forwarded-from-partition; look at the
	// originals.
	first := map[string]kcatRecord{}
	forwarded := map[string]int32{}
	for _, r := range kcatConsume(t, kcat, brokers, topicCommands) {
		id, ok := r.header("ce_id")
		if !ok && r.Payload != nil {
			var ev struct {
				ID string `json:"id"`
			}
			_ = json.Unmarshal([]byte(*r.Payload), &ev)
			id = ev.ID
		}
		if _, ok := r.header("onceflight-forwarded-from-partition"); ok {
			forwarded[id] = r.Partition
		} else if id != "" {
			first[id] = r
		}
	}
	for _, c := range cmds {
		r, ok := first[c.id]
		if !ok {
			t.Errorf("command %s not found on %s", c.id, topicCommands)
			continue
		}
		want := partitioner.ForEntity(c.entity, numPartitions)
		if !c.kcatCRC && r.Partition != want {
			t.Errorf("command %s produced with murmur2_random on partition %d, want %d", c.id, r.Partition, want)
		}
		if c.kcatCRC && r.Partition == want {
			t.Errorf("command %s produced with kcat's default partitioner on its canonical partition %d: test does not exercise forwarding", c.id, r.Partition)
		}
		if p, ok := forwarded[c.id]; ok != (r.Partition != want) || (ok && p != want) {
			t.Errorf("command %s on partition %d (canonical %d): forwarded copy on %d (present %v)", c.id, r.Partition, want, p, ok)
		}
	}

	ck := checkKcatOutcomes(t, cmds, outs)

	// The malformed record went to the deadletter topic unchanged, with
	// its reason.
	deadline := time.Now().Add(30 * time.Second)
	for {
		var found *kcatRecord
		for _, r := range kcatConsume(t, kcat, brokers, topicDeadletter) {
			if r.Payload != nil && *r.Payload == malformed {
				found = &r
				break
			}
		}
		if found != nil {
			reason, ok := found.header("onceflight-deadletter-reason")
			if !ok || reason == "" {
				t.Errorf("deadletter record has no onceflight-deadletter-reason header: %v", found.Headers)
			}
			if src, _ := found.header("onceflight-source-topic"); src != topicCommands {
				t.Errorf("deadletter onceflight-source-topic = %q, want %q", src, topicCommands)
			}
			if found.Key == nil || *found.Key != "kcat-bad" {
				t.Errorf("deadletter key = %v, want kcat-bad", found.Key)
			}
			t.Logf("deadletter reason: %q", reason)
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("malformed record not on %s after 30s", topicDeadletter)
		}
		time.Sleep(300 * time.Millisecond)
	}

	// Each key executed once, repeats included.
	checkEffects(t, ck, countEffects(t, effects), nil)

	// Nothing more arrived meanwhile: still exactly one outcome each.
	checkKcatOutcomes(t, cmds, kcatOutcomes(t, kcat, brokers))
}

// checkKcatOutcomes checks that every command has exactly one outcome,
// succeeded, replayed exactly when it repeats a key.
func checkKcatOutcomes(t *testing.T, cmds []command, outs []outcome) checked {
	t.Helper()
	ck := checkOutcomes(t, cmds, outs, checkOpts{statuses: []string{"succeeded"}})
	for _, c := range cmds {
		if got := ck.byCmd[c.id]; len(got) == 1 && got[0].Replayed != c.repeat {
			t.Errorf("command %s: replayed = %v, want %v", c.id, got[0].Replayed, c.repeat)
		}
	}
	return ck
}
