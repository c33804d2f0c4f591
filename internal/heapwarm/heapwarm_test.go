package heapwarm

import (
	"runtime"
	"runtime/debug"
	"testing"
	"time"
)

// live keeps a heap of about n bytes reachable, in 64 KiB pieces, until
// the returned function is called, and returns the rest of the heap to
// the system: the collector's goal then lies about n above what is
// resident, on memory as the process had never touched it.
func live(n int) (drop func()) {
	var keep [][]byte
	for range n / (64 << 10) {
		keep = append(keep, make([]byte, 64<<10))
	}
	debug.FreeOSMemory()
	return func() { runtime.KeepAlive(keep); keep = nil }
}

// garbage allocates n bytes of small objects that nothing keeps, as a
// request's allocations are.
func garbage(n int) {
	for range n / 512 {
		b := make([]byte, 512)
		b[0] = 1
		sinkSmall = b
	}
}

var sinkSmall []byte

// untouched reads how much of the heap lies untouched below where the
// next collection starts, and fails the test when it is less than want:
// the case the test needs.
func untouched(t *testing.T, want uint64) Heap {
	t.Helper()
	h := Read()
	if h.Untouched() < want {
		t.Fatalf("heap goal %d MiB, resident %d MiB: want at least %d MiB untouched below nine tenths of the goal", h.Goal>>20, h.Resident>>20, want>>20)
	}
	return h
}

func TestWarmClimbsToTheCollection(t *testing.T) {
	defer debug.SetGCPercent(debug.SetGCPercent(100))
	drop := live(48 << 20)
	defer drop()
	start := untouched(t, 24<<20)
	before := Written()
	n, finished := Warm(maxWarm, nil)
	h := Read()
	if !finished || h.Cycles == start.Cycles {
		t.Errorf("Warm ended (finished %v) after %d MiB with %d collections, %d before: want it to end with the one it brought about", finished, n>>20, h.Cycles, start.Cycles)
	}
	if got := Written() - before; got != uint64(n) {
		t.Errorf("Written grew by %d, Warm reported %d", got, n)
	}
	// The collection starts before the goal; the heap is resident up to it.
	if h.Resident < h.Goal*3/4 || n < int(start.Untouched()/2) {
		t.Errorf("after Warm (%d MiB): heap goal %d MiB, resident %d MiB (%d MiB before)", n>>20, h.Goal>>20, h.Resident>>20, start.Resident>>20)
	}
}

func TestWarmLimitAndStop(t *testing.T) {
	defer debug.SetGCPercent(debug.SetGCPercent(100))
	drop := live(32 << 20)
	defer drop()
	untouched(t, 16<<20)
	if n, finished := Warm(2<<20, nil); n != 2<<20 || finished {
		t.Errorf("Warm with a 2 MiB limit allocated %d bytes (finished %v), want 2 MiB, unfinished", n, finished)
	}
	stop := make(chan struct{})
	close(stop)
	if n, finished := Warm(maxWarm, stop); n != chunk || finished {
		t.Errorf("Warm with its stop closed allocated %d bytes (finished %v), want one chunk (%d), unfinished", n, finished, chunk)
	}
}

func TestStartWarmsAfterCollections(t *testing.T) {
	defer debug.SetGCPercent(debug.SetGCPercent(100))
	defer quiet.Store(quiet.Load())
	quiet.Store(0)
	size := 16 << 20
	grown := func(wait time.Duration) bool { // the goal raised above what is resident: warmed within wait
		t.Helper()
		before := Written()
		size += 16 << 20
		drop := live(size)
		defer drop()
		deadline := time.Now().Add(wait)
		for time.Now().Before(deadline) {
			if Written() > before {
				return true
			}
			runtime.GC()
			time.Sleep(20 * time.Millisecond)
		}
		return false
	}
	stop1 := Start()
	stop2 := Start()
	if !grown(5 * time.Second) {
		t.Fatal("started: a collection that raised the goal was not warmed for")
	}
	stop1()
	stop1() // a second call of the same stop does not count
	if !grown(5 * time.Second) {
		t.Fatal("one of two starts stopped: the warming stopped too")
	}
	stop2()
	time.Sleep(50 * time.Millisecond) // the loop sees its stop
	if grown(time.Second) {
		t.Fatal("every start stopped: the warming went on")
	}
}

func TestFromEnvOff(t *testing.T) {
	defer debug.SetGCPercent(debug.SetGCPercent(100))
	t.Setenv(OffEnv, "off")
	stop := FromEnv()
	defer stop()
	before := Written()
	drop := live(32 << 20)
	defer drop()
	runtime.GC()
	time.Sleep(200 * time.Millisecond)
	if got := Written(); got != before {
		t.Errorf("%s=off: the warming wrote %d bytes", OffEnv, got-before)
	}
}
