package bench

import (
	"bytes"
	"cmp"
	"context"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/shaperproxy/shaperproxy/fixtures"
	"github.com/tidwall/gjson"
	"github.com/tidwall/sjson"
)

// The "cost" section (issue 15): what a request costs through the proxy,
// against the standard library's reverse proxy (tuned, in a process of its
// own) and against the direct path, all measured in the same run. The
// client is this process; the upstream, the reverse proxy and each proxy
// variant run as child processes (`bench -child ROLE`), so each has its
// own scheduler and garbage collector, as in production. Without a child
// command (the tests) they run in this process and the figures only show
// that the section works.
//
// Every latency figure is an added latency: a target's percentile minus
// the direct path's, per round, rounds interleaved (each in the order of
// a row of a Williams design: inOrder), the median of the rounds
// reported. The seed's latency goes further: its rounds are made of
// turns, one request to each target a turn (turnLatencies). "Per core"
// divides the requests served by the CPU time the serving process used
// meanwhile (/proc/PID/stat), which is what one core gives when the
// machine is shared with the client and the upstream.

// costSizes are the workload sizes of the cost section.
type costSizes struct {
	largeRounds      int           // interleaved rounds of the seed's latency run
	smallRounds      int           // interleaved rounds of the small request's latency run
	smallN, rate     int           // small requests per target per round, and their rate
	largeN, bigRate  int           // the seed's request: per target per round, and its rate
	satRounds        int           // saturation rounds
	satDur           time.Duration // each saturation run
	satSmall, satBig int           // concurrent clients at saturation
	streamRounds     int
	streamConc       int // concurrent streams per target per round, in the second streaming row
	streamEvents     int
	streamGap        time.Duration
	draws            int      // processes a target's latency rounds are shared by (costTarget.draws)
	parts            []string // of "latency", "saturation", "stream", and of the workloads "small", "large" (none of a kind: all of it)
}

// runs reports whether the section runs part (a measurement or a workload).
func (c costSizes) runs(part string) bool {
	if part == "cutthrough" { // an experiment, not a measure of the proxy: only when named
		return slices.Contains(c.parts, part)
	}
	kind := costMeasures
	if slices.Contains(costWorkloads, part) {
		kind = costWorkloads
	}
	named := slices.ContainsFunc(c.parts, func(p string) bool { return slices.Contains(kind, p) })
	return !named || slices.Contains(c.parts, part)
}

var (
	costMeasures  = []string{"latency", "saturation", "stream", "cutthrough"}
	costWorkloads = []string{"small", "large"}
)

// warmup is what every process of every target is sent before the
// section's rounds (and the seed's again before its latency rounds): n of
// bodies at rate.
type warmup struct {
	bodies  [][]byte
	n, rate int
}

// send sends the warm-up to every process of every target, one after the
// other: the first process of every target, then the second of every
// target, and so on, so that no target's processes wait longer after
// their warm-up for their rounds than another's (round r goes to process
// r mod draws). Warmed target by target, the reverse proxy's processes
// waited about 12 s longer for their first round of the seed than
// proxy+all's. A failed warm-up request is no measurement; a target that
// serves none of its warm-up is down.
func (wu warmup) send(ctx context.Context, c *http.Client, targets []costTarget) error {
	most := 0
	for _, tg := range targets {
		most = max(most, len(tg.drawURLs()))
	}
	for i := range most {
		for _, tg := range targets {
			us := tg.drawURLs()
			if i >= len(us) {
				continue
			}
			var f failures
			fireBodies(ctx, c, us[i]+chatPath, wu.bodies, wu.n, wu.rate, &f)
			if err := f.down("warm-up "+tg.name, 0, 0); err != nil {
				return err
			}
		}
	}
	return nil
}

// smallWarmup is a quarter of a latency round's small requests (at
// least 20) at the round's rate. A process is warmed at the rate its
// rounds come at: warmed with 20 at 50/s, every process's first latency
// round read a p99 up to twice its later rounds' and a p50 a fifth above
// them, for every target (session CA); with session BZ's four processes
// a target, one round in five. What grew in that round (connections,
// goroutines, the heap) was not told apart.
func (cs costSizes) smallWarmup(small [][]byte) warmup {
	return warmup{small, max(20, cs.smallN/4), cs.rate}
}

// largeWarmup is the seed's request a third of a latency round's
// count (at least 2) at that round's rate, before the section's rounds
// and again right before the seed's latency rounds.
func (cs costSizes) largeWarmup(large [][]byte) warmup {
	return warmup{large, max(2, cs.largeN/3), cs.bigRate}
}

func pickCost(quick bool) costSizes {
	if quick {
		return costSizes{largeRounds: 2, smallRounds: 2, smallN: 40, rate: 400, largeN: 3, bigRate: 20, satRounds: 1, satDur: 300 * time.Millisecond,
			satSmall: 8, satBig: 2, streamRounds: 1, streamConc: 2, streamEvents: 30, streamGap: time.Millisecond, draws: 2}
	}
	// Each measure's rounds are whole cycles of the Williams design's rows
	// (ten for the section's five targets): a part cycle leaves the
	// targets at some places, and after some others, more often than the
	// rest (TestFullSizesWholeCycles). Until session BM the saturation
	// ran 9 rounds and the streams 8. Since session CA both latency runs
	// have 40 rounds (20 before) over eight processes a target (four in
	// session BZ): their ratios, the figures nearest their targets, moved
	// by a tenth from run to run, and two processes of one build keep
	// levels apart for a run; each process now serves five rounds.
	return costSizes{largeRounds: 40, smallRounds: 40, smallN: 500, rate: 500, largeN: 30, bigRate: 20, satRounds: 10, satDur: 3 * time.Second,
		satSmall: 32, satBig: 4, streamRounds: 20, streamConc: 4, streamEvents: 1000, streamGap: time.Millisecond, draws: 8}
}

// costTarget is one way to the upstream.
type costTarget struct {
	name string
	url  string // base URL; the chat path is appended
	pid  int    // the process that serves it (0: this one)
	// draws are the base URLs of the processes that serve the target's
	// latency rounds in turn, url's first (none: url's alone): round r
	// goes to draws[r mod len(draws)], at the round's whole rate. Two
	// processes of one build differ by up to a quarter of the seed's added
	// p50 and keep their level for a run (internal/bench/HISTORY.md,
	// Sessions BY and BZ); a target served by one process has its ratio
	// stand on that one draw. The other measures, and the rows read from a
	// proxy's /metrics, are url's process's.
	draws []string
}

// drawURL is the base URL of the process that serves the target's
// latency round r.
func (tg costTarget) drawURL(r int) string {
	us := tg.drawURLs()
	return us[r%len(us)]
}

// first is the target served by its first process alone.
func (tg costTarget) first() costTarget {
	tg.draws = nil
	return tg
}

// drawURLs are the base URLs of every process that serves the target.
func (tg costTarget) drawURLs() []string {
	if len(tg.draws) == 0 {
		return []string{tg.url}
	}
	return tg.draws
}

// targetNamed returns the target of that name among targets (costTargets
// starts every one the section names).
func targetNamed(targets []costTarget, name string) costTarget {
	return targets[slices.IndexFunc(targets, func(tg costTarget) bool { return tg.name == name })]
}

