package bench

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/shaperproxy/shaperproxy/fixtures"
	"github.com/tidwall/gjson"
)

// TestCostParts: -only's parts of the cost section pick measurements and
// workloads independently; naming none of a kind runs all of it (but the
// design experiment, cutthrough).
func TestCostParts(t *testing.T) {
	for _, tc := range []struct {
		only string
		want map[string]bool
	}{
		{"cost", map[string]bool{"latency": true, "saturation": true, "stream": true, "cutthrough": false, "small": true, "large": true}},
		// The design experiment runs only when named, and alone when
		// it is the only measure named.
		{"cost:cutthrough", map[string]bool{"latency": false, "saturation": false, "stream": false, "cutthrough": true, "small": true, "large": true}},
		{"cost:latency,cost:cutthrough,cost:large", map[string]bool{"latency": true, "saturation": false, "cutthrough": true, "small": false, "large": true}},
		{"cost:saturation,cost:small", map[string]bool{"latency": false, "saturation": true, "stream": false, "small": true, "large": false}},
		{"cost:large", map[string]bool{"latency": true, "saturation": true, "stream": true, "small": false, "large": true}},
		{"cost:stream", map[string]bool{"latency": false, "saturation": false, "stream": true, "small": true, "large": true}},
	} {
		sz := pick(true)
		if !selected(tc.only, "cost", &sz) {
			t.Fatalf("%s: cost not selected", tc.only)
		}
		for part, want := range tc.want {
			if got := sz.cost.runs(part); got != want {
				t.Errorf("-only %s: runs(%q) = %v, want %v", tc.only, part, got, want)
			}
		}
	}
}

// TestOnlyRefusesUnknown: a -only list naming a section or a cost part
// that does not exist is an error before anything starts, not a run of
// everything.
func TestOnlyRefusesUnknown(t *testing.T) {
	for only, ok := range map[string]bool{
		"": true, "cost": true, "cost:small,cost:saturation": true, "nonstream,cost:stream": true,
		"cost:smal": false, "cost:latncy": false, "costs": false, "stream:small": false,
	} {
		if err := checkOnly(only, sections); (err == nil) != ok {
			t.Errorf("-only %q: err %v, want ok=%v", only, err, ok)
		}
	}
	if err := Run(t.Context(), io.Discard, Options{Only: "cost:smal"}); err == nil {
		t.Error("Run with an unknown cost part did not fail")
	}
}

// TestSatRatio: the per-core ratio is the ratio of the medians, and the
// rounds' own ratios (round i of a against round i of b) are shown with
// their median and range.
func TestSatRatio(t *testing.T) {
	a := []float64{90, 80, 100, 70, 95} // median 90
	b := []float64{100, 100, 100, 100, 100}
	want := "0.90 (rounds: median 0.90, 0.70 to 1.00) (target ≥ 0.9: met)"
	if got := satRatio(a, b); got != want {
		t.Fatalf("got %q, want %q", got, want)
	}
	if got := satRatio([]float64{8}, []float64{10}); got != "0.80 (target ≥ 0.9: missed)" {
		t.Fatalf("one round: got %q", got)
	}
	// A round without a CPU reading (0) is left out of both the medians
	// and the per-round ratios; the other rounds stay paired.
	a, b = []float64{90, 0, 80, 100, 70}, []float64{100, 100, 0, 100, 100}
	if got, want := satRatio(a, b), "0.90 (rounds: median 0.90, 0.70 to 1.00) (target ≥ 0.9: met)"; got != want {
		t.Fatalf("missing readings: got %q, want %q", got, want)
	}
	if got := satRatio([]float64{0, 0}, []float64{0, 0}); !strings.HasPrefix(got, "n/a") {
		t.Fatalf("no readings at all: got %q", got)
	}
	if got := satRatio([]float64{0, 0}, []float64{100, 100}); !strings.HasPrefix(got, "n/a") {
		t.Fatalf("no reading of the proxy's: got %q", got)
	}
}

