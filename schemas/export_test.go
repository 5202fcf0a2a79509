package schemas

// The tests of package schemas_test pin the bytes that internal/wire writes
// beside the ones this package writes (the golden files), so they import
// internal/wire, which imports schemas: they cannot be in package schemas.
// These are the few inside names they read.

const (
	ValidTP           = validTP
	GoldenFingerprint = goldenFingerprint
	HeaderPrefix      = headerPrefix
	HeaderContentType = headerContentType
	MaxStatusBytes    = maxStatusBytes
)

var (
	StructuredHeaders = structuredHeaders
	LoadStructured    = loadStructured
	BinaryRecord      = binaryRecord
	DecodeRecordFast  = decodeRecordFast
	ToEvent           = toEvent
)