// The targets of the cost section, in their column order.
const (
	direct  = "direct"
	stdlib  = "ReverseProxy"
	readRP  = "ReverseProxy, body read whole"
	costAll = full // the default configuration
)

// costVariants are the proxy variants measured besides the baseline.
var costVariants = []string{bare, costAll}

func benchCost(ctx context.Context, e *env, sz sizes, t *table) error {
	cs := sz.cost
	draws := 1 // the latency rounds alone are shared (costTarget.draws)
	if cs.runs("latency") {
		draws = cs.draws
	}
	targets, separate, err := e.costTargets(draws)
	if err != nil {
		return err
	}
	c := newCostClient()
	coreColumn := bare
	if e.against != "" {
		coreColumn = costAll + " of " + e.against // Options.Against
	}
	w := &wideTable{header: []string{"workload", "metric", direct, stdlib, readRP, coreColumn, costAll, costAll + " ÷ " + stdlib}} // latency rows: added to direct's, as their metric says
	where := "client, upstream, ReverseProxy and each proxy in processes of their own"
	if !separate {
		where = "all in this process (no child command): the figures only show that the section runs"
	}
	w.title = fmt.Sprintf("Per-request cost (%s; GOMAXPROCS=%d in each)", where, gomaxprocs())
	clock := readCPUClock()
	faults := faultsOf(targets)
	small := smallBodies(16)
	large := [][]byte{seedBody()}
	warm := []warmup{cs.smallWarmup(small)}
	if (cs.runs("latency") || cs.runs("saturation")) && cs.runs("large") || cs.runs("cutthrough") { // the seed's warm-up is a few × 938 KB a process, shaped once
		warm = append(warm, cs.largeWarmup(large))
	}
	for _, w := range warm { // every path: connections, memos, the seed's first shaping
		if err := w.send(ctx, c, targets); err != nil {
			return err
		}
	}
	if cs.runs("latency") && cs.runs("small") {
		title := fmt.Sprintf("small non-stream (two messages), %d × %d requests at %d/s", cs.smallRounds, cs.smallN, cs.rate)
		if err := withHold(ctx, targets, w, title, func() error {
			return costLatency(ctx, c, targets, small, cs.smallN, cs.rate, cs.smallRounds, false, w, title, e.rounds)
		}); err != nil {
			return err
		}
	}
	if cs.runs("latency") && cs.runs("large") {
		title := fmt.Sprintf("the seed's request (631 messages, %d KB), %d × %d requests at %d/s, one to each target in turn", len(large[0])>>10, cs.largeRounds, cs.largeN, cs.bigRate)
		// Warmed again after the small request's rounds: with only the
		// warm-up before them, every process's first round of the seed
		// still read a p99 up to twice its later ones' (session CA).
		if cs.runs("small") {
			if err := cs.largeWarmup(large).send(ctx, c, targets); err != nil {
				return err
			}
		}
		if err := withHold(ctx, targets, w, title, func() error {
			return costLatency(ctx, c, targets, large, cs.largeN, cs.bigRate, cs.largeRounds, true, w, title, e.rounds)
		}); err != nil {
			return err
		}
	}
	if cs.runs("saturation") && cs.runs("small") {
		if err := costSaturation(ctx, c, targets, small, cs.satSmall, cs, w, "small non-stream at saturation", e.against != "", e.rounds); err != nil {
			return err
		}
	}
	if cs.runs("saturation") && cs.runs("large") {
		if err := costSaturation(ctx, c, targets, large, cs.satBig, cs, w, "the seed's request at saturation", e.against != "", e.rounds); err != nil {
			return err
		}
	}
	if cs.runs("stream") {
		// One stream at a time is what the target is about: what the
		// proxy adds to each event. Several at once on 2 cores measure the
		// scheduler as much (the baseline adds as much as the proxy).
		for _, conc := range []int{1, cs.streamConc} {
			if err := costStreams(ctx, c, targets, conc, cs, w); err != nil {
				return err
			}
		}
	}
	var design *wideTable      // the experiment's own table, after the section's
	if cs.runs("cutthrough") { // the seed's request, whichever workloads are named
		if design, err = benchCutThrough(ctx, e, c, targets, cs, large); err != nil {
			return err
		}
	}
	if cs.runs("large") && (cs.runs("latency") || cs.runs("saturation")) {
		row := []string{"all the runs above", "history taken from the conversation's previous request (the /metrics of the proxy's first process)", "", "", ""}
		for _, name := range []string{bare, costAll} {
			row = append(row, historyShare(ctx, metricsURL(targetNamed(targets, name))))
		}
		w.add(append(row, "")...)
	}
	w.add(append([]string{"the whole section, warm-ups included", "page faults the serving process took without a disk (minor, /proc/PID/stat; a target's first process), and the heap memory its warming wrote (shaperproxy_heap_warmed_bytes_total)"}, faultCells(ctx, targets, faults)...)...)
	w.add("the whole section, warm-ups included", "the machine's CPU time its host gave to other guests meanwhile (steal, /proc/stat)", stolenShare(clock, readCPUClock()), "", "", "", "", "")
	t.wides = append(t.wides, w)
	if design != nil {
		t.wides = append(t.wides, design)
	}
	return nil
}

// withHold runs a latency workload and adds, under its rows, each proxy
// variant's mean hold over it (shaperproxy_request_hold_seconds: from a
// request body's last byte to its hand-off upstream, the proxy's own work
// on the request), from its /metrics before and after.
func withHold(ctx context.Context, targets []costTarget, w *wideTable, title string, run func() error) error {
	var proxies []costTarget
	for _, name := range []string{bare, costAll} {
		proxies = append(proxies, targetNamed(targets, name))
	}
	holds, err := holdOver(ctx, proxies, run)
	if err != nil {
		return err
	}
	row := []string{title, "the proxy's hold: from the body's last byte to its hand-off upstream (mean over the rounds of the proxy's first process, from its /metrics)", "", "", ""}
	steps := []string{title, "the hold by step (mean µs; shaperproxy_request_hold_step_seconds): the parse, each request transform, the request sent", "", "", ""}
	way := []string{title, "the call's way (mean µs over the rounds of the proxy's first process, from its /metrics): from the request to the upstream's header (shaperproxy_upstream_header_seconds), then on to the answer's first bytes flushed to the client (shaperproxy_client_first_byte_seconds)", "", "", ""}
	for _, tg := range proxies {
		if h, ok := holds[tg.name]; ok {
			row = append(row, fmtDur(h.mean))
			steps = append(steps, h.steps)
			way = append(way, h.way)
		} else {
			row = append(row, "n/a")
			steps = append(steps, "n/a")
			way = append(way, "n/a")
		}
	}
	w.add(append(row, "")...)
	w.add(append(steps, "")...)
	w.add(append(way, "")...)
	return nil
}

// heldOver is a proxy's hold over a run: its mean, and its steps' means
// as a cell ("parse 21, review.Restorer 4, reqshape.Shaper 40, send 8");
// and the call's way as a cell ("header 262, then client +57").
type heldOver struct {
	mean  time.Duration
	steps string
	way   string
}