// TestJudged: a ratio is judged against its target unrounded, and
// shown with as many decimals as it takes not to read as the target's
// own value (a 1.0027 against ≤ 1.0 is missed, and shows as 1.003).
func TestJudged(t *testing.T) {
	for _, c := range []struct {
		ratio  float64
		target bound
		shown  string
		met    bool
	}{
		{1.0027, p50Target, "1.003", false},
		{0.9973, p50Target, "0.997", true},
		{1.0004, p50Target, "1.0004", false},
		{1.0, p50Target, "1.00", true},
		{0.95, p50Target, "0.95", true},
		{1.07, p50Target, "1.07", false},
		{1.4999, p99Target, "1.4999", true},
		{0.8999, perCoreTarget, "0.8999", false},
		{0.9012, perCoreTarget, "0.901", true},
		{0.94, perCoreTarget, "0.94", true},
	} {
		shown, met := judged(c.ratio, c.target)
		if shown != c.shown || met != c.met {
			t.Errorf("%v against %s: %q, met %v; want %q, %v", c.ratio, c.target, shown, met, c.shown, c.met)
		}
	}
}

// TestFailuresCounted: a target that fails one request in a few hundred
// is measured, its failures left out of the figures and shown in a row;
// one that fails more than 1% of them stops the section with the first
// error. Both the open-loop and the closed-loop senders tally.
func TestFailuresCounted(t *testing.T) {
	target := func(every int64) costTarget {
		var n atomic.Int64
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if n.Add(1)%every == 0 {
				http.Error(w, "down", http.StatusBadGateway)
				return
			}
			io.WriteString(w, `{"ok":true}`)
		}))
		t.Cleanup(srv.Close)
		return costTarget{name: srv.URL, url: srv.URL}
	}
	ctx := context.Background()
	c := &http.Client{}
	body := [][]byte{[]byte(`{}`)}

	rare, often := target(300), target(20)
	fs, check := tallies([]costTarget{rare, often})
	lat := fireBodies(ctx, c, rare.url+chatPath, body, 600, 2000, fs[rare.name])
	if f := fs[rare.name]; f.sent != 600 || f.failed != 2 || len(lat) != 598 {
		t.Fatalf("rare: sent %d, failed %d, %d latencies", f.sent, f.failed, len(lat))
	}
	if err := check(); err != nil {
		t.Fatalf("two failures in 600 stopped the section: %v", err)
	}
	if err := fs[rare.name].down(rare.name, 0, 0); err != nil {
		t.Fatalf("a round with successes counted as down: %v", err)
	}
	n, _, _ := saturate(ctx, c, often, body, 4, 200*time.Millisecond, fs[often.name])
	if f := fs[often.name]; f.failed == 0 || n == 0 || n > f.sent-f.failed { // requests ending after the stop are sent, not done
		t.Fatalf("often: %d done, sent %d, failed %d", n, f.sent, f.failed)
	}
	err := check()
	if err == nil || !strings.Contains(err.Error(), "status 502") {
		t.Fatalf("one failure in 20 did not stop the section: %v", err)
	}
	dead := &failures{}
	for range 5 {
		dead.add(io.ErrUnexpectedEOF)
	}
	if err := dead.down("dead", 0, 0); err == nil {
		t.Fatal("a round of failures only did not count as down")
	}
	var w wideTable
	failedRow(&w, "t", "failed", []costTarget{rare, often}, fs)
	if len(w.rows) != 1 || w.rows[0][2] != "2 of 600" {
		t.Fatalf("failed row = %v", w.rows)
	}
	var none wideTable
	failedRow(&none, "t", "failed", []costTarget{rare}, map[string]*failures{rare.name: {sent: 5}})
	if len(none.rows) != 0 {
		t.Fatal("a row for no failures")
	}
}

