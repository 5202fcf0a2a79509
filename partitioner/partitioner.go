// Package partitioner maps entity IDs to Kafka partitions the way Kafka's
// default (Java) producer partitioner does for keyed records.
//
// docs/guarantees.md requires a command to run on the partition of its entity; a command
// that arrives elsewhere (its producer used another partitioner) is forwarded
// there rather than executed out of place. That only works if every part of
// Onceflight — the executor, the forwarder, `onceflight submit`, the audit —
// agrees on one mapping, and it must be the one ordinary producers use so that
// forwarding is the exception. The canonical mapping is Kafka's default:
// murmur2 of the key, high bit masked, modulo the partition count. This is what
// the Java client, franz-go's default partitioner and most Kafka clients use.
// Note that librdkafka-based tools such as kcat default to a CRC32-based
// ("consistent_random") partitioner, so their records may land on another
// partition and will be forwarded; configure them with murmur2_random to avoid
// that.
package partitioner

import "fmt"

// murmur2 is Kafka's variant of MurmurHash2 (seed 0x9747b28c), as implemented
// by org.apache.kafka.common.utils.Utils.murmur2. It returns the hash as the
// signed 32-bit integer Java returns, so values can be compared directly with
// Kafka's published test vectors.
func murmur2(b []byte) int32 {
	const (
		seed uint32 = 0x9747b28c
		m    uint32 = 0x5bd1e995
		r           = 24
	)
	h := seed ^ uint32(len(b))
	for len(b) >= 4 {
		// Little-endian 4-byte blocks, as in the Java code.
		k := uint32(b[0]) | uint32(b[1])<<8 | uint32(b[2])<<16 | uint32(b[3])<<24
		b = b[4:]
		k *= m
		k ^= k >> r
		k *= m
		h *= m
		h ^= k
	}
	switch len(b) {
	case 3:
		h ^= uint32(b[2]) << 16
		fallthrough
	case 2:
		h ^= uint32(b[1]) << 8
		fallthrough
	case 1:
		h ^= uint32(b[0])
		h *= m
	}
	h ^= h >> 13
	h *= m
	h ^= h >> 15
	return int32(h)
}

// ForKey returns the partition Kafka's default partitioner chooses for a
// record with this key among numPartitions partitions:
// (murmur2(key) & 0x7fffffff) % numPartitions. Kafka masks the sign bit
// (Utils.toPositive) rather than taking an absolute value, and so must we, or
// keys whose hash is math.MinInt32 or negative would map differently.
//
// A nil key is hashed like an empty one. Kafka instead spreads keyless records
// over partitions; Onceflight never relies on that because every command is
// keyed by its entity (docs/events.md#command-events), so callers must decide keyless placement
// themselves.
//
// ForKey panics if numPartitions < 1: a topic always has at least one
// partition, so a non-positive count is a programming error, and silently
// returning some partition would break single-flight (docs/guarantees.md#g1-single-flight).
func ForKey(key []byte, numPartitions int) int32 {
	if numPartitions < 1 {
		panic(fmt.Sprintf("partitioner: numPartitions must be >= 1, got %d", numPartitions))
	}
	h := uint32(murmur2(key)) & 0x7fffffff
	return int32(uint64(h) % uint64(numPartitions))
}

// ForEntity returns the canonical partition of an entity ID (a command's
// CloudEvents subject, which is also its Kafka record key). It is ForKey over
// the entity's UTF-8 bytes.
func ForEntity(entity string, numPartitions int) int32 {
	return ForKey([]byte(entity), numPartitions)
}