// holdOver runs run and returns each proxy target's mean hold
// (shaperproxy_request_hold_seconds) over it, and its steps', from its
// /metrics before and after; a target whose hold could not be read, or
// that held no request meanwhile, has none.
func holdOver(ctx context.Context, proxies []costTarget, run func() error) (map[string]heldOver, error) {
	read := func() map[string]ProxyCounts {
		out := map[string]ProxyCounts{}
		for _, tg := range proxies {
			if pc, err := ReadProxyCounts(ctx, metricsURL(tg)); err == nil {
				out[tg.name] = pc
			}
		}
		return out
	}
	before := read()
	if err := run(); err != nil {
		return nil, err
	}
	holds := map[string]heldOver{}
	for name, a := range read() {
		if d, ok := a.HoldSince(before[name]); ok {
			holds[name] = heldOver{mean: d, steps: a.StepsSince(before[name]), way: a.WaySince(before[name])}
		}
	}
	return holds, nil
}

// ProxyCounts are the counters of a proxy's /metrics that the benchmarks
// read before and after a run: its hold (shaperproxy_request_hold_seconds,
// in all and how many requests) and its large edited bodies written over
// an earlier one's or made fresh (shaperproxy_edited_bodies_total).
type ProxyCounts struct {
	// Hold is the hold's seconds in all and how many requests were held
	// (shaperproxy_request_hold_seconds).
	Hold timeSum
	// Header and ClientFirst are the seconds in all to the upstream's
	// header (shaperproxy_upstream_header_seconds) and to the answer's
	// first bytes flushed to the client
	// (shaperproxy_client_first_byte_seconds), and how many calls each.
	Header, ClientFirst timeSum
	WrittenOver, Fresh  float64
	// Steps are the hold's steps (shaperproxy_request_hold_step_seconds)
	// by name, in the order the proxy takes them: the parse first, the
	// send last, the transforms between (in their names' order).
	Steps []HoldStep
}

// HoldStep is one step of the hold in all: its seconds and how many
// requests took it.
type HoldStep struct {
	Name string
	timeSum
}

// ReadProxyCounts reads them from the proxy's metrics at url.
func ReadProxyCounts(ctx context.Context, url string) (ProxyCounts, error) {
	fams, err := metricFamilies(ctx, url)
	if err != nil {
		return ProxyCounts{}, err
	}
	var pc ProxyCounts
	pc.Hold = sumOf(fams, "shaperproxy_request_hold_seconds")
	pc.Header = sumOf(fams, "shaperproxy_upstream_header_seconds")
	pc.ClientFirst = sumOf(fams, "shaperproxy_client_first_byte_seconds")
	for _, m := range fams["shaperproxy_request_hold_step_seconds"].GetMetric() {
		for _, l := range m.GetLabel() {
			if l.GetName() == "step" {
				pc.Steps = append(pc.Steps, HoldStep{Name: l.GetValue(), timeSum: timeSum{Seconds: m.GetHistogram().GetSampleSum(), Count: m.GetHistogram().GetSampleCount()}})
			}
		}
	}
	rank := func(name string) int { // the parse first, the send last
		switch name {
		case "parse":
			return -1
		case "send":
			return 1
		}
		return 0
	}
	slices.SortStableFunc(pc.Steps, func(a, b HoldStep) int {
		return cmp.Or(cmp.Compare(rank(a.Name), rank(b.Name)), strings.Compare(a.Name, b.Name))
	})
	pc.WrittenOver = counterBy(fams, "shaperproxy_edited_bodies_total", "how", "written_over")
	pc.Fresh = counterBy(fams, "shaperproxy_edited_bodies_total", "how", "fresh")
	return pc, nil
}

// HoldSince is the mean hold of the requests held since before.
func (pc ProxyCounts) HoldSince(before ProxyCounts) (time.Duration, bool) {
	return pc.Hold.meanSince(before.Hold)
}

// StepsSince is the mean of each step of the hold over the requests
// held since before, in µs, as one cell ("parse 21, reqshape.Shaper 40,
// send 8"); "" when none was held.
func (pc ProxyCounts) StepsSince(before ProxyCounts) string {
	var parts []string
	for _, s := range pc.Steps {
		i := slices.IndexFunc(before.Steps, func(b HoldStep) bool { return b.Name == s.Name })
		var b HoldStep
		if i >= 0 {
			b = before.Steps[i]
		}
		if d, ok := s.meanSince(b.timeSum); ok {
			parts = append(parts, fmt.Sprintf("%s %.0f", s.Name, micros(d)))
		}
	}
	return strings.Join(parts, ", ")
}

// timeSum is a histogram's sum (seconds) and count over all its series.
type timeSum struct {
	Seconds float64
	Count   uint64
}

// sumOf adds up the series of the histogram name.
func sumOf(fams map[string]*dto.MetricFamily, name string) timeSum {
	var t timeSum
	for _, m := range fams[name].GetMetric() {
		t.Seconds += m.GetHistogram().GetSampleSum()
		t.Count += m.GetHistogram().GetSampleCount()
	}
	return t
}

// meanSince is the mean of what t counted since before; false when it
// counted nothing.
func (t timeSum) meanSince(before timeSum) (time.Duration, bool) {
	if t.Count <= before.Count {
		return 0, false
	}
	return time.Duration((t.Seconds - before.Seconds) / float64(t.Count-before.Count) * float64(time.Second)), true
}

// micros is d in µs.
func micros(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }

// WaySince is the call's way over the calls since before, in µs, as one
// cell: the mean time to the upstream's header, and from it on to the
// answer's first bytes at the client ("header 262, then client +57");
// "" when no call answered.
func (pc ProxyCounts) WaySince(before ProxyCounts) string {
	h, ok := pc.Header.meanSince(before.Header)
	if !ok {
		return ""
	}
	out := fmt.Sprintf("header %.0f", micros(h))
	if c, ok := pc.ClientFirst.meanSince(before.ClientFirst); ok {
		out += fmt.Sprintf(", then client %+.0f", micros(c-h))
	}
	return out
}

// WrittenOverSince is the share of the large edited bodies written over
// an earlier one's since before, in percent.
func (pc ProxyCounts) WrittenOverSince(before ProxyCounts) (float64, bool) {
	over, n := pc.WrittenOver-before.WrittenOver, pc.WrittenOver-before.WrittenOver+pc.Fresh-before.Fresh
	if n <= 0 {
		return 0, false
	}
	return 100 * over / n, true
}

// counterBy is the counter of family name whose label key is value (0:
// none); with key "", the family's first counter.
func counterBy(fams map[string]*dto.MetricFamily, name, key, value string) float64 {
	for _, m := range fams[name].GetMetric() {
		if key == "" {
			return m.GetCounter().GetValue()
		}
		for _, l := range m.GetLabel() {
			if l.GetName() == key && l.GetValue() == value {
				return m.GetCounter().GetValue()
			}
		}
	}
	return 0
}

// metricsURL is the /metrics of a proxy target.
func metricsURL(tg costTarget) string { return strings.TrimSuffix(tg.url, "/fake") + "/metrics" }

