package client

import "github.com/onceflight/onceflight/schemas"

// Journal record headers, as schemas defines them (kept for the tests that
// write journal records by hand).
const (
	KindHeader = schemas.HeaderKind
	KindRecord = schemas.KindRecord
)
