package e2e

import (
	"context"
	"encoding/json"
	"testing"
	"time"
)

// dumpKeys logs the journal and outcome records of keys, to read a failed
// chaos run from the records themselves.
func dumpKeys(t *testing.T, brokers string, keys map[string]bool) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for _, topic := range []string{"onceflight.journal", "onceflight.outcomes"} {
		recs, err := readTopic(ctx, brokers, topic)
		if err != nil {
			t.Logf("read %s: %v", topic, err)
			continue
		}
		for _, r := range recs {
			var v struct {
				Key    string `json:"idempotency_key"`
				Status string `json:"status"`
				Epoch  int64  `json:"epoch"`
				Exec   string `json:"executor"`
				Att    int    `json:"attempts"`
				Tok    int64  `json:"fencing_token"`
				Cmd    struct {
					ID     string
					Offset int64
				} `json:"command"`
				Data json.RawMessage `json:"data"`
				Caus string          `json:"causationid"`
				Rep  bool            `json:"replayed"`
			}
			_ = json.Unmarshal(r.Value, &v)
			if topic == "onceflight.outcomes" {
				_ = json.Unmarshal(v.Data, &v)
			}
			if keys[v.Key] || keys[string(r.Key)] {
				t.Logf("DUMP %s p%d o%d key=%s status=%s epoch=%d exec=%s att=%d tok=%d cmd=%s/%d caus=%s rep=%v", topic, r.Partition, r.Offset, v.Key, v.Status, v.Epoch, v.Exec, v.Att, v.Tok, v.Cmd.ID, v.Cmd.Offset, v.Caus, v.Rep)
			}
		}
	}
}