// metricsClient reads the proxies' /metrics on connections of its own.
// Read with the measuring client, a GET would take one of its kept-alive
// connections, and the proxy's server hands a connection that carried a
// GET to net/http's for good: every request after it on that connection
// would be measured on net/http's server instead of the proxy's own (in
// turns, one request at a time, the seed's requests all were, up to
// session BW).
var metricsClient = &http.Client{Transport: &http.Transport{DisableCompression: true}, Timeout: time.Minute}

// metricFamilies reads the metrics at url (with metricsClient).
func metricFamilies(ctx context.Context, url string) (map[string]*dto.MetricFamily, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := metricsClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	parser := expfmt.NewTextParser(model.UTF8Validation)
	return parser.TextToMetricFamilies(io.LimitReader(resp.Body, 8<<20))
}

// historyShare reads a proxy's /metrics and says how much of the
// requests' history it took from the previous request's parse and how
// many edited bodies it wrote over the previous one's.
func historyShare(ctx context.Context, url string) string {
	fams, err := metricFamilies(ctx, url)
	if err != nil {
		return "n/a: " + err.Error()
	}
	v := func(name, how string) float64 {
		if how == "" { // a counter without labels
			return counterBy(fams, name, "", "")
		}
		return counterBy(fams, name, "how", how)
	}
	share := func(a, b float64) string {
		if a+b == 0 {
			return "none"
		}
		return fmt.Sprintf("%.1f%% of %.0f", 100*a/(a+b), a+b)
	}
	kept := ""
	if k, w := v("shaperproxy_edited_bytes_total", "kept"), v("shaperproxy_edited_bytes_total", "written"); k+w > 0 {
		kept = fmt.Sprintf(", their bytes kept in place %.1f%%", 100*k/(k+w))
	}
	keyed := ""
	if r, k := v("shaperproxy_history_messages_total", "reused"), v("shaperproxy_history_keyed_messages_total", ""); r > 0 {
		keyed = fmt.Sprintf(" (taken on keys %.1f%%)", 100*k/r)
	}
	return fmt.Sprintf("messages reused %s%s; edited bodies written over %s%s",
		share(v("shaperproxy_history_messages_total", "reused"), v("shaperproxy_history_messages_total", "parsed")), keyed,
		share(v("shaperproxy_edited_bodies_total", "written_over"), v("shaperproxy_edited_bodies_total", "fresh")), kept)
}

// faultsOf reads each target's process's minor page faults so far: the
// first write of a page the process never touched is one (11–14 µs on
// the benchmark's machine: prefault's BenchmarkPrefault).
func faultsOf(targets []costTarget) map[string]int64 {
	out := map[string]int64{}
	for _, tg := range targets {
		if tg.pid == 0 {
			continue // this process: its faults are everyone's
		}
		if n, ok := minorFaults(tg.pid); ok {
			out[tg.name] = n
		}
	}
	return out
}

// faultCells are the page-fault row's cells, one a target after the
// workload and metric columns, and an empty ratio cell: the faults since
// before (faultsOf), and for each proxy the heap its warming wrote. A
// target in this process has no faults of its own.
func faultCells(ctx context.Context, targets []costTarget, before map[string]int64) []string {
	after := faultsOf(targets)
	var cells []string
	for _, tg := range targets {
		b, ok := before[tg.name]
		a, ok2 := after[tg.name]
		cell := "n/a (in this process)"
		if ok && ok2 {
			cell = fmt.Sprintf("%d", a-b)
		}
		if tg.name == bare || tg.name == costAll {
			cell += "; " + warmedOf(ctx, metricsURL(tg))
		}
		cells = append(cells, cell)
	}
	return append(cells, "")
}

// warmedOf reads the heap memory a proxy's warming wrote, from its
// /metrics.
func warmedOf(ctx context.Context, url string) string {
	fams, err := metricFamilies(ctx, url)
	if err != nil {
		return "warmed n/a: " + err.Error()
	}
	return fmt.Sprintf("heap warmed %.1f MB", counterBy(fams, "shaperproxy_heap_warmed_bytes_total", "", "")/1e6)
}

const chatPath = "/v1/chat/completions"

// costTargets starts the upstream, the baseline reverse proxy and the proxy
// variants of the section, each but the upstream in draws processes
// (costTarget.draws); separate reports whether each runs in a process of
// its own.
func (e *env) costTargets(draws int) (targets []costTarget, separate bool, err error) {
	up, upPID, err := e.start(roleUpstream)
	if err != nil {
		return nil, false, err
	}
	targets = append(targets, costTarget{name: direct, url: up, pid: upPID})
	// startDraws starts a target's processes: start(i) the i-th.
	startDraws := func(name, suffix string, start func(i int) (string, int, error)) error {
		tg := costTarget{name: name}
		for i := range max(draws, 1) {
			u, pid, err := start(i)
			if err != nil {
				return err
			}
			if i == 0 {
				tg.url, tg.pid = u+suffix, pid
			}
			tg.draws = append(tg.draws, u+suffix)
		}
		targets = append(targets, tg)
		return nil
	}
	if err := startDraws(stdlib, "", func(i int) (string, int, error) { return e.startDraw(i, roleReverseProxy, up) }); err != nil {
		return nil, false, err
	}
	if err := startDraws(readRP, "", func(i int) (string, int, error) { return e.startDraw(i, roleReadWhole, up) }); err != nil {
		return nil, false, err
	}
	for _, v := range costVariants {
		start := func(i int) (string, int, error) { return e.startDraw(i, v, up, up, e.costDir(i)) }
		if v == bare && e.against != "" {
			start = func(i int) (string, int, error) { return e.spawnAgainst(up, i) }
		}
		if err := startDraws(v, "/fake", start); err != nil {
			return nil, false, err
		}
	}
	return targets, len(e.child) > 0, nil
}

// costDir is the data directory of the cost section's i-th process of a
// proxy variant, apart from the other sections' proxies and from the
// variant's other processes (each holds its state.db open).
func (e *env) costDir(i int) string {
	if i == 0 {
		return filepath.Join(e.dir, "cost")
	}
	return filepath.Join(e.dir, "cost", fmt.Sprintf("draw%d", i))
}

// spawnAgainst starts the proxy+all of the build Options.Against names,
// in the core's place, with a data directory of its own, and its
// profiles, when asked for, in the profiles' directory's "against".
func (e *env) spawnAgainst(up string, i int) (string, int, error) {
	profile := ""
	if e.profile != "" && i == 0 { // the first process alone, as startDraw
		profile = filepath.Join(e.profile, "against")
		if err := os.MkdirAll(profile, 0o700); err != nil {
			return "", 0, err
		}
	}
	return e.spawnCmd([]string{e.against, "bench", "-child"}, profile, []string{costAll, up, up, filepath.Join(e.costDir(i), "against")})
}

// start starts a role or a proxy variant of the cost section, in a child
// process when there is a child command, else in this process (pid 0).
func (e *env) start(role string, args ...string) (string, int, error) {
	return e.startDraw(0, role, args...)
}

// startDraw is start for a target's i-th process (costTarget.draws):
// only the first is profiled (-profile), the one the saturation rounds
// measure; the others' profiles would overwrite its files.
func (e *env) startDraw(i int, role string, args ...string) (string, int, error) {
	if len(e.child) > 0 {
		return e.spawn(append([]string{role}, args...), i == 0)
	}
	url, err := e.serveHere(role, args)
	return url, 0, err
}

