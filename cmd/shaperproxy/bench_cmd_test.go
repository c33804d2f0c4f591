package main

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/shaperproxy/shaperproxy/internal/bench"
)

// TestQuickRun runs the benchmark at its smallest sizes: the program must
// work (CI would otherwise only learn at release time that it broke). It
// checks the table's shape and that no event was lost or coalesced, not
// the timings.
func TestQuickRun(t *testing.T) {
	if testing.Short() {
		t.Skip("short")
	}
	var out bytes.Buffer
	if err := bench.Run(context.Background(), &out, bench.Options{Quick: true, Build: benchBuild}); err != nil {
		t.Fatal(err)
	}
	s := out.String()
	for _, want := range []string{"latency p99 via proxy", "inter-chunk gap p99", "RSS growth", "events received after the next was written, via proxy"} {
		if !strings.Contains(s, want) {
			t.Errorf("table lacks %q:\n%s", want, s)
		}
	}
}
