// Package trustlog is the writers' and provers' side of package trust:
// the per-partition Merkle tree an executor extends and checkpoints, its
// resumption from a checkpoint record, the full log an auditor builds
// proofs from, the executor's signing key, and the seal checks that
// stream a partition's records (SealGate for restore and the console,
// SealScan for the audits and explain). Package trust keeps what a
// verifier needs (trusted keys, checkpoints, proofs, leaves, seals), so
// that one who checks a journal reads a small API and never these.
package trustlog
