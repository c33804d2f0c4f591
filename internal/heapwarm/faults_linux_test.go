package heapwarm

import (
	"os"
	"runtime"
	"runtime/debug"
	"syscall"
	"testing"
	"time"

	"github.com/shaperproxy/shaperproxy/internal/testenv"
)

var page = os.Getpagesize()

// minorFaults is the process's page faults served without a disk so far.
func minorFaults(t *testing.T) int64 {
	t.Helper()
	var r syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &r); err != nil {
		t.Fatal(err)
	}
	return r.Minflt
}

// TestWarmTakesTheFaultsOffTheAllocations is what the warming is for:
// small allocations below the goal take a page fault for each page of
// memory the process never touched, and none once it was warmed.
func TestWarmTakesTheFaultsOffTheAllocations(t *testing.T) {
	if testenv.Race {
		t.Skip("the race detector's shadow memory takes page faults of its own")
	}
	defer debug.SetGCPercent(debug.SetGCPercent(100))
	drop := live(64 << 20)
	defer drop()
	untouched(t, 40<<20)
	// First 4 MiB of small allocations on memory never touched: a fault a
	// page, or the system does not show what the test is about.
	const probe, n = 4 << 20, 16 << 20
	f := minorFaults(t)
	garbage(probe)
	if fresh := minorFaults(t) - f; fresh < int64(probe/page/2) {
		t.Skipf("%d page faults for %d pages of fresh heap: this system does not fault on each page's first write (huge pages?)", fresh, probe/page)
	}
	if w, _ := Warm(maxWarm, nil); w == 0 {
		t.Fatal("Warm wrote nothing")
	}
	// Then 16 MiB: more than the probe's memory, which the collection Warm
	// brought about freed, still below where the next collection starts.
	pages := int64(n / page)
	f = minorFaults(t)
	garbage(n)
	warmed := minorFaults(t) - f
	t.Logf("%d pages of small allocations after the warming: %d page faults", pages, warmed)
	if warmed > pages/10 {
		t.Errorf("after the warming, %d pages of small allocations took %d page faults", pages, warmed)
	}
}

// cpuTime is the process's user and system CPU time so far.
func cpuTime(tb testing.TB) time.Duration {
	tb.Helper()
	var r syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &r); err != nil {
		tb.Fatal(err)
	}
	return time.Duration(r.Utime.Nano() + r.Stime.Nano())
}

// BenchmarkWarm measures what a warming costs: the process's CPU time
// over a Warm of a heap with 48 MiB never touched below its goal (the
// collection it brings about included, its pauses not: they take no
// CPU), per MiB it faulted in.
func BenchmarkWarm(b *testing.B) {
	defer debug.SetGCPercent(debug.SetGCPercent(100))
	var cpu time.Duration
	var warmed int
	for b.Loop() {
		b.StopTimer()
		drop := live(48 << 20)
		b.StartTimer()
		c := cpuTime(b)
		n, _ := Warm(maxWarm, nil)
		cpu += cpuTime(b) - c
		warmed += n
		b.StopTimer()
		drop()
		runtime.GC()
		b.StartTimer()
	}
	if warmed == 0 {
		b.Fatal("Warm wrote nothing")
	}
	b.ReportMetric(float64(cpu.Microseconds())/(float64(warmed)/(1<<20)), "cpu-µs/MiB")
	b.ReportMetric(float64(warmed)/(1<<20)/float64(b.N), "MiB/warming")
}