// serveHere starts a role of the cost section in this process.
func (e *env) serveHere(role string, args []string) (string, error) {
	if isRole(role) {
		h, err := roleHandler(role, args)
		if err != nil {
			return "", err
		}
		return startServer(h, &e.closers)
	}
	px, err := e.build(variantConfig(role, args[0], args[1], args[2], e.without), nil)
	if err != nil {
		return "", err
	}
	e.proxies = append(e.proxies, px)
	return startServer(px, &e.closers)
}

// newCostClient is the client of the cost section: keep-alive connections
// enough for every concurrent request, no compression.
func newCostClient() *http.Client {
	return &http.Client{Transport: &http.Transport{
		MaxIdleConns: 1024, MaxIdleConnsPerHost: 256, DisableCompression: true, IdleConnTimeout: time.Minute,
	}, Timeout: 5 * time.Minute}
}

// smallBodies are n two-message requests of n conversations (the user
// message differs), so the proxy's per-conversation caches hold n entries.
func smallBodies(n int) [][]byte {
	out := make([][]byte, n)
	for i := range out {
		out[i] = fmt.Appendf(nil, `{"model":"deepseek-reasoner","stream":false,"messages":[{"role":"system","content":"You are a careful coding assistant."},{"role":"user","content":"Say hello to user %d."}]}`, i)
	}
	return out
}

// seedBody is the seed's 631-message request, not streamed, its members
// in the order the OpenAI SDKs send them: "messages" first, "tools" after
// (the fixture puts "tools" first, which let a lookup of "tools" in the
// body stop before the history instead of skipping all of it).
func seedBody() []byte {
	seed := fixtures.SeedHistory()
	b := []byte(`{}`)
	for _, k := range []string{"messages", "model", "tools"} {
		b, _ = sjson.SetRawBytes(b, k, []byte(gjson.GetBytes(seed, k).Raw))
	}
	b, _ = sjson.SetBytes(b, "stream", false)
	return b
}

// costLatency sends bodies at rate (open loop) to every target, rounds
// interleaved, and adds the added p50 and p99 rows. In turns, every target
// is sent one request in each turn, in the order of a row of the Williams
// design (the turn's), so that every target's requests meet the machine
// as the others' do (turnLatencies); else each target is sent its round's
// n requests in a block, the targets one after the other (blockLatencies).
func costLatency(ctx context.Context, c *http.Client, targets []costTarget, bodies [][]byte, n, rate, rounds int, turns bool, w *wideTable, title string, roundsOut io.Writer) error {
	fs, check := tallies(targets)
	fire := blockLatencies
	if turns {
		fire = turnLatencies
	}
	lats, err := fire(ctx, c, targets, bodies, n, rate, rounds, fs)
	if err != nil {
		return err
	}
	perRound := map[string][][2]time.Duration{} // target → per round {p50, p99}
	pooled := map[string][]time.Duration{}
	for _, tg := range targets {
		for r, lat := range lats[tg.name] {
			perRound[tg.name] = append(perRound[tg.name], [2]time.Duration{pct(lat, 50), pct(lat, 99)})
			pooled[tg.name] = append(pooled[tg.name], lat...)
			if roundsOut != nil {
				fmt.Fprintf(roundsOut, "latency round %s | %d | %s | process %d | %d requests | p50 %.0f µs | p99 %.0f µs\n",
					title, r, tg.name, r%len(tg.drawURLs()), len(lat), micros(pct(lat, 50)), micros(pct(lat, 99)))
			}
		}
	}
	for k, p := range []float64{50, 99} {
		added := func(name string) []time.Duration {
			var out []time.Duration
			for r, v := range perRound[name] {
				out = append(out, v[k]-perRound[direct][r][k])
			}
			return out
		}
		target := p50Target
		if p == 99 {
			target = p99Target
		}
		row := []string{title, fmt.Sprintf("latency p%.0f: direct, then added (median of %d rounds%s)", p, rounds, drawsNote(targets)), fmtDur(pct(pooled[direct], p))}
		for _, tg := range targets[1:] {
			row = append(row, fmtAdded(added(tg.name)))
		}
		row = append(row, ratioNote(added(costAll), added(stdlib), target))
		w.add(row...)
	}
	failedRow(w, title, "failed requests (left out of the latencies)", targets, fs)
	return check()
}

// drawsNote says, for a latency row, how many processes serve each
// target but the direct path's, when more than one does.
func drawsNote(targets []costTarget) string {
	k := 0
	for _, tg := range targets {
		k = max(k, len(tg.drawURLs()))
	}
	if k < 2 {
		return ""
	}
	return fmt.Sprintf("; every other target's rounds shared by %d processes of it in turn", k)
}

// blockLatencies sends each target, in each round, its n requests at
// rate in a block, the round's targets one after the other in the order
// of a row of the Williams design (inOrder), and returns each target's
// latencies by round (those that succeeded; f tallies the others).
func blockLatencies(ctx context.Context, c *http.Client, targets []costTarget, bodies [][]byte, n, rate, rounds int, fs map[string]*failures) (map[string][][]time.Duration, error) {
	lats := map[string][][]time.Duration{}
	for r := 0; r < rounds; r++ {
		for _, tg := range inOrder(targets, r) {
			s0, f0 := fs[tg.name].mark()
			lat := fireBodies(ctx, c, tg.drawURL(r)+chatPath, bodies, n, rate, fs[tg.name])
			if err := ctx.Err(); err != nil {
				return nil, err
			}
			if err := fs[tg.name].down(tg.name, s0, f0); err != nil {
				return nil, err
			}
			lats[tg.name] = append(lats[tg.name], lat)
		}
	}
	return lats, nil
}

