package limit

import "time"

// SetLogEvery shortens the interval between a system's lines about its
// limit, so that a test need not wait 5 s.
func SetLogEvery(s *System, d time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.logEvery = d
}
