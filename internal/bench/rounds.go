package bench

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// procSnap is what /proc says of a serving process at one moment: its
// CPU time in clock ticks (user and system apart), its minor page faults,
// its context switches summed over its threads (voluntary: it waited;
// involuntary: it was preempted), its threads, and for a proxy the
// collections its runtime has run (from its /metrics; -1 where there is
// none). The -rounds lines are differences of two.
type procSnap struct {
	procCounts
	vcs, nvcs int64
	threads   int
	gcs       float64
}

// snapOf reads tg's process; the zero snapshot for a target in this
// process, whose figures are everyone's.
func snapOf(ctx context.Context, tg costTarget) procSnap {
	s := procSnap{gcs: -1}
	if tg.pid == 0 {
		return s
	}
	s.procCounts, _ = procCountsOf(tg.pid)
	s.vcs, s.nvcs, s.threads = switchesOf(tg.pid)
	if tg.name == bare || tg.name == costAll {
		if fams, err := metricFamilies(ctx, metricsURL(tg)); err == nil {
			if m := fams["go_gc_duration_seconds"]; m != nil && len(m.Metric) > 0 && m.Metric[0].Summary != nil {
				s.gcs = float64(m.Metric[0].Summary.GetSampleCount())
			}
		}
	}
	return s
}

// switchesOf sums the context switches of process pid's threads
// (/proc/PID/task/*/status) and counts the threads.
func switchesOf(pid int) (vcs, nvcs int64, threads int) {
	tasks, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/status", pid))
	for _, t := range tasks {
		b, err := os.ReadFile(t)
		if err != nil {
			continue // the thread ended meanwhile
		}
		threads++
		for _, line := range strings.Split(string(b), "\n") {
			name, v, ok := strings.Cut(line, ":")
			if !ok {
				continue
			}
			n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
			switch {
			case err != nil:
			case name == "voluntary_ctxt_switches":
				vcs += n
			case name == "nonvoluntary_ctxt_switches":
				nvcs += n
			}
		}
	}
	return vcs, nvcs, threads
}

// roundLine writes one saturation round of one target: the requests it
// served and, per request, the CPU its process took (user and system
// apart, to a clock tick), the page faults and context
// switches, and the collections over the round. Nothing for a round
// without requests or a target in this process.
func roundLine(w io.Writer, title string, round int, name string, n int, a, b procSnap) {
	if w == nil || n <= 0 || b.threads == 0 {
		return
	}
	per := func(d int64) float64 { return float64(d) / float64(n) }
	tick := float64(clockTick / time.Microsecond)
	gcs := "n/a"
	if a.gcs >= 0 && b.gcs >= 0 {
		gcs = strconv.FormatFloat(b.gcs-a.gcs, 'f', 0, 64)
	}
	fmt.Fprintf(w, "round %s | %d | %s | %d requests | user %.1f µs | system %.1f µs | faults %.3f | switches %.3f waited, %.3f preempted | %d threads | %s collections\n",
		title, round, name, n, per(b.user-a.user)*tick, per(b.sys-a.sys)*tick, per(b.faults-a.faults), per(b.vcs-a.vcs), per(b.nvcs-a.nvcs), b.threads, gcs)
}