// TestCutStreamCounted: a stream cut before its end is counted and left
// out of the gaps; the others are measured (one cut baseline stream used
// to stop the whole section).
func TestCutStreamCounted(t *testing.T) {
	var n atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		cut := n.Add(1) == 2
		for i := range 5 {
			if cut && i == 2 {
				panic(http.ErrAbortHandler) // the connection is cut mid-stream
			}
			_, _ = io.WriteString(w, "data: {}\n\n")
			w.(http.Flusher).Flush()
		}
	}))
	defer srv.Close()
	var f failures
	gaps := streamGaps(context.Background(), srv.Client(), srv.URL, 3, 5, &f)
	if f.sent != 3 || f.failed != 1 {
		t.Fatalf("tallied %d streams, %d failed; want 3 and 1", f.sent, f.failed)
	}
	if len(gaps) != 2*4 {
		t.Fatalf("%d gaps, want the 4 of each whole stream", len(gaps))
	}
	if err := f.down("upstream", 0, 0); err != nil {
		t.Fatalf("one cut stream of three: %v", err)
	}
}

// TestOneStreamCutLeftOut: with one stream a round, a cut stream leaves
// its round out of that target's figures and is counted in a row; it does
// not stop the section. A target that cuts more than one, and more than a
// tenth, does.
func TestOneStreamCutLeftOut(t *testing.T) {
	serve := func(cutEvery int) string {
		var n atomic.Int32
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			cut := cutEvery > 0 && int(n.Add(1))%cutEvery == 0
			for i := range 4 {
				if cut && i == 2 {
					panic(http.ErrAbortHandler)
				}
				_, _ = io.WriteString(w, "data: {}\n\n")
				w.(http.Flusher).Flush()
			}
		}))
		t.Cleanup(srv.Close)
		return srv.URL
	}
	cs := costSizes{streamRounds: 12, streamEvents: 4}
	run := func(cutEvery int) (*wideTable, error) {
		targets := []costTarget{{name: direct, url: serve(0)}, {name: stdlib, url: serve(cutEvery)}, {name: costAll, url: serve(0)}}
		w := &wideTable{}
		return w, costStreams(context.Background(), http.DefaultClient, targets, 1, cs, w)
	}
	w, err := run(12) // one cut in twelve rounds
	if err != nil {
		t.Fatalf("one cut stream stopped the section: %v", err)
	}
	if len(w.rows) != 2 || w.rows[1][1] != "streams cut (left out of the gaps)" || w.rows[1][3] != "1 of 12" {
		t.Fatalf("rows %q", w.rows)
	}
	if _, err := run(4); err == nil || !strings.Contains(err.Error(), "3 of 12 streams cut") {
		t.Fatalf("a quarter of the streams cut: %v", err)
	}
	// One cut is never enough to stop it, however few the streams (the
	// full run has 20 rounds; the quick run in the tests, 1).
	for _, rounds := range []int{1, 20} {
		cs.streamRounds = rounds
		if _, err := run(rounds); err != nil {
			t.Fatalf("one cut stream of %d stopped the section: %v", rounds, err)
		}
	}
}

