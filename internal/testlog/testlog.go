// Package testlog is a log destination a test reads while the code under
// test writes to it from goroutines of its own (an executor's workers, a
// store's background scans, a running serve's loggers): a bytes.Buffer
// alone would be a data race under -race.
package testlog

import (
	"bytes"
	"sync"
)

// Buffer is safe for concurrent Write and String. The zero Buffer is
// empty and ready to use.
type Buffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *Buffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

// String is everything written so far.
func (l *Buffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}
