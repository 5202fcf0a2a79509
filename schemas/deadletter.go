package schemas

// Deadletter header names (docs/events.md#execution-records).
const (
	HeaderDeadletterReason = "onceflight-deadletter-reason"
	HeaderSourceTopic      = "onceflight-source-topic"
	HeaderSourcePartition  = "onceflight-source-partition"
	HeaderSourceOffset     = "onceflight-source-offset"
)

// Headers of a deadletter written by reference: the executor writes one
// when a full copy of the original would not fit the deadletter topic.
const (
	// HeaderDeadletterOmitted lists, comma-separated, what of the original
	// record the deadletter leaves out because a full copy would have been
	// too large for the deadletter topic: "value", "value,headers" or
	// "value,headers,key". The original bytes stay at the source offset.
	HeaderDeadletterOmitted = "onceflight-deadletter-omitted"
	// HeaderDeadletterValueBytes is the length of the original value.
	HeaderDeadletterValueBytes = "onceflight-deadletter-value-bytes"
)
