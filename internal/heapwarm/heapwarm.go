// Package heapwarm faults in the Go heap's memory that the process has
// never touched, up to about where the next collection starts, after a
// collection that left enough of it: so that the requests' allocations
// land on pages already in memory instead of taking a page fault each.
//
// Between two collections the heap climbs from what was live to where the
// next collection starts, a little under the collector's goal. Wherever
// that reaches above the highest the heap ever was, every new 4 KiB page
// is a page fault on its first write: 11–14 µs in the virtual machine
// the benchmarks run on (prefault's BenchmarkPrefault), less on a bare
// machine. A proxy keeps a few tens of MB live
// (conversations' memos and carries, kept bodies), so its goal is large
// and, at a few requests a second, a collection comes minutes apart: the
// heap climbs into fresh memory the whole time, a few pages a request,
// each fault on the request's path. Once those pages are resident, the
// climb between collections stays on them: the collector leaves them
// resident up to about 10% over the goal (runtime/mgcscavenge.go), and Go
// hands out the lowest free pages first.
//
// The warming allocates throwaway chunks and has the system fault each
// one's pages in at once (internal/prefault: about 1 µs a page where
// Linux can, a write a page elsewhere), a chunk at a time with a pause
// between, off every request's path; the chunks are garbage at once and
// their memory is free again after the collection their own allocation
// brings forward. It costs that one collection and a few milliseconds of
// CPU each time at least 4 MiB lie untouched below where the next starts
// (a goal raised, memory given back), nothing otherwise, and never holds
// memory the heap would not reach by its next collection anyway.
package heapwarm

import (
	"os"
	"runtime"
	"runtime/metrics"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/shaperproxy/shaperproxy/internal/gccycle"
	"github.com/shaperproxy/shaperproxy/internal/prefault"
)

const (
	chunk   = 256 << 10 // allocated and faulted in at a time
	minWarm = 4 << 20   // less untouched is left to the requests: a warming costs a collection
	maxWarm = 64 << 20  // at most this much is warmed in one warming
	pause   = 200 * time.Microsecond
)

// quiet is how long after a warming the collections are not warmed for:
// the one the warming brought forward among them (settable for the
// tests).
var quiet atomic.Int64

func init() { quiet.Store(int64(5 * time.Second)) }

// Heap is what the runtime reports of the heap (runtime/metrics).
type Heap struct {
	Goal     uint64 // the collector's heap goal
	Resident uint64 // the heap's memory that is in use or free but not returned to the system
	Cycles   uint64 // the collections completed
}

var names = []string{
	"/gc/heap/goal:bytes",
	"/gc/cycles/total:gc-cycles",
	"/memory/classes/heap/objects:bytes",
	"/memory/classes/heap/unused:bytes",
	"/memory/classes/heap/free:bytes",
}

// Read returns the heap's goal, resident memory and collections now.
func Read() Heap {
	s := make([]metrics.Sample, len(names))
	for i, n := range names {
		s[i].Name = n
	}
	metrics.Read(s)
	u := func(v metrics.Value) uint64 {
		if v.Kind() == metrics.KindUint64 {
			return v.Uint64()
		}
		return 0
	}
	return Heap{Goal: u(s[0].Value), Cycles: u(s[1].Value), Resident: u(s[2].Value) + u(s[3].Value) + u(s[4].Value)}
}

// Untouched is how much of the heap below nine tenths of its goal, about
// where the next collection starts, has never been written (or was
// returned to the system): what the climb to that collection would take
// a page fault a page for.
func (h Heap) Untouched() uint64 {
	top := h.Goal / 10 * 9
	if top <= h.Resident {
		return 0
	}
	return top - h.Resident
}

var (
	written atomic.Uint64 // bytes allocated and faulted in by warmings
	kick    = make(chan struct{}, 1)
	run     struct {
		sync.Mutex
		n    int
		stop chan struct{}
	}
)

func init() { gccycle.After(poke) }

// poke has the loop look at the heap, unless it has yet to see the last
// poke.
func poke() {
	select {
	case kick <- struct{}{}:
	default:
	}
}

// Written is the memory the warmings have allocated and faulted in so far.
func Written() uint64 { return written.Load() }

// Collectors are the warming's metrics, for /metrics.
func Collectors() []prometheus.Collector {
	return []prometheus.Collector{prometheus.NewCounterFunc(prometheus.CounterOpts{
		Name: "shaperproxy_heap_warmed_bytes_total",
		Help: "Heap memory allocated and faulted in after a collection that left memory never written below where the next starts, so that requests do not take the page faults of its first writes (0 with " + OffEnv + "=off).",
	}, func() float64 { return float64(written.Load()) })}
}

// OffEnv turns the warming off when set to "off" (FromEnv).
const OffEnv = "SHAPERPROXY_HEAP_WARM"

// FromEnv is Start unless OffEnv is "off", in which case it does nothing:
// what serve and the benchmark's proxies call.
func FromEnv() (stop func()) {
	if os.Getenv(OffEnv) == "off" {
		return func() {}
	}
	return Start()
}

// Start warms the heap after each collection until the last stop is
// called; starting it again while it runs only counts (the warming is
// the process's, one at a time).
func Start() (stop func()) {
	run.Lock()
	defer run.Unlock()
	run.n++
	if run.n == 1 {
		run.stop = make(chan struct{})
		go loop(run.stop)
		poke() // the heap as it is now, without waiting for a collection
	}
	var once sync.Once
	return func() {
		once.Do(func() {
			run.Lock()
			defer run.Unlock()
			if run.n--; run.n == 0 {
				close(run.stop)
			}
		})
	}
}

// loop warms after each collection that left at least minWarm untouched
// below where the next starts (a goal raised, memory given back); one
// that comes in the quiet after a warming is looked at when the quiet
// ends.
func loop(stop <-chan struct{}) {
	var next time.Time         // no warming before it: the quiet after the last
	var later <-chan time.Time // the quiet's end, when a collection came in it
	for {
		select {
		case <-stop:
			return
		case <-kick:
			if d := time.Until(next); d > 0 {
				if later == nil {
					later = time.After(d)
				}
				continue
			}
		case <-later:
			later = nil
		}
		if Read().Untouched() < minWarm {
			continue
		}
		if n, _ := Warm(maxWarm, stop); n > 0 {
			next = time.Now().Add(time.Duration(quiet.Load()))
		}
	}
}

// Warm faults in the heap's untouched memory, at most limit bytes, and
// returns how much it allocated. It climbs as the requests' allocations
// would, and ends (finished) once the collection its own allocations
// brought about is over: then its chunks are free again, and the next
// allocations take their pages. (It climbs toward the goal itself, not
// nine tenths of it: a warming that stopped short of the collection would
// leave its chunks on the pages it wrote until the next, and the
// requests' allocations above them.) It ends too, finished, with less
// than a chunk left below the goal, and early, unfinished, at the limit
// or when stop is closed.
func Warm(limit int, stop <-chan struct{}) (n int, finished bool) {
	start := Read()
	for h := start; h.Cycles == start.Cycles && h.Goal >= h.Resident+chunk; h = Read() {
		if n >= limit {
			return n, false
		}
		b := make([]byte, chunk)
		prefault.Fresh(b)
		runtime.KeepAlive(b)
		n += chunk
		written.Add(chunk)
		select {
		case <-stop:
			return n, false
		case <-time.After(pause):
		}
	}
	return n, true
}
