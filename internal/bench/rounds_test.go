package bench

import (
	"bytes"
	"strings"
	"testing"
)

// TestRoundLine: a round's line is the two snapshots' differences per
// request, CPU in µs (10 ms a tick), and nothing for a target read in
// this process or a round that served nothing.
func TestRoundLine(t *testing.T) {
	a := procSnap{procCounts: procCounts{user: 100, sys: 50, faults: 1000}, vcs: 10, nvcs: 5, threads: 9, gcs: 3}
	b := procSnap{procCounts: procCounts{user: 160, sys: 80, faults: 1100}, vcs: 5010, nvcs: 2005, threads: 11, gcs: 14}
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
