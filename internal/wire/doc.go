// Package wire holds what only this module's executor, audit and command
// line do with the wire values of package schemas: sealing and hashing
// execution records, writing outcome events and deadletters, the journal's
// epoch markers, the status record's encoder and the executor's defaults.
//
// A Go user of the protocol (a producer, a subscriber, an auditor of their
// own) needs only schemas: encode a command, decode an outcome, read a
// record. Everything here builds on schemas and internal/jcs, so the bytes
// it writes are the ones schemas reads and nothing is defined twice.
package wire
