package wire

import (
	"bytes"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/onceflight/onceflight/schemas"
)

func TestDeadletterReference(t *testing.T) {
	orig := &kgo.Record{Topic: "commands", Partition: 3, Offset: 42, Key: []byte("order-1"),
		Value:   bytes.Repeat([]byte("v"), 1000),
		Headers: []kgo.RecordHeader{{Key: "ce_id", Value: []byte("c1")}}}
	hdrs := func(r *kgo.Record) map[string]string {
		m := map[string]string{}
		for _, h := range r.Headers {
			m[h.Key] = string(h.Value)
		}
		return m
	}
	base := map[string]string{schemas.HeaderDeadletterReason: "bad", schemas.HeaderSourceTopic: "commands",
		schemas.HeaderSourcePartition: "3", schemas.HeaderSourceOffset: "42", schemas.HeaderDeadletterValueBytes: "1000"}
	for _, c := range []struct {
		fits    func(*kgo.Record) bool
		omitted string
		key     string
		ceID    bool
	}{
		{func(*kgo.Record) bool { return true }, "value", "order-1", true},
		{func(r *kgo.Record) bool { return len(r.Headers) < 7 }, "value,headers", "order-1", false},
		{func(r *kgo.Record) bool { return len(r.Key) == 0 }, "value,headers,key", "", false},
	} {
		d := DeadletterReference(orig, "bad", c.fits)
		h := hdrs(d)
		if d.Value != nil || string(d.Key) != c.key || h[schemas.HeaderDeadletterOmitted] != c.omitted || (h["ce_id"] == "c1") != c.ceID {
			t.Fatalf("%s: %+v", c.omitted, d)
		}
		for k, v := range base {
			if h[k] != v {
				t.Fatalf("%s: header %s=%q, want %q", c.omitted, k, h[k], v)
			}
		}
	}
	// Nothing fits: the reason is capped.
	long := strings.Repeat("é", 5000)
	d := DeadletterReference(orig, long, func(*kgo.Record) bool { return false })
	if r := hdrs(d)[schemas.HeaderDeadletterReason]; len(r) > 1024 || !utf8.ValidString(r) || !strings.HasPrefix(long, strings.Split(r, "…")[0]) {
		t.Fatalf("reason %d bytes: %q", len(r), r)
	}
	orig.Headers[0].Value[0] = 'X'
	if d := DeadletterReference(orig, "bad", func(*kgo.Record) bool { return true }); string(d.Headers[0].Value) != "X1" {
		t.Fatalf("headers %v", d.Headers)
	}
}

func TestCapMessage(t *testing.T) {
	if s := CapMessage("short", 10); s != "short" {
		t.Fatal(s)
	}
	for _, n := range []int{0, 1, 5, 20, 100, 333} {
		s := strings.Repeat("ab€", 200)
		c := CapMessage(s, n)
		if len(c) > n || !utf8.ValidString(c) {
			t.Fatalf("cap %d: %d bytes %q", n, len(c), c)
		}
		if n >= 100 && !strings.HasSuffix(c, " bytes cut)") {
			t.Fatalf("cap %d: no note: %q", n, c)
		}
		if i := strings.Index(c, "… ("); i > 0 {
			cut, _ := strconv.Atoi(strings.TrimSuffix(c[i+len("… ("):], " bytes cut)"))
			if i+cut != len(s) {
				t.Fatalf("cap %d: kept %d, says cut %d of %d", n, i, cut, len(s))
			}
		}
	}
}

func TestDeadletterRecord(t *testing.T) {
	orig := &kgo.Record{Topic: "commands", Partition: 3, Offset: 42, Key: []byte("k"), Value: []byte("v"),
		Headers: []kgo.RecordHeader{{Key: "h", Value: []byte("1")}}}
	d := DeadletterRecord(orig, "bad")
	if d.Topic != "" || string(d.Key) != "k" || string(d.Value) != "v" {
		t.Fatalf("%+v", d)
	}
	want := map[string]string{"h": "1", schemas.HeaderDeadletterReason: "bad", schemas.HeaderSourceTopic: "commands",
		schemas.HeaderSourcePartition: "3", schemas.HeaderSourceOffset: "42"}
	if len(d.Headers) != len(want) {
		t.Fatalf("headers %v", d.Headers)
	}
	for _, h := range d.Headers {
		if want[h.Key] != string(h.Value) {
			t.Fatalf("header %s=%s", h.Key, h.Value)
		}
	}
	orig.Value[0] = 'X'
	if string(d.Value) != "v" {
		t.Fatal("aliases original")
	}
}