// TestParseRounds: -saturation takes ROUNDSxDURATION within bounds, and
// refuses anything else before a run starts.
func TestParseRounds(t *testing.T) {
	n, d, err := parseRounds("40x600ms")
	if err != nil || n != 40 || d != 600*time.Millisecond {
		t.Fatalf("40x600ms: %d, %v, %v", n, d, err)
	}
	for _, bad := range []string{"", "40", "x600ms", "0x1s", "1001x1s", "40x", "40x50ms", "40x2m", "-1x1s", "40x1s x"} {
		if _, _, err := parseRounds(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
	if err := Run(t.Context(), io.Discard, Options{Only: "cost:saturation", Saturation: "40"}); err == nil {
		t.Error("Run with a malformed -saturation did not fail")
	}
}

// TestRoom: the room the per-core target leaves is what a request may take
// at 0.9× the reverse proxy's rate less what the read-whole baseline's
// takes, and less what the core's takes when the run has a core column;
// what proxy+all spends is measured from the same baselines.
func TestRoom(t *testing.T) {
	rp, readWhole, all, core := 1e6/90.0, 1e6/95.0, 1e6/120.0, 1e6/92.0 // 90, 95, 120 and 92 µs a request
	want := "0.9× allows 100 µs a request: +5 µs above the read-whole baseline, where proxy+all spends +25 µs; +8 µs above the core (no feature on), where it spends +28 µs"
	if got := room(all, rp, readWhole, core); got != want {
		t.Fatalf("got %q, want %q", got, want)
	}
	// When the core's column is not the core (-against: another build's
	// proxy+all), only the baseline is read.
	want = "0.9× allows 100 µs a request: +5 µs above the read-whole baseline, where proxy+all spends +25 µs"
	if got := room(all, rp, readWhole, 0); got != want {
		t.Fatalf("no core: got %q, want %q", got, want)
	}
	// A target tighter than the baseline itself leaves negative room.
	want = "0.9× allows 100 µs a request: -20 µs above the read-whole baseline, where proxy+all spends +5 µs; -30 µs above the core (no feature on), where it spends -5 µs"
	if got := room(1e6/125.0, rp, 1e6/120.0, 1e6/130.0); got != want {
		t.Fatalf("no room: got %q, want %q", got, want)
	}
	if got := room(0, rp, readWhole, core); !strings.HasPrefix(got, "n/a") {
		t.Fatalf("no reading: got %q", got)
	}
	if got := cpuPer(1e6 / 1553.0); got != "1.55 ms" {
		t.Fatalf("cpuPer: got %q", got)
	}
}

// TestSeedBodyOrder: the bench's seed request is the fixture's, with its
// members in the SDKs' order ("messages" before "tools") and not streamed.
func TestSeedBodyOrder(t *testing.T) {
	b := seedBody()
	var keys []string
	gjson.ParseBytes(b).ForEach(func(k, _ gjson.Result) bool { keys = append(keys, k.Str); return true })
	if want := []string{"messages", "model", "tools", "stream"}; !slices.Equal(keys, want) {
		t.Fatalf("members %v, want %v", keys, want)
	}
	seed := fixtures.SeedHistory()
	for _, k := range []string{"messages", "model", "tools"} {
		if gjson.GetBytes(b, k).Raw != gjson.GetBytes(seed, k).Raw {
			t.Errorf("%s differs from the fixture's", k)
		}
	}
	if s := gjson.GetBytes(b, "stream"); s.Type != gjson.False {
		t.Errorf("stream = %s, want false", s.Raw)
	}
}

// TestStolenShare: the steal row is the host's share of the machine's CPU
// time between two readings of /proc/stat, and says so when there is none.
func TestStolenShare(t *testing.T) {
	a := cpuClock{steal: 10, total: 1000, ok: true}
	b := cpuClock{steal: 25, total: 1100, ok: true}
	if got, want := stolenShare(a, b), "15.0% of the CPU time"; got != want {
		t.Errorf("stolenShare = %q, want %q", got, want)
	}
	if got := stolenShare(cpuClock{}, b); !strings.HasPrefix(got, "n/a") {
		t.Errorf("without a first reading: %q", got)
	}
	if got := stolenShare(b, b); !strings.HasPrefix(got, "n/a") {
		t.Errorf("no time between the readings: %q", got)
	}
	if runtime.GOOS != "linux" {
		return
	}
	c0 := readCPUClock()
	time.Sleep(20 * time.Millisecond)
	c1 := readCPUClock()
	if !c0.ok || !c1.ok || c1.total < c0.total || c1.steal < c0.steal || c0.steal > c0.total {
		t.Fatalf("/proc/stat read as %+v then %+v", c0, c1)
	}
}

// TestProfileDir: -profile makes its directory, as the children only
// create files in it (and wrote none into a directory that did not exist):
// a path that cannot be one is refused before anything runs; a child's
// profiles are written there.
func TestProfileDir(t *testing.T) {
	file := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	err := Run(t.Context(), io.Discard, Options{Only: "cost:small", Profile: filepath.Join(file, "profiles")})
	if err == nil || !strings.Contains(err.Error(), "profiles' directory") {
		t.Fatalf("a directory under a file: %v, want a clear error", err)
	}
	dir := t.TempDir()
	t.Setenv(ProfileEnv, dir)
	startProfile("proxy+all")()
	for _, name := range []string{"cpu-proxy-all.pprof", "allocs-proxy-all.pprof"} {
		if fi, err := os.Stat(filepath.Join(dir, name)); err != nil || fi.Size() == 0 {
			t.Errorf("%s: %v", name, err)
		}
	}
}

// TestWithout: -without turns the named features of proxy+all off, and
// only of proxy+all; a name that is no feature is refused before
// anything runs.
func TestWithout(t *testing.T) {
	all := variantConfig(full, "http://f", "http://s", t.TempDir(), "")
	if !all.Capture.Enabled || !all.Guard.Enabled || !all.Shaping.Enabled {
		t.Fatalf("proxy+all: capture %v, guard %v, shaping %v; want all on", all.Capture.Enabled, all.Guard.Enabled, all.Shaping.Enabled)
	}
	c := variantConfig(full, "http://f", "http://s", t.TempDir(), "capture,shaping")
	if c.Capture.Enabled || !c.Guard.Enabled || c.Shaping.Enabled {
		t.Fatalf("proxy+all without capture and shaping: capture %v, guard %v, shaping %v", c.Capture.Enabled, c.Guard.Enabled, c.Shaping.Enabled)
	}
	if c := variantConfig(captured, "http://f", "http://s", t.TempDir(), "capture"); !c.Capture.Enabled {
		t.Fatal("-without turned capture off in proxy+capture")
	}
	if err := Run(t.Context(), io.Discard, Options{Only: "cost:small", Without: "capture,gaurd"}); err == nil || !strings.Contains(err.Error(), `"gaurd"`) {
		t.Fatalf("a misspelt feature: %v, want it named in the error", err)
	}
}

// countsOf serves *text as a proxy's /metrics page and returns what reads
// it (ReadProxyCounts), the page as *text holds it at each read.
func countsOf(t *testing.T, text *string) func() ProxyCounts {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, *text) }))
	t.Cleanup(srv.Close)
	return func() ProxyCounts {
		pc, err := ReadProxyCounts(t.Context(), srv.URL)
		if err != nil {
			t.Fatal(err)
		}
		return pc
	}
}

