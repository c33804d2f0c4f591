package ledger

import (
	"fmt"
	"syscall"
	"testing"
	"time"
)

// BenchmarkPutLaterPaced queues one value a millisecond, as the guard does
// when a thousand requests a second each change a conversation's state,
// and reports the writer's commits and the process's CPU time (user and
// system, the fsyncs' share in the kernel included) per value: "paced" as
// the writer runs, "unpaced" with no pause between commits (as it was
// before it paused), "sleep only" the loop's own cost with nothing queued.
func BenchmarkPutLaterPaced(b *testing.B) {
	for _, c := range []struct {
		name  string
		every time.Duration
		put   bool
	}{{"paced", writeEvery, true}, {"unpaced", 0, true}, {"sleep only", writeEvery, false}} {
		b.Run(c.name, func(b *testing.B) {
			defer func(d time.Duration) { writeEvery = d }(writeEvery)
			writeEvery = c.every
			s := openAt(b, testPath(b), Options{})
			v := make([]byte, 200)
			c0, n0 := cpuTime(), s.Stats().Commits
			i := 0
			for b.Loop() {
				if c.put {
					if err := s.PutLater("guard", fmt.Sprintf("c%d", i%64), "state", v); err != nil {
						b.Fatal(err)
					}
				}
				i++
				time.Sleep(time.Millisecond)
			}
			s.Flush()
			b.ReportMetric(float64(s.Stats().Commits-n0)/float64(b.N), "commits/op")
			b.ReportMetric(float64((cpuTime()-c0).Microseconds())/float64(b.N), "cpu-µs/op")
		})
	}
}

// cpuTime is the CPU time (user and system) this process has used: the
// writer's work is done in the background, which the benchmark's own time
// does not see.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
