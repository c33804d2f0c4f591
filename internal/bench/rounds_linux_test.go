package bench

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"runtime"
	"strconv"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// TestSnapOf reads this process as a serving proxy's would be read: the
// CPU it burns between two snapshots, the switches of a thread that
// sleeps, its threads, and the collections its /metrics reports.
func TestSnapOf(t *testing.T) {
	if _, err := os.Stat("/proc/self/task"); err != nil {
		t.Skip("no /proc/self/task")
	}
	var gcs atomic.Int64
	gcs.Store(7)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/metrics" {
			http.NotFound(w, r)
			return
		}
		io.WriteString(w, "# TYPE go_gc_duration_seconds summary\n"+
			"go_gc_duration_seconds{quantile=\"0.5\"} 0.0001\n"+
			"go_gc_duration_seconds_sum 0.01\n"+
			"go_gc_duration_seconds_count "+strconv.FormatInt(gcs.Load(), 10)+"\n")
	}))
	defer srv.Close()
	ctx := context.Background()
	tg := costTarget{name: bare, url: srv.URL + "/fake", pid: os.Getpid()}

	a := snapOf(ctx, tg)
	if a.threads < 1 || a.gcs != 7 {
		t.Fatalf("first snapshot: %d threads, %v collections; want at least 1 and 7", a.threads, a.gcs)
	}
	// 200 ms of CPU (20 clock ticks), burnt until the process's own clock
	// says so (the machine may give the test less than a core), and a
	// thread that sleeps 20 times: each sleep is a voluntary switch.
	cpu0, deadline := cpuTime(0), time.Now().Add(10*time.Second)
	for cpuTime(0)-cpu0 < 200*time.Millisecond && time.Now().Before(deadline) {
		burn()
	}
	done := make(chan struct{})
	go func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		ts := syscall.NsecToTimespec(int64(time.Millisecond))
		for range 20 {
			_ = syscall.Nanosleep(&ts, nil)
		}
		close(done)
	}()
	<-done
	gcs.Store(10)
	b := snapOf(ctx, tg)
	if cpu := (b.user + b.sys) - (a.user + a.sys); cpu < 10 {
		t.Errorf("200 ms of CPU burnt read as %d ticks of 10 ms", cpu)
	}
	if b.vcs-a.vcs < 20 {
		t.Errorf("20 sleeps read as %d voluntary switches", b.vcs-a.vcs)
	}
	if b.gcs != 10 {
		t.Errorf("collections %v, want 10", b.gcs)
	}

	// A target without /metrics (the reverse proxy) has no collections;
	// one in this process (pid 0) has no snapshot.
	if s := snapOf(ctx, costTarget{name: stdlib, url: srv.URL, pid: os.Getpid()}); s.gcs != -1 || s.threads < 1 {
		t.Errorf("reverse proxy: %v collections, %d threads", s.gcs, s.threads)
	}
	if s := snapOf(ctx, costTarget{name: bare, url: srv.URL + "/fake"}); s.threads != 0 {
		t.Errorf("a target in this process read as %d threads", s.threads)
	}
}

var sink uint64

func burn() {
	for i := range 100000 {
		sink += uint64(i) * sink
	}
}