// TestReadProxyCounts: the hold and the edited bodies are read from a
// proxy's metrics text, and the means and shares between two readings
// are of what happened between them.
func TestReadProxyCounts(t *testing.T) {
	var text string
	read := countsOf(t, &text)
	page := func(sum float64, n int, over, fresh float64) string {
		return fmt.Sprintf(`# TYPE shaperproxy_request_hold_seconds histogram
shaperproxy_request_hold_seconds_bucket{model="m",route="a",le="+Inf"} %[2]d
shaperproxy_request_hold_seconds_sum{model="m",route="a"} %[1]g
shaperproxy_request_hold_seconds_count{model="m",route="a"} %[2]d
shaperproxy_request_hold_seconds_bucket{model="m",route="b",le="+Inf"} 1
shaperproxy_request_hold_seconds_sum{model="m",route="b"} 0.001
shaperproxy_request_hold_seconds_count{model="m",route="b"} 1
# TYPE shaperproxy_edited_bodies_total counter
shaperproxy_edited_bodies_total{how="written_over"} %[3]g
shaperproxy_edited_bodies_total{how="fresh"} %[4]g
`, sum, n, over, fresh)
	}
	text = page(0.002, 4, 10, 2)
	before := read()
	if before.Hold.Count != 5 || before.WrittenOver != 10 || before.Fresh != 2 {
		t.Fatalf("read %+v", before)
	}
	if _, ok := before.HoldSince(before); ok {
		t.Fatal("a hold over no request")
	}
	text = page(0.002+0.0009, 7, 19, 3) // 3 requests held 300 µs each; 9 of 10 bodies written over
	after := read()
	if d, ok := after.HoldSince(before); !ok || d.Round(time.Microsecond) != 300*time.Microsecond {
		t.Fatalf("mean hold %v, %v; want 300µs", d, ok)
	}
	if share, ok := after.WrittenOverSince(before); !ok || share != 90 {
		t.Fatalf("written over %v%%, %v; want 90%%", share, ok)
	}
}