// turnLatencies sends the targets their requests in turns: in turn t,
// one request to each target (the body bodies[t mod len(bodies)]), in the
// order of row t of the Williams design (inOrder), each 1/(rate·targets)
// after the one before, so that every target is sent rate requests a
// second, evenly spaced, and no two requests are in flight at once unless
// one takes longer than that spacing. A round is n turns; it returns each
// target's latencies by round (those that succeeded; fs tallies the
// others). A target that answered none of a round's requests stops the
// section when the next round begins (or at the end), as blockLatencies
// stops at the end of the round.
//
// A target's requests run among the others', not in a block of their
// own: a phase of the machine that lasts a second or two (the seed's
// per-round p50 ranged over 0.4–1.6× the reverse proxy's in blocks of
// 1.5 s) meets every target alike (internal/bench/HISTORY.md, Session BS).
func turnLatencies(ctx context.Context, c *http.Client, targets []costTarget, bodies [][]byte, n, rate, rounds int, fs map[string]*failures) (map[string][][]time.Duration, error) {
	type result struct {
		d  time.Duration
		ok bool
	}
	type tally struct{ done, ok atomic.Int32 } // a target's round
	got := map[string][]result{}
	rs := map[string][]tally{}
	for _, tg := range targets {
		got[tg.name] = make([]result, rounds*n)
		rs[tg.name] = make([]tally, rounds)
	}
	var wg sync.WaitGroup
	// down is the error of a target that answered none of a whole round's
	// requests among the rounds before r (nil: none).
	down := func(r int) error {
		for _, tg := range targets {
			for q := range r {
				if x := &rs[tg.name][q]; x.done.Load() == int32(n) && x.ok.Load() == 0 {
					wg.Wait()
					return fs[tg.name].roundFailed(tg.name, n)
				}
			}
		}
		return nil
	}
	tick := time.NewTicker(time.Second / time.Duration(rate*len(targets)))
	defer tick.Stop()
	for t := range rounds * n {
		if t > 0 && t%n == 0 {
			if err := down(t / n); err != nil {
				return nil, err
			}
		}
		for _, tg := range inOrder(targets, t) {
			select {
			case <-tick.C:
			case <-ctx.Done():
				wg.Wait()
				return nil, ctx.Err()
			}
			wg.Add(1)
			go func(at *result, x *tally, url string, body []byte, f *failures) {
				defer wg.Done()
				d, err := post(ctx, c, url, body)
				*at = result{d, err == nil}
				f.add(err)
				if err == nil {
					x.ok.Add(1)
				}
				x.done.Add(1)
			}(&got[tg.name][t], &rs[tg.name][t/n], tg.drawURL(t/n)+chatPath, bodies[t%len(bodies)], fs[tg.name])
		}
	}
	wg.Wait()
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if err := down(rounds); err != nil {
		return nil, err
	}
	lats := map[string][][]time.Duration{}
	for _, tg := range targets {
		for r := range rounds {
			var lat []time.Duration
			for _, x := range got[tg.name][r*n : (r+1)*n] {
				if x.ok {
					lat = append(lat, x.d)
				}
			}
			lats[tg.name] = append(lats[tg.name], lat)
		}
	}
	return lats, nil
}

// fmtAdded formats the median of per-round added latencies with their range.
func fmtAdded(ds []time.Duration) string {
	if len(ds) < 3 {
		return signed(pct(ds, 50))
	}
	return fmt.Sprintf("%s (%s to %s)", signed(pct(ds, 50)), fmtDur(pct(ds, 0)), fmtDur(pct(ds, 100)))
}

func signed(d time.Duration) string {
	if d < 0 {
		return fmtDur(d)
	}
	return "+" + fmtDur(d)
}

// ratioNote is the ratio of the medians of a and b, with the median and
// range of the per-round ratios.
func ratioNote(a, b []time.Duration, target bound) string {
	ma, mb := pct(a, 50), pct(b, 50)
	if mb <= 0 {
		return "n/a (baseline adds nothing)"
	}
	var rs []float64
	for i := range min(len(a), len(b)) {
		if b[i] > 0 {
			rs = append(rs, float64(a[i])/float64(b[i]))
		}
	}
	return roundsNote(float64(ma)/float64(mb), rs, target)
}

// roundsNote formats a ratio of medians with the median and range of the
// per-round ratios rs (when there are three or more), the target, and
// whether the ratio meets it (judged).
func roundsNote(ratio float64, rs []float64, target bound) string {
	shown, met := judged(ratio, target)
	if len(rs) >= 3 {
		shown += fmt.Sprintf(" (rounds: median %.2f, %.2f to %.2f)", median(rs), slices.Min(rs), slices.Max(rs))
	}
	verdict := "missed"
	if met {
		verdict = "met"
	}
	return shown + " (target " + target.String() + ": " + verdict + ")"
}

// bound is a target a ratio is judged against: at most (≤) or at
// least (≥) its value.
type bound struct {
	atMost bool
	value  float64
}

// The targets of issue 15.
var (
	p50Target     = bound{atMost: true, value: 1.0}  // added p50 against the reverse proxy's
	p99Target     = bound{atMost: true, value: 1.5}  // added p99
	perCoreTarget = bound{atMost: false, value: 0.9} // requests per CPU-second
)

func (b bound) String() string {
	op := "≥"
	if b.atMost {
		op = "≤"
	}
	return fmt.Sprintf("%s %.1f", op, b.value)
}

// meets reports whether ratio meets b, unrounded.
func (b bound) meets(ratio float64) bool {
	if b.atMost {
		return ratio <= b.value
	}
	return ratio >= b.value
}

// judged reports whether ratio meets target, and formats it with two
// decimals, or with as many more (up to four) as it takes not to read as
// the target's own value: 1.0027 against ≤ 1.0 shows as 1.003, not as a
// 1.00 that looks met.
func judged(ratio float64, target bound) (string, bool) {
	v := target.value
	shown := fmt.Sprintf("%.2f", ratio)
	for d := 3; d <= 4 && ratio != v && shown == fmt.Sprintf("%.*f", d-1, v); d++ {
		shown = fmt.Sprintf("%.*f", d, ratio)
	}
	return shown, target.meets(ratio)
}

// inOrder returns targets in the order of round r of a Williams design
// (williams): over its rows, every target runs at each place of a round,
// and right after every other target, equally often. A round's targets
// run one after the other, and one leaves the machine to the next as it
// was (the caches, the client's and the upstream's state): rotated
// rounds kept each target after the same one, and two proxy+all
// configurations alike, one in each of the two last columns, read 5%
// apart on the seed's p50 (session BI).
func inOrder(targets []costTarget, r int) []costTarget {
	rows := williams(len(targets))
	out := make([]costTarget, 0, len(targets))
	for _, i := range rows[r%len(rows)] {
		out = append(out, targets[i])
	}
	return out
}

// williams returns the rows of a Williams design for n treatments: n
// rows when n is even, 2n when it is odd (each row of the first n then
// reversed). Row 0 is 0, 1, n-1, 2, n-2, …; row k adds k to each (mod n).
func williams(n int) [][]int {
	first := make([]int, n)
	for j, lo, hi := 1, 1, n-1; j < n; j++ {
		if j%2 == 1 {
			first[j], lo = lo, lo+1
		} else {
			first[j], hi = hi, hi-1
		}
	}
	var rows [][]int
	for k := range n {
		row := make([]int, n)
		for j, v := range first {
			row[j] = (v + k) % n
		}
		rows = append(rows, row)
	}
	if n%2 == 1 {
		for k := range n {
			rev := slices.Clone(rows[k])
			slices.Reverse(rev)
			rows = append(rows, rev)
		}
	}
	return rows
}

// fireBodies is fire with a body per request, taken in turn from bodies.
// It returns the latencies of the requests that succeeded and tallies
// the others in f.
func fireBodies(ctx context.Context, c *http.Client, url string, bodies [][]byte, n, rate int, f *failures) []time.Duration {
	lat := make([]time.Duration, n)
	ok := make([]bool, n)
	var wg sync.WaitGroup
	tick := time.NewTicker(time.Second / time.Duration(rate))
	defer tick.Stop()
	for i := 0; i < n; i++ {
		<-tick.C
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			d, err := post(ctx, c, url, bodies[i%len(bodies)])
			lat[i], ok[i] = d, err == nil
			f.add(err)
		}(i)
	}
	wg.Wait()
	out := lat[:0]
	for i, d := range lat {
		if ok[i] {
			out = append(out, d)
		}
	}
	return out
}

