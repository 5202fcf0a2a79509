package consumer

import (
	"runtime"
	rtmetrics "runtime/metrics"
	"strconv"
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

// poolPipeline is a pipeline whose pool runs tasks with run and starts
// its goroutines with spawn.
func poolPipeline(run func(entityTask), spawn func(func())) *pipeline {
	p := &pipeline{}
	p.pool.work, p.pool.retire, p.pool.quit = make(chan entityTask), make(chan struct{}), make(chan struct{})
	p.pool.maxIdle = keepIdleWorkers
	p.pool.run, p.pool.spawn = run, spawn
	return p
}

// TestPendingEntitiesShareStartingWorker: entities that find no idle
// worker while one started for an earlier entity has not begun wait for
// it instead of each starting a goroutine; when it begins it starts one
// more for the rest (a goroutine per entity was ~8 % of a repeat's CPU),
// and every entity runs once, in order of arrival within a worker.
func TestPendingEntitiesShareStartingWorker(t *testing.T) {
	var mu sync.Mutex
	var ran []string
	var started []func()
	p := poolPipeline(func(t entityTask) {
		mu.Lock()
		ran = append(ran, t.entity)
		mu.Unlock()
	}, func(f func()) {
		mu.Lock()
		started = append(started, f)
		mu.Unlock()
	})
	const n = 100
	for i := range n {
		p.startEntity(entityTask{entity: strconv.Itoa(i)})
	}
	if len(started) != 1 {
		t.Fatalf("%d goroutines started for %d entities while none had begun, want 1", len(started), n)
	}
	// The first worker begins: it starts one goroutine for the next
	// pending entity, then runs its own and every other pending one.
	go started[0]()
	deadline := time.Now().Add(10 * time.Second)
	for {
		mu.Lock()
		k, s := len(ran), len(started)
		mu.Unlock()
		if k == n-1 || time.Now().After(deadline) {
			if s != 2 {
				t.Fatalf("%d goroutines started, want 2", s)
			}
			break
		}
		time.Sleep(time.Millisecond)
	}
	go started[1]()
	for p.pool.idle.Load() < 2 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	mu.Lock()
	seen := map[string]int{}
	for _, e := range ran {
		seen[e]++
	}
	if len(ran) != n || len(seen) != n || ran[0] != "0" || ran[n-1] != "1" {
		t.Fatalf("ran %d tasks of %d entities (first %q, last %q), want each of %d once, 0 first and 1 (the second goroutine's) last", len(ran), len(seen), ran[0], ran[len(ran)-1], n)
	}
	mu.Unlock()
	close(p.pool.quit)
	p.pool.wg.Wait()
}

// TestPendingEntityNotBehindBlockedWorker: an entity waiting in pending
// never waits for a worker busy with a slow command: every worker that
// begins starts the next goroutine first, so while the first entity's
// command blocks, all the others run.
func TestPendingEntityNotBehindBlockedWorker(t *testing.T) {
	release := make(chan struct{})
	var others sync.WaitGroup
	const n = 50
	others.Add(n - 1)
	p := poolPipeline(func(t entityTask) {
		if t.entity == "0" {
			<-release
			return
		}
		others.Done()
	}, func(f func()) { go f() })
	for i := range n {
		p.startEntity(entityTask{entity: strconv.Itoa(i)})
	}
	others.Wait() // the first entity is still blocked
	close(release)
	for p.pool.idle.Load() == 0 {
		time.Sleep(time.Millisecond)
	}
	close(p.pool.quit)
	p.pool.wg.Wait()
}

// TestGrowStack: a goroutine that called growStack (every new worker
// does, before its first command) holds a stack of at least 16 KiB, the
// stack a command needs, where one that did not holds the runtime's
// starting size.
func TestGrowStack(t *testing.T) {
	const need = 16 << 10
	start := []rtmetrics.Sample{{Name: "/gc/stack/starting-size:bytes"}}
	rtmetrics.Read(start)
	if s := start[0].Value.Uint64(); s > need/2 {
		t.Skipf("goroutines start with %d bytes of stack: too close to what growStack grows to for this test to tell", s)
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
	// StackInuse is the process's: stacks of other goroutines freed
	// meanwhile lower the difference a little, so it is held to three
	// quarters of n × need, still above what n goroutines of the
	// starting size (at most need/2 each, checked above) could hold.
	if grown < n*need*3/4 {
		t.Fatalf("%d goroutines after growStack hold %d bytes of stack, want about %d each", n, grown, need)
	}
}