// TestStepsSince: the hold's steps are read from a proxy's metrics text,
// put in the order the proxy takes them (the parse first, the send last),
// and their means between two readings are of the requests held between
// them; a step no request took meanwhile is left out.
func TestStepsSince(t *testing.T) {
	var text string
	read := countsOf(t, &text)
	page := func(parse, shaper, restorer, send float64, n, idle int) string {
		var b strings.Builder
		b.WriteString("# TYPE shaperproxy_request_hold_step_seconds histogram\n")
		for _, s := range []struct {
			name string
			sum  float64
			n    int
		}{{"idle.Transform", 0.001, idle}, {"parse", parse, n}, {"reqshape.Shaper", shaper, n}, {"review.Restorer", restorer, n}, {"send", send, n}} {
			fmt.Fprintf(&b, "shaperproxy_request_hold_step_seconds_bucket{step=%q,le=\"+Inf\"} %d\n", s.name, s.n)
			fmt.Fprintf(&b, "shaperproxy_request_hold_step_seconds_sum{step=%q} %g\n", s.name, s.sum)
			fmt.Fprintf(&b, "shaperproxy_request_hold_step_seconds_count{step=%q} %d\n", s.name, s.n)
		}
		return b.String()
	}
	text = page(0.001, 0.002, 0.0005, 0.0001, 10, 3)
	before := read()
	var names []string
	for _, s := range before.Steps {
		names = append(names, s.Name)
	}
	if got := strings.Join(names, " "); got != "parse idle.Transform reqshape.Shaper review.Restorer send" {
		t.Fatalf("steps in the order %s", got)
	}
	if got := before.StepsSince(before); got != "" {
		t.Fatalf("steps over no request: %q", got)
	}
	// Two requests more: parse 20 µs each, the shaper 45, the restorer
	// 5, the send 9; the idle transform took none.
	text = page(0.001+0.00004, 0.002+0.00009, 0.0005+0.00001, 0.0001+0.000018, 12, 3)
	if got, want := read().StepsSince(before), "parse 20, reqshape.Shaper 45, review.Restorer 5, send 9"; got != want {
		t.Fatalf("steps %q, want %q", got, want)
	}
}

