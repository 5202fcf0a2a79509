package wire

import (
	"strconv"
	"unicode/utf8"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/onceflight/onceflight/schemas"
)

// DeadletterRecord copies orig for the deadletter topic: key, value and
// headers unchanged (the bytes are evidence), plus headers naming the reason
// and where the record was consumed. Topic is left for the caller. Nothing is
// shared with orig, which kgo may reuse.
func DeadletterRecord(orig *kgo.Record, reason string) *kgo.Record {
	headers := make([]kgo.RecordHeader, 0, len(orig.Headers)+4)
	for _, h := range orig.Headers {
		headers = append(headers, kgo.RecordHeader{Key: h.Key, Value: clone(h.Value)})
	}
	headers = append(headers,
		kgo.RecordHeader{Key: schemas.HeaderDeadletterReason, Value: []byte(reason)},
		kgo.RecordHeader{Key: schemas.HeaderSourceTopic, Value: []byte(orig.Topic)},
		kgo.RecordHeader{Key: schemas.HeaderSourcePartition, Value: []byte(strconv.FormatInt(int64(orig.Partition), 10))},
		kgo.RecordHeader{Key: schemas.HeaderSourceOffset, Value: []byte(strconv.FormatInt(orig.Offset, 10))},
	)
	return &kgo.Record{Key: clone(orig.Key), Value: clone(orig.Value), Headers: headers}
}

func clone(b []byte) []byte {
	if b == nil {
		return nil
	}
	return append([]byte{}, b...)
}

// maxReferenceReason caps the reason header of a deadletter that had to drop
// everything else, so the reference itself always fits.
const maxReferenceReason = 1024

// DeadletterReference is DeadletterRecord for an original too large to copy:
// the deadletter points at the source offset instead of carrying the bytes.
// It drops the value, then the original headers, then the key, and returns
// the first form for which fits reports true (the last form, with the reason
// capped to 1 KiB, when none does). The reason, source topic, partition and
// offset headers are always there, plus HeaderDeadletterOmitted and
// HeaderDeadletterValueBytes. Topic is left for the caller; nothing is shared
// with orig.
func DeadletterReference(orig *kgo.Record, reason string, fits func(*kgo.Record) bool) *kgo.Record {
	// As DeadletterRecord, without copying the value.
	added := []kgo.RecordHeader{
		{Key: schemas.HeaderDeadletterReason, Value: []byte(reason)},
		{Key: schemas.HeaderSourceTopic, Value: []byte(orig.Topic)},
		{Key: schemas.HeaderSourcePartition, Value: []byte(strconv.FormatInt(int64(orig.Partition), 10))},
		{Key: schemas.HeaderSourceOffset, Value: []byte(strconv.FormatInt(orig.Offset, 10))},
	}
	origHeaders := make([]kgo.RecordHeader, 0, len(orig.Headers))
	for _, h := range orig.Headers {
		origHeaders = append(origHeaders, kgo.RecordHeader{Key: h.Key, Value: clone(h.Value)})
	}
	ref := func(omitted string, headers []kgo.RecordHeader, key []byte) *kgo.Record {
		hs := make([]kgo.RecordHeader, 0, len(headers)+len(added)+2)
		hs = append(hs, headers...)
		hs = append(hs, added...)
		hs = append(hs,
			kgo.RecordHeader{Key: schemas.HeaderDeadletterOmitted, Value: []byte(omitted)},
			kgo.RecordHeader{Key: schemas.HeaderDeadletterValueBytes, Value: []byte(strconv.Itoa(len(orig.Value)))},
		)
		return &kgo.Record{Key: key, Headers: hs}
	}
	if r := ref("value", origHeaders, clone(orig.Key)); fits(r) {
		return r
	}
	if r := ref("value,headers", nil, clone(orig.Key)); fits(r) {
		return r
	}
	r := ref("value,headers,key", nil, nil)
	if !fits(r) {
		for i := range r.Headers {
			if r.Headers[i].Key == schemas.HeaderDeadletterReason {
				r.Headers[i].Value = []byte(CapMessage(reason, maxReferenceReason))
			}
		}
	}
	return r
}

// CapMessage shortens s to at most max bytes, cutting at a UTF-8 boundary
// and ending in a note of how many bytes were cut, for error messages that
// must fit a record (a connector's message, a decode error quoting input).
// s is returned as is when it fits.
func CapMessage(s string, max int) string {
	if len(s) <= max {
		return s
	}
	note := func(cut int) string { return "… (" + strconv.Itoa(cut) + " bytes cut)" }
	// The note's own length depends on the number cut; one with as many
	// digits as len(s) is never shorter.
	n := max - len(note(len(s)))
	if n <= 0 { // no room for the note
		return truncUTF8(s, max)
	}
	head := truncUTF8(s, n)
	return head + note(len(s)-len(head))
}

// truncUTF8 is the longest prefix of s of at most n bytes that does not end
// inside a multi-byte character.
func truncUTF8(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}
