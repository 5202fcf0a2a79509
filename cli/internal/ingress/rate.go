package ingress

import (
	"sync"
	"time"
)

// bucket is a token bucket: rate tokens a second up to burst. One for the
// whole ingress, because what it protects (the commands topic, the
// executor's connectors) is shared; a per-client limit needs an identity the
// ingress does not have.
type bucket struct {
	mu     sync.Mutex // guards tokens and last; rate and burst are read-only
	rate   float64
	burst  float64
	tokens float64
	last   time.Time
}

func newBucket(rate float64, burst int) *bucket {
	if burst < 1 {
		burst = max(1, int(rate))
	}
	return &bucket{rate: rate, burst: float64(burst), tokens: float64(burst)}
}

// take takes a token if one is left at now.
func (b *bucket) take(now time.Time) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if !b.last.IsZero() {
		b.tokens = min(b.burst, b.tokens+now.Sub(b.last).Seconds()*b.rate)
	}
	b.last = now
	if b.tokens < 1 {
		return false
	}
	b.tokens--
	return true
}