// TestWaySince: the call's way is read from a proxy's metrics text (every
// route and model's series added up): the mean time to the upstream's
// header, and from it on to the answer's first bytes at the client, of
// the calls between two readings; nothing over no call, and no relay
// when no answer was timed at the client.
func TestWaySince(t *testing.T) {
	var text string
	read := countsOf(t, &text)
	page := func(header, client float64, n, clients int) string {
		var b strings.Builder
		for _, h := range []struct {
			name string
			sum  float64
			n    int
		}{{"shaperproxy_upstream_header_seconds", header, n}, {"shaperproxy_client_first_byte_seconds", client, clients}} {
			fmt.Fprintf(&b, "# TYPE %s histogram\n", h.name)
			for _, route := range []string{"a", "b"} { // the calls split between two routes
				fmt.Fprintf(&b, "%s_bucket{model=\"m\",route=%q,le=\"+Inf\"} %d\n", h.name, route, h.n)
				fmt.Fprintf(&b, "%s_sum{model=\"m\",route=%q} %g\n", h.name, route, h.sum/2)
				fmt.Fprintf(&b, "%s_count{model=\"m\",route=%q} %d\n", h.name, route, h.n/2)
			}
		}
		return b.String()
	}
	text = page(0.01, 0.012, 40, 40)
	before := read()
	if before.Header.Count != 40 || before.ClientFirst.Count != 40 {
		t.Fatalf("read %+v", before)
	}
	if got := before.WaySince(before); got != "" {
		t.Fatalf("a way over no call: %q", got)
	}
	// Four calls more: the header after 250 µs each, the client's first
	// bytes 60 µs after it.
	text = page(0.01+0.001, 0.012+0.00124, 44, 44)
	if got, want := read().WaySince(before), "header 250, then client +60"; got != want {
		t.Fatalf("way %q, want %q", got, want)
	}
	text = page(0.01+0.001, 0.012, 44, 40) // no answer reached the client meanwhile
	if got, want := read().WaySince(before), "header 250"; got != want {
		t.Fatalf("way %q, want %q", got, want)
	}
}

// TestMinorFaults: the page-fault row counts a page's first write. 32 MiB
// written a byte a page after the heap was given back to the system take
// at least half as many faults as pages.
func TestMinorFaults(t *testing.T) {
	if _, ok := minorFaults(0); !ok {
		t.Skip("no /proc/self/stat")
	}
	debug.FreeOSMemory()
	const size, page = 32 << 20, 4096
	before, _ := minorFaults(0)
	b := make([]byte, size)
	for i := 0; i < size; i += page {
		b[i] = 1
	}
	after, _ := minorFaults(0)
	runtime.KeepAlive(b)
	if got := after - before; got < size/page/2 {
		t.Errorf("%d pages written for the first time: %d minor faults counted", size/page, got)
	}
	if _, ok := minorFaults(1 << 30); ok {
		t.Error("a process that does not exist has page faults")
	}
}

// TestMetricsOwnConnections: the benchmark reads a target's /metrics on a
// connection of its own, never on one of the measuring client's: the
// proxy's server hands a connection that carried a GET to net/http's for
// good, and the requests measured after it on that connection would be
// measured there (every seed request was, in turns, up to session BW).
func TestMetricsOwnConnections(t *testing.T) {
	var mu sync.Mutex
	from := map[string]string{} // the method and path of each request → the client's address
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		from[r.Method+" "+r.URL.Path+" "+r.Header.Get("X-Seq")] = r.RemoteAddr
		mu.Unlock()
		_, _ = io.Copy(io.Discard, r.Body)
		if r.URL.Path == "/metrics" {
			io.WriteString(w, "# TYPE shaperproxy_heap_warmed_bytes_total counter\nshaperproxy_heap_warmed_bytes_total 2e6\n")
		}
	}))
	defer srv.Close()
	c := newCostClient()
	ctx := t.Context()
	send := func(seq string) {
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, srv.URL+chatPath, strings.NewReader(`{}`))
		req.Header.Set("X-Seq", seq)
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	send("1")
	if got := warmedOf(ctx, srv.URL+"/metrics"); got != "heap warmed 2.0 MB" {
		t.Fatalf("warmedOf = %q", got)
	}
	send("2")
	mu.Lock()
	defer mu.Unlock()
	first, second, metrics := from["POST "+chatPath+" 1"], from["POST "+chatPath+" 2"], from["GET /metrics "]
	if first == "" || first != second {
		t.Fatalf("the measuring client's requests came from %q and %q: want one kept-alive connection", first, second)
	}
	if metrics == "" || metrics == first {
		t.Fatalf("/metrics was read from %q, the measuring client's connection %q: want one of its own", metrics, first)
	}
}
