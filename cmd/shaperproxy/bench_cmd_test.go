package main

import (
	"bytes"
	"context"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/shaperproxy/shaperproxy/internal/bench"
)

// TestQuickRun runs the benchmark at its smallest sizes: the program must
// work (CI would otherwise only learn at release time that it broke). It
// checks the table's shape and that no event was lost or coalesced, not
// the timings.
func TestQuickRun(t *testing.T) {
	s := quickBench(t, "")
	for _, want := range []string{"latency p99 via proxy", "inter-chunk gap p99", "RSS growth", "events received after the next was written, via proxy"} {
		if !strings.Contains(s, want) {
			t.Errorf("table lacks %q:\n%s", want, s)
		}
	}
}

// TestQuickCostRun runs the per-request cost section at its smallest
// sizes, in this process (a default run leaves it to -subprocess): its
// table must come out whole.
func TestQuickCostRun(t *testing.T) {
	s := quickBench(t, "cost")
	for _, want := range []string{"Per-request cost", "latency p50: direct, then added", "requests per CPU-second", "inter-event gap p99", "gave to other guests meanwhile (steal, /proc/stat) | "} {
		if !strings.Contains(s, want) {
			t.Errorf("table lacks %q:\n%s", want, s)
		}
	}
	// The history row, read from each proxy's /metrics: the seed's request
	// is re-sent, so most of its messages are taken from the previous
	// parse (89–100% in runs under -race; the first of each beginning, and
	// concurrent ones, are parsed whole).
	// Of them, the seed's are taken on its body's keys (all but the
	// first of a beginning, and the last partial block's).
	shares := regexp.MustCompile(`\| messages reused ([0-9.]+)% of [0-9]+ \(taken on keys ([0-9.]+)%\);`).FindAllStringSubmatch(s, -1)
	if len(shares) != 2 {
		t.Fatalf("the history row has %d shares of reused messages, want 2:\n%s", len(shares), s)
	}
	for _, m := range shares {
		if v, _ := strconv.ParseFloat(m[1], 64); v < 50 {
			t.Errorf("messages reused %s%%: the history row does not read the proxy's counters", m[1])
		}
		if v, _ := strconv.ParseFloat(m[2], 64); v <= 0 {
			t.Errorf("messages taken on keys %s%%: the history row does not read the proxy's keyed counter", m[2])
		}
	}
	// The hold rows, one under each latency workload, read from each
	// proxy's hold histogram over that workload: a duration for both
	// variants, not "n/a".
	holds := regexp.MustCompile(`\| the proxy's hold: [^|]*\|  \|  \|  \| ([^|]+) \| ([^|]+) \|`).FindAllStringSubmatch(s, -1)
	if len(holds) != 2 {
		t.Fatalf("%d hold rows, want 2 (the small request's and the seed's):\n%s", len(holds), s)
	}
	for _, m := range holds {
		for _, v := range m[1:] {
			if !regexp.MustCompile(`^[0-9.]+ (µs|ms|s)$`).MatchString(v) {
				t.Errorf("hold %q is not a duration read from the proxy's metrics:\n%s", v, m[0])
			}
		}
	}
}

// TestQuickCutThrough runs the cost section's design experiment at its
// smallest sizes, in this process: its table must come out with the
// proxy's hold read from its metrics and a latency under every column.
func TestQuickCutThrough(t *testing.T) {
	s := quickBench(t, "cost:cutthrough")
	if !regexp.MustCompile(`with the proxy's hold \([0-9.]+ (µs|ms), its mean over [0-9]+ requests`).MatchString(s) {
		t.Fatalf("the experiment's title has no hold read from the proxy:\n%s", s)
	}
	row := regexp.MustCompile(`(?m)^\| the seed's request [^|]*\| latency p50: direct, then added [^|]*\|(.*)\|$`).FindStringSubmatch(s)
	if row == nil {
		t.Fatalf("no p50 row:\n%s", s)
	}
	cells := strings.Split(row[1], "|")
	if len(cells) != 10 { // direct, 2 reverse proxies, 3 forms, the core read whole and streamed, proxy+all, the ratio
		t.Fatalf("the p50 row has %d cells, want 10: %q", len(cells), row[1])
	}
	for _, c := range cells[1:9] {
		if !regexp.MustCompile(`^ [+-][0-9.]+ (µs|ms|s)`).MatchString(c) {
			t.Errorf("cell %q is not an added latency", c)
		}
	}
	if strings.Contains(s, "requests per CPU-second") {
		t.Error("the experiment ran the section's saturation measure too")
	}
}

// quickBench runs the sections only names (all but cost: "") at the
// benchmark's smallest sizes, in this process, and returns its table.
func quickBench(t *testing.T, only string) string {
	t.Helper()
	if testing.Short() {
		t.Skip("short")
	}
	var out bytes.Buffer
	if err := bench.Run(context.Background(), &out, bench.Options{Quick: true, Only: only, Build: benchBuild}); err != nil {
		t.Fatal(err)
	}
	return out.String()
}

// TestBenchAgainst runs the cost section with -against naming a binary
// (this one, run as the program): the core's column is that binary's
// proxy+all, in a process of its own, so its hold's steps include the
// guard's, which the core does not run. Without -subprocess, -against is
// refused, and so it is with the cutthrough experiment, whose core it
// would replace.
func TestBenchAgainst(t *testing.T) {
	if testing.Short() {
		t.Skip("short")
	}
	code, _, stderr := runMain(t, "bench", "-quick", "-only", "cost", "-against", os.Args[0])
	if code == 0 || !strings.Contains(stderr, "-against needs -subprocess") {
		t.Fatalf("-against without -subprocess: exit %d, stderr %q", code, stderr)
	}
	code, _, stderr = runMain(t, "bench", "-quick", "-subprocess", "-only", "cost:cutthrough", "-against", os.Args[0])
	if code == 0 || !strings.Contains(stderr, "the cutthrough experiment") {
		t.Fatalf("-against with the cutthrough experiment, which measures the core: exit %d, stderr %q", code, stderr)
	}
	code, out, stderr := runMain(t, "bench", "-quick", "-subprocess", "-only", "cost:latency,cost:small", "-against", os.Args[0])
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	if !strings.Contains(out, "| proxy+all of "+os.Args[0]+" | proxy+all |") {
		t.Fatalf("the header does not name the other build's column:\n%s", out)
	}
	steps := regexp.MustCompile(`\| the hold by step [^|]*\|  \|  \|  \| ([^|]+) \| ([^|]+) \|`).FindStringSubmatch(out)
	if steps == nil {
		t.Fatalf("no hold-step row:\n%s", out)
	}
	for _, cell := range steps[1:] {
		if !strings.Contains(cell, "guard.Hook") {
			t.Errorf("a column's hold has no guard step: %q (not proxy+all)", cell)
		}
	}
	// Each process's page faults, and the heap each proxy's warming wrote.
	faults := regexp.MustCompile(`\| page faults the serving process took [^|]*\| (\d+) \| (\d+) \| (\d+) \| (\d+); heap warmed [0-9.]+ MB \| (\d+); heap warmed [0-9.]+ MB \|  \|`).FindStringSubmatch(out)
	if faults == nil {
		t.Fatalf("no page-fault row with a count for each process and the proxies' warming:\n%s", out)
	}
}
