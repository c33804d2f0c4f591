package bench

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"runtime"
	"strconv"
	"strings"
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
	ctx, c := context.Background(), srv.Client()
	tg := costTarget{name: bare, url: srv.URL + "/fake", pid: os.Getpid()}

	a := snapOf(ctx, c, tg)
	if a.threads < 1 || a.gcs != 7 {
		t.Fatalf("first snapshot: %d threads, %v collections; want at least 1 and 7", a.threads, a.gcs)
	}
	// 200 ms of CPU (20 clock ticks), and a thread that sleeps 20 times:
	// each sleep is a voluntary switch of that thread.
	for end := time.Now().Add(200 * time.Millisecond); time.Now().Before(end); {
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
	b := snapOf(ctx, c, tg)
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
	if s := snapOf(ctx, c, costTarget{name: stdlib, url: srv.URL, pid: os.Getpid()}); s.gcs != -1 || s.threads < 1 {
		t.Errorf("reverse proxy: %v collections, %d threads", s.gcs, s.threads)
	}
	if s := snapOf(ctx, c, costTarget{name: bare, url: srv.URL + "/fake"}); s.threads != 0 {
		t.Errorf("a target in this process read as %d threads", s.threads)
	}
}

var sink uint64

func burn() {
	for i := range 100000 {
		sink += uint64(i) * sink
	}
}


// TestRoundLine: a round's line is the two snapshots' differences per
// request, CPU in µs (10 ms a tick), and nothing for a target read in
// this process or a round that served nothing.
func TestRoundLine(t *testing.T) {
	a := procSnap{user: 100, sys: 50, faults: 1000, vcs: 10, nvcs: 5, threads: 9, gcs: 3}
	b := procSnap{user: 160, sys: 80, faults: 1100, vcs: 5010, nvcs: 2005, threads: 11, gcs: 14}
	var buf bytes.Buffer
	roundLine(&buf, "small", 4, costAll, 10000, a, b)
	want := "round small | 4 | proxy+all | 10000 requests | user 60.0 µs | system 30.0 µs | faults 0.010 | switches 0.500 waited, 0.200 preempted | 11 threads | 11 collections\n"
	if got := buf.String(); got != want {
		t.Errorf("line\n%q, want\n%q", got, want)
	}
	buf.Reset()
	a.gcs = -1
	roundLine(&buf, "small", 4, stdlib, 10000, a, b)
	if !strings.HasSuffix(buf.String(), "| n/a collections\n") {
		t.Errorf("a target without collections: %q", buf.String())
	}
	buf.Reset()
	roundLine(&buf, "small", 4, costAll, 0, a, b)
	roundLine(&buf, "small", 4, costAll, 100, procSnap{gcs: -1}, procSnap{gcs: -1})
	if buf.Len() != 0 {
		t.Errorf("a round without requests or a snapshot wrote %q", buf.String())
	}
}
