package proctest

import (
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
)

// FreeAddr returns 127.0.0.1:<port> for a port that was free a moment ago
// and that this process has not handed out before.
//
// The caller passes the address to a process (or an in-process serve) that
// listens on it a little later, so the port must stay free in between. A
// port from listening on :0 is one of the kernel's ephemeral ports, the
// same pool every other listener on :0 draws from: while tests of other
// packages start brokers and servers on :0 all along, one of them could
// take it in that gap, and the serve under test then stops with "address
// already in use" before it is ready. So the port is chosen at random
// below the ephemeral range (ip_local_port_range), where only explicit
// binds land, and never twice in one process (two addresses asked for in
// a row must differ). Where the range cannot be read or leaves no room,
// it falls back to :0.
func FreeAddr() (string, error) {
	freePorts.Lock()
	defer freePorts.Unlock()
	lo, hi := explicitPorts()
	for range 64 {
		if hi <= lo {
			break
		}
		p := lo + rand.IntN(hi-lo)
		if freePorts.given[p] {
			continue
		}
		addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(p))
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			continue // taken: try another
		}
		ln.Close()
		freePorts.given[p] = true
		return addr, nil
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", fmt.Errorf("find a free port: %w", err)
	}
	defer ln.Close()
	return ln.Addr().String(), nil
}

// freePorts are the ports FreeAddr handed out in this process.
var freePorts = struct {
	sync.Mutex
	given map[int]bool
}{given: map[int]bool{}}

// explicitPorts is the range [lo, hi) FreeAddr draws from: up to 16 384
// ports below the kernel's ephemeral range, none below 10 000 (where
// well-known services listen).
func explicitPorts() (lo, hi int) {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return 0, 0
	}
	f := strings.Fields(string(b))
	if len(f) != 2 {
		return 0, 0
	}
	eph, err := strconv.Atoi(f[0])
	if err != nil {
		return 0, 0
	}
	return max(10000, eph-16384), eph
}