// failures tallies a target's requests and the ones that failed. A
// failed request is left out of the figures and counted; when more than
// maxFailedShare of a target's requests failed by the end of a section,
// its figures mean nothing and the section fails (one cut answer in a run
// of thousands does not). A round none of whose requests succeeded stops
// the section (at the round's end, or in turns when the next round
// begins): the target is down.
type failures struct {
	mu           sync.Mutex
	sent, failed int
	first, last  error
}

const maxFailedShare = 0.01

func (f *failures) add(err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.sent++
	if err != nil {
		f.failed++
		f.last = err
		if f.first == nil {
			f.first = err
		}
	}
}

// check returns an error when too many of the requests failed.
func (f *failures) check(name string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.failed > 0 && float64(f.failed) > maxFailedShare*float64(f.sent) {
		return fmt.Errorf("%s: %d of %d requests failed, the first: %w", name, f.failed, f.sent, f.first)
	}
	return nil
}

// down returns an error when the target served none of its requests
// since the tally stood at sent0, failed0 (a round).
func (f *failures) down(name string, sent0, failed0 int) error {
	f.mu.Lock()
	n, failed := f.sent-sent0, f.failed-failed0
	f.mu.Unlock()
	if n > 0 && failed == n {
		return f.roundFailed(name, n)
	}
	return nil
}

// roundFailed is the error of a target that answered none of the n
// requests of a round (down; turnLatencies, which tallies its rounds
// apart since several targets' requests are in flight at once).
func (f *failures) roundFailed(name string, n int) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	return fmt.Errorf("%s: all %d requests of a round failed, the last: %w", name, n, f.last)
}

// mark returns the tally's counts, for down.
func (f *failures) mark() (sent, failed int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.sent, f.failed
}

// failedRow adds a row counting the failed requests of each target, when
// any failed; label says what they cost the figures.
func failedRow(w *wideTable, title, label string, targets []costTarget, fs map[string]*failures) {
	some := false
	row := []string{title, label}
	for _, tg := range targets {
		f := fs[tg.name]
		some = some || f.failed > 0
		row = append(row, fmt.Sprintf("%d of %d", f.failed, f.sent))
	}
	if some {
		w.add(append(row, "")...)
	}
}

// tallies returns a failures per target, and checks them all.
func tallies(targets []costTarget) (map[string]*failures, func() error) {
	fs := map[string]*failures{}
	for _, tg := range targets {
		fs[tg.name] = &failures{}
	}
	return fs, func() error {
		for _, tg := range targets {
			if err := fs[tg.name].check(tg.name); err != nil {
				return err
			}
		}
		return nil
	}
}

// post sends one chat request, reads the whole answer and returns how
// long that took.
func post(ctx context.Context, c *http.Client, url string, body []byte) (time.Duration, error) {
	start := time.Now()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return 0, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer sk-bench-not-a-key")
	resp, err := c.Do(req)
	if err != nil {
		return 0, err
	}
	_, err = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if err == nil && resp.StatusCode != http.StatusOK {
		err = fmt.Errorf("status %d", resp.StatusCode)
	}
	return time.Since(start), err
}

// costSaturation runs workers clients in a closed loop against every
// target, rounds interleaved, and adds the throughput rows.
func costSaturation(ctx context.Context, c *http.Client, targets []costTarget, bodies [][]byte, workers int, cs costSizes, w *wideTable, title string, against bool, rounds io.Writer) error {
	rps := map[string][]float64{}
	perCore := map[string][]float64{}
	fs, check := tallies(targets)
	for r := 0; r < cs.satRounds; r++ {
		for _, tg := range inOrder(targets, r) {
			s0, f0 := fs[tg.name].mark()
			var before procSnap
			if rounds != nil {
				before = snapOf(ctx, tg)
			}
			n, elapsed, cpu := saturate(ctx, c, tg, bodies, workers, cs.satDur, fs[tg.name])
			if rounds != nil {
				roundLine(rounds, title, r, tg.name, n, before, snapOf(ctx, tg))
			}
			if err := ctx.Err(); err != nil {
				return err
			}
			if err := fs[tg.name].down(tg.name, s0, f0); err != nil {
				return err
			}
			rps[tg.name] = append(rps[tg.name], float64(n)/elapsed.Seconds())
			rate := 0.0 // no reading: left out of the medians, the round out of the ratios
			if cpu > 0 {
				rate = float64(n) / cpu.Seconds()
			}
			perCore[tg.name] = append(perCore[tg.name], rate)
		}
	}
	title = fmt.Sprintf("%s (%d clients, %d × %s)", title, workers, cs.satRounds, cs.satDur)
	row := []string{title, "requests/s (median of rounds)"}
	for _, tg := range targets {
		row = append(row, fmt.Sprintf("%.0f", median(rps[tg.name])))
	}
	w.add(append(row, fmt.Sprintf("%.2f", median(rps[costAll])/median(rps[stdlib])))...)
	row = []string{title, "requests per CPU-second of the serving process (per core; median of rounds)"}
	for _, tg := range targets {
		row = append(row, fmt.Sprintf("%.0f", median(positive(perCore[tg.name]))))
	}
	w.add(append(row, satRatio(perCore[costAll], perCore[stdlib]))...)
	row = []string{title, "CPU of the serving process a request (1 ÷ the row above)"}
	for _, tg := range targets {
		row = append(row, cpuPer(median(positive(perCore[tg.name]))))
	}
	core := 0.0
	if !against { // with -against the core's column holds another build's proxy+all
		core = median(positive(perCore[bare]))
	}
	w.add(append(row, room(median(positive(perCore[costAll])), median(positive(perCore[stdlib])), median(positive(perCore[readRP])), core))...)
	failedRow(w, title, "failed requests (not counted as served; the time they took is in the figures)", targets, fs)
	return check()
}

// satRatio is the ratio of the medians of a and b (rates per round), with
// the median and range of the per-round ratios (a round measures every
// target within seconds: its ratio is the least moved by the machine's
// drift).
func satRatio(a, b []float64) string {
	ma, mb := median(positive(a)), median(positive(b))
	if ma <= 0 || mb <= 0 {
		return "n/a (no CPU reading: run with -subprocess)"
	}
	var rs []float64
	for i := range min(len(a), len(b)) {
		if a[i] > 0 && b[i] > 0 {
			rs = append(rs, a[i]/b[i])
		}
	}
	return roundsNote(ma/mb, rs, perCoreTarget)
}

// cpuPer formats the CPU time a request takes at rate requests per
// CPU-second.
func cpuPer(rate float64) string {
	if rate <= 0 {
		return "n/a"
	}
	return fmtDur(perRequest(rate))
}

// perRequest is the time a request takes at rate requests a second,
// to the nearest microsecond.
func perRequest(rate float64) time.Duration {
	return time.Duration(math.Round(1e6/rate)) * time.Microsecond
}

