package console

import (
	"errors"
	"path/filepath"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/onceflight/onceflight/onceflighttest"
	"github.com/onceflight/onceflight/schemas"
)

// TestExecIDKeepsAnyBytes: entities and keys with NULs, 0xff and
// prefixes of one another stay apart in the index's keys.
func TestExecIDKeepsAnyBytes(t *testing.T) {
	pairs := [][2]string{{"a", "bc"}, {"ab", "c"}, {"a\x00", "b"}, {"a", "\x00b"}, {"\xff", ""}, {"", "\xff"}, {"é", "<script>"}}
	seen := map[string][2]string{}
	for _, p := range pairs {
		id := string(execID(p[0], p[1]))
		if q, ok := seen[id]; ok {
			t.Fatalf("execID(%q) = execID(%q)", p, q)
		}
		seen[id] = p
		ent, rest, err := dec([]byte(id))
		if err != nil {
			t.Fatal(err)
		}
		key, rest, err := dec(rest)
		if err != nil || ent != p[0] || key != p[1] || len(rest) != 0 {
			t.Errorf("dec(execID(%q)) = %q, %q, %q, %v", p, ent, key, rest, err)
		}
	}
	if _, _, err := dec([]byte{5, 'a'}); err == nil {
		t.Error("dec of a truncated key did not fail")
	}
}

// TestProjectionTombstoneForgetsKey: a journal tombstone of a key makes
// the console forget it for every entity, as compaction would, and an
// entry it cannot decode is skipped and counted, not fatal.
func TestProjectionTombstoneForgetsKey(t *testing.T) {
	h := onceflighttest.New(t)
	h.Start(filepath.Join(t.TempDir(), "state"))
	p := startProjection(t, t.TempDir(), h.Brokers)
	h.Submit("c-1", "ent-1", "shared", `{}`)
	h.Submit("c-2", "ent-2", "shared", `{}`)
	h.Submit("c-3", "ent-3", "other", `{}`)
	for _, e := range []string{"ent-1", "ent-2"} {
		waitExec(t, p, e, "shared", schemas.StatusSucceeded)
	}
	waitExec(t, p, "ent-3", "other", schemas.StatusSucceeded)
	v, _ := p.Get("ent-1", "shared")
	part := v.Exec.Partition
	kind := []kgo.RecordHeader{{Key: schemas.HeaderKind, Value: []byte(schemas.KindRecord)}}
	h.Produce(&kgo.Record{Topic: "onceflight.journal", Partition: part, Key: []byte("junk"), Value: []byte("{not json"), Headers: kind})
	h.Produce(&kgo.Record{Topic: "onceflight.journal", Partition: part, Key: []byte("shared"), Value: nil, Headers: kind})
	onceflighttest.WaitFor(t, 30*time.Second, "the tombstone applied", func() bool {
		_, err1 := p.Get("ent-1", "shared")
		_, err2 := p.Get("ent-2", "shared")
		return errors.Is(err1, ErrNotFound) && errors.Is(err2, ErrNotFound)
	})
	if got, _, err := p.Search(Filter{Key: "shared"}, 10); err != nil || len(got) != 0 {
		t.Errorf("search by the forgotten key: %v, %v", got, err)
	}
	if _, err := p.Get("ent-3", "other"); err != nil {
		t.Errorf("another key was forgotten too: %v", err)
	}
	onceflighttest.WaitFor(t, 10*time.Second, "the undecodable entry counted", func() bool { return p.Stats().Undecodable == 1 })
}
