package schemas

import (
	"strconv"

	"github.com/twmb/franz-go/pkg/kgo"
)

// Deadletter header names (docs/events.md#execution-records).
const (
	HeaderDeadletterReason = "onceflight-deadletter-reason"
	HeaderSourceTopic      = "onceflight-source-topic"
	HeaderSourcePartition  = "onceflight-source-partition"
	HeaderSourceOffset     = "onceflight-source-offset"
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
		kgo.RecordHeader{Key: HeaderDeadletterReason, Value: []byte(reason)},
		kgo.RecordHeader{Key: HeaderSourceTopic, Value: []byte(orig.Topic)},
		kgo.RecordHeader{Key: HeaderSourcePartition, Value: []byte(strconv.FormatInt(int64(orig.Partition), 10))},
		kgo.RecordHeader{Key: HeaderSourceOffset, Value: []byte(strconv.FormatInt(orig.Offset, 10))},
	)
	return &kgo.Record{Key: clone(orig.Key), Value: clone(orig.Value), Headers: headers}
}

func clone(b []byte) []byte {
	if b == nil {
		return nil
	}
	return append([]byte{}, b...)
}
