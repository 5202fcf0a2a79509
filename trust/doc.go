// Package trust makes the journal checkable by someone who trusts no
// writer of the journal topic, only a public key (docs/trust.md):
//
//   - a Merkle tree (RFC 6962) per journal partition over its records in
//     offset order, each record a leaf (LeafData, LeafHash);
//   - checkpoints: the tree's size and root as a C2SP tlog-checkpoint,
//     signed as a C2SP signed note with an executor's Ed25519 key
//     (golang.org/x/mod/sumdb/note);
//   - trusted keys: a file of verifier keys with a validity window and a
//     revoked flag, so keys can rotate and a stolen one can be refused;
//   - inclusion proofs as C2SP tlog-proof bundles that verify offline.
//
// Why a Merkle tree beside the hash chain: the chain proves order only to
// someone who trusts its writer; a signed tree head proves to anyone with
// the public key that the records behind it were exactly these, and a
// later tree's consistency proof shows the earlier one is its prefix, so
// a saved checkpoint catches a rewritten, truncated or recreated journal.
//
// This package is the verifier's side: trusted keys, checkpoints, proofs,
// leaves and seals (ParseSeal, OpenSeal). The writers' side (the
// executor's compact tree and signing key, the auditor's proof-building
// log) and the streaming seal checks of the executor, the audit and the
// console (SealGate, SealScan) are internal/trustlog.
package trust
