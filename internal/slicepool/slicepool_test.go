package slicepool

import (
	"runtime"
	"testing"

	"github.com/shaperproxy/shaperproxy/internal/testenv"
)

// TestGetFits: a slice given back is handed out only to a request it
// fits (room for n, at most most); one too large goes back for a longer
// request, one too small is left.
func TestGetFits(t *testing.T) {
	// sync.Pool drops a quarter of what it is given under the race
	// detector, and everything across two collections: a slice given back
	// may not come back, but one that comes back must fit.
	runtime.GC()
	var p Pool[int]
	big := make([]int, 0, 100)
	p.Put(big)
	if s := p.Get(10, 40); cap(s) == 100 {
		t.Fatal("a slice ten times too large was handed out")
	}
	for range 20 {
		if s := p.Get(90, 200); len(s) != 0 || cap(s) < 90 || cap(s) > 200 {
			t.Fatalf("got len %d cap %d for 90 at most 200", len(s), cap(s))
		} else {
			p.Put(s)
		}
	}
	p.Put(make([]int, 5))
	if s := p.Get(50, 100); cap(s) < 50 {
		t.Fatalf("a slice too small was handed out: cap %d", cap(s))
	}
}

// TestPutAllocatesNothing: a slice taken and given back, over and over,
// costs no allocation once the pool has a box for it (the box a Get
// empties is the one the next Put fills).
func TestPutAllocatesNothing(t *testing.T) {
	var p Pool[int]
	p.Put(make([]int, 0, 64))
	allocs := testing.AllocsPerRun(1000, func() {
		p.Put(p.Get(32, 128))
	})
	// Under the race detector sync.Pool drops a share of what it is
	// given at random, and a slice or box made again is an allocation.
	if allocs != 0 && !testenv.Race {
		t.Fatalf("%.2f allocations a Get and Put", allocs)
	}
}

// TestLargerSliceDoesNotBlock: a slice too large for the requests that
// follow (a conversation's first request, which decides every block, and
// then its shorter ones) does not keep a fitting slice given back from
// being handed out: Get and Put allocate nothing (before, the large
// slice, handed out first, went back and a new one was made each time),
// and the large slice is still there for a long request.
func TestLargerSliceDoesNotBlock(t *testing.T) {
	if testenv.Race {
		t.Skip("sync.Pool drops what it is given at random under the race detector")
	}
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1)) // one processor: sync.Pool's per-processor slot is the one the test sees
	runtime.GC()
	runtime.GC() // the pools start empty
	var p Pool[int]
	p.Put(make([]int, 0, 1000)) // the long request's
	p.Put(make([]int, 0, 10))   // a short one's
	if allocs := testing.AllocsPerRun(1000, func() { p.Put(p.Get(8, 48)) }); allocs != 0 {
		t.Fatalf("%.2f allocations a Get and Put with a larger slice in the pool", allocs)
	}
	if s := p.Get(900, 4000); cap(s) != 1000 {
		t.Fatalf("the large slice is gone: a Get for 900 made cap %d", cap(s))
	}
}
