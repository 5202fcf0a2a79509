package schemas

// Journal record headers. The journal carries execution records and, beside
// them, the executor's own markers; readers skip any kind they do not know,
// so new marker kinds can be added without breaking restore or audit.
const (
	HeaderKind = "onceflight-kind"
	KindRecord = "record"
	KindEpoch  = "epoch"
	// KindSeal is an executor's signature over its transaction's records
	// on the partition (trust.Seal, docs/trust.md#signed-transactions).
	KindSeal    = "seal"
	HeaderEpoch = "onceflight-epoch"
)

// Headers of a command the executor forwarded to its entity's partition
// (it had landed on another): where it first landed, so that the audit
// pairs the copy with the original and answers are traced to both.
const (
	HeaderForwardedFromPartition = "onceflight-forwarded-from-partition"
	HeaderForwardedFromOffset    = "onceflight-forwarded-from-offset"
)
