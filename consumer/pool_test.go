package consumer

import (
	"runtime"
	rtmetrics "runtime/metrics"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestIdleWorkersTrimmed: after a burst, idle pooled workers beyond
// keepIdleWorkers end at the next trimIdle, the others keep waiting and
// still take work, and stop's quit ends them.
func TestIdleWorkersTrimmed(t *testing.T) {
	p := &pipeline{}
	p.pool.work, p.pool.retire, p.pool.quit = make(chan entityTask), make(chan struct{}), make(chan struct{})
	const burst = keepIdleWorkers + 40
	var ended sync.WaitGroup
	var took, exited atomic.Int32
	for range burst {
		p.pool.idle.Add(1) // as worker does before it waits
		ended.Add(1)
		go func() {
			defer ended.Done()
			for {
				if _, ok := p.idle(); !ok {
					exited.Add(1)
					return
				}
				took.Add(1)
				p.pool.idle.Add(1)
			}
		}()
	}
	deadline := time.Now().Add(10 * time.Second)
	retired := int32(0)
	for p.pool.idle.Load() > keepIdleWorkers && time.Now().Before(deadline) {
		// A worker counted but not yet waiting is retired at a later
		// call; each call counts only after the ones it retired woke.
		retired += int32(p.trimIdle())
		for exited.Load() < retired && time.Now().Before(deadline) {
			time.Sleep(time.Millisecond)
		}
		time.Sleep(time.Millisecond)
	}
	if n := p.pool.idle.Load(); n != keepIdleWorkers {
		t.Fatalf("%d idle workers after trimming, want %d", n, keepIdleWorkers)
	}
	if n := p.trimIdle(); n != 0 {
		t.Fatalf("trimming again ended %d more workers, want the %d kept", n, keepIdleWorkers)
	}
	p.pool.work <- entityTask{entity: "e"}
	for took.Load() == 0 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	if took.Load() != 1 {
		t.Fatalf("a kept worker took %d tasks, want 1", took.Load())
	}
	close(p.pool.quit)
	ended.Wait()
}

// TestGrowStack: a goroutine that called growStack (every new worker
// does, before its first command) holds a stack of at least 16 KiB, the
// stack a command needs, where one that did not holds the runtime's
// starting size.
func TestGrowStack(t *testing.T) {
	const need = 16 << 10
	start := []rtmetrics.Sample{{Name: "/gc/stack/starting-size:bytes"}}
	rtmetrics.Read(start)
	if s := start[0].Value.Uint64(); s >= need {
		t.Skipf("goroutines start with %d bytes of stack: nothing to grow", s)
	}
	const n = 256
	inUse := func() uint64 {
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		return ms.StackInuse
	}
	release := make(chan struct{})
	var started, ended sync.WaitGroup
	before := inUse()
	for range n {
		started.Add(1)
		ended.Add(1)
		go func() {
			defer ended.Done()
			growStack()
			started.Done()
			<-release
		}()
	}
	started.Wait()
	grown := inUse() - before
	close(release)
	ended.Wait()
	if grown < n*need {
		t.Fatalf("%d goroutines after growStack hold %d bytes of stack, want at least %d each", n, grown, need)
	}
}