// room says how much CPU a request the per-core target leaves the proxy
// for its own work, given the rates (requests per CPU-second) of proxy+all,
// the reverse proxy, the reverse proxy that reads the body whole and the
// proxy's core (no feature on; 0 when the core's column is not the core:
// with -against it holds another build's proxy+all): at 0.9× the reverse
// proxy's rate a request may take 1/(0.9·rp). Above the read-whole
// baseline is the room for parsing, shaping, recording and the rest, where
// that baseline costs what reading a body whole costs a proxy on
// net/http's transport (which copies a body it did not stream once more
// on its way out, through a 32 KiB buffer: about 8% of that baseline's
// CPU on the seed in session BT's profiles);
// above the core is what the target leaves the features themselves, the
// proxy's own read of a body (no second copy) and its keys paid already.
// Against each, what proxy+all spends there.
func room(all, rp, readWhole, core float64) string {
	if all <= 0 || rp <= 0 || readWhole <= 0 {
		return "n/a (no CPU reading: run with -subprocess)"
	}
	allowed, floor, spent := perRequest(0.9*rp), perRequest(readWhole), perRequest(all)
	s := fmt.Sprintf("0.9× allows %s a request: %s above the read-whole baseline, where proxy+all spends %s",
		fmtDur(allowed), signed(allowed-floor), signed(spent-floor))
	if core > 0 {
		c := perRequest(core)
		s += fmt.Sprintf("; %s above the core (no feature on), where it spends %s", signed(allowed-c), signed(spent-c))
	}
	return s
}

// saturate sends requests from workers goroutines, each as soon as the
// previous answer is read, for d; it returns the requests completed, the
// time taken and the CPU time the target's process used meanwhile (0 when
// it runs in this process, where that says nothing).
func saturate(ctx context.Context, c *http.Client, tg costTarget, bodies [][]byte, workers int, d time.Duration, f *failures) (int, time.Duration, time.Duration) {
	var done atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	cpu0 := cpuTime(tg.pid)
	start := time.Now()
	for i := 0; i < workers; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			streak := 0 // failures in a row
			for k := i; ; k += workers {
				select {
				case <-stop:
					return
				default:
				}
				_, err := post(ctx, c, tg.url+chatPath, bodies[k%len(bodies)])
				f.add(err)
				if err != nil {
					if streak++; streak >= 3 {
						time.Sleep(10 * time.Millisecond) // a target that is down is not hammered
					}
					continue
				}
				streak = 0
				done.Add(1)
			}
		}(i)
	}
	time.Sleep(d)
	close(stop)
	n, elapsed := done.Load(), time.Since(start)
	cpu := cpuTime(tg.pid) - cpu0 // the requests still running are in the CPU time but not counted: a slight undercount
	wg.Wait()
	if tg.pid == 0 {
		cpu = 0
	}
	return int(n), elapsed, cpu
}

// positive returns the values of xs above zero (the rounds that have one).
func positive(xs []float64) []float64 {
	var out []float64
	for _, x := range xs {
		if x > 0 {
			out = append(out, x)
		}
	}
	return out
}

func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	return s[len(s)/2]
}

// costStreams measures the gap between consecutive events at the client,
// streams of every target interleaved, and adds the gap row.
func costStreams(ctx context.Context, c *http.Client, targets []costTarget, conc int, cs costSizes, w *wideTable) error {
	q := fmt.Sprintf("?n=%d&gap=%s", cs.streamEvents, cs.streamGap)
	// A cut stream is left out and counted. A round in which a target
	// had no whole stream (with one stream a round, one cut) measures
	// nothing for it and is left out of its comparisons; a target with
	// more than one stream cut, and more than a tenth of them, fails the
	// section (one cut among a few streams says nothing of the others:
	// the baseline's own streams have been cut so, once in a while).
	p99 := map[string][]time.Duration{} // per round; -1: no whole stream
	fs, _ := tallies(targets)
	for r := 0; r < cs.streamRounds; r++ {
		for _, tg := range inOrder(targets, r) {
			gaps := streamGaps(ctx, c, tg.url+chatPath+q, conc, cs.streamEvents, fs[tg.name])
			if err := ctx.Err(); err != nil {
				return err
			}
			v := time.Duration(-1)
			if len(gaps) > 0 {
				v = pct(gaps, 99)
			}
			p99[tg.name] = append(p99[tg.name], v)
		}
	}
	for _, tg := range targets {
		if sent, failed := fs[tg.name].mark(); failed > 1 && failed*10 > sent {
			return fmt.Errorf("%s: %d of %d streams cut, the last: %w", tg.name, failed, sent, fs[tg.name].last)
		}
	}
	measured := func(name string) []time.Duration {
		var out []time.Duration
		for _, v := range p99[name] {
			if v >= 0 {
				out = append(out, v)
			}
		}
		return out
	}
	added := func(name string) []time.Duration {
		var out []time.Duration
		for r, v := range p99[name] {
			if d := p99[direct][r]; v >= 0 && d >= 0 {
				out = append(out, v-d)
			}
		}
		return out
	}
	title := fmt.Sprintf("streaming: %d stream(s) at once × %d events, %s apart, %d rounds", conc, cs.streamEvents, cs.streamGap, cs.streamRounds)
	row := []string{title, "inter-event gap p99 at the client: direct, then added (median of rounds)", fmtDur(pct(measured(direct), 50))}
	for _, tg := range targets[1:] {
		row = append(row, fmtAdded(added(tg.name)))
	}
	note := fmt.Sprintf("%s added", signed(pct(added(costAll), 50)))
	if conc == 1 {
		note += " (target ≤ 150 µs)"
	} else {
		note += fmt.Sprintf("; the baseline adds %s", signed(pct(added(stdlib), 50)))
	}
	w.add(append(row, note)...)
	failedRow(w, title, "streams cut (left out of the gaps)", targets, fs)
	return nil
}

// streamGaps runs conc streams at once and returns the gaps between
// consecutive events as the client read them, of the streams that came
// whole; each stream is tallied in f.
func streamGaps(ctx context.Context, c *http.Client, url string, conc, events int, f *failures) []time.Duration {
	var mu sync.Mutex
	var all []time.Duration
	var wg sync.WaitGroup
	for i := 0; i < conc; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			gaps, err := readGaps(ctx, c, url, events)
			f.add(err)
			if err == nil {
				mu.Lock()
				all = append(all, gaps...)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return all
}

// readGaps reads one stream and records the time between events.
func readGaps(ctx context.Context, c *http.Client, url string, events int) ([]time.Duration, error) {
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(streamRequest))
	req.Header.Set("Content-Type", "application/json")
	resp, err := c.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	gaps := make([]time.Duration, 0, events)
	buf := make([]byte, 64<<10)
	var pending []byte
	var last time.Time
	seen := 0
	for {
		n, err := resp.Body.Read(buf)
		now := time.Now()
		pending = append(pending, buf[:n]...)
		for {
			i := bytes.Index(pending, []byte("\n\n"))
			if i < 0 {
				break
			}
			pending = pending[i+2:]
			seen++
			if !last.IsZero() {
				gaps = append(gaps, now.Sub(last))
			}
			last = now
		}
		if err == io.EOF {
			if seen < events {
				return gaps, fmt.Errorf("stream short: %d of %d events", seen, events)
			}
			return gaps, nil
		}
		if err != nil {
			return gaps, err
		}
	}
}

var streamRequest = []byte(`{"model":"deepseek-reasoner","stream":true,"messages":[{"role":"system","content":"You are a careful coding assistant."},{"role":"user","content":"Stream me something."}]}`)
