package client

// waiting is the number of registered waiters, for tests.
func (d *dispatcher) waiting() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	n := 0
	for _, ws := range d.mu.waiters {
		n += len(ws)
	}
	return n
}
