// Package bench measures shaperproxy against a baseline taken in the same
// run: every figure is "directly to the fake upstream" vs "through the
// proxy" on loopback, so ratios and differences hold across machines. The
// command runs it:
//
//	go run ./cmd/shaperproxy bench              # the README's table
//	go run ./cmd/shaperproxy bench -quick       # a fast smoke run (small sizes)
//	go run ./cmd/shaperproxy bench -subprocess  # each proxy in a child process (per-process RSS)
package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"
)

// sizes are the workload sizes of a run.
type sizes struct {
	rate      int           // non-stream requests per second
	nonStream int           // non-stream requests per side
	streams   int           // streams per side
	events    int           // events per stream
	eventGap  time.Duration // pause between events at the upstream
	bigStream int64         // bytes of the RSS stream
	warmup    int
	// requests of the seed's size per side, originals writes, reviewed turns
	shapeRequests, originalsPuts, reviewRequests int
	// the abuse section: the gzip bomb's decoded size, the newline-free
	// body's size, concurrent streams and their events
	bomb, flat            int64
	abuseStreams, abuseEv int
	cost                  costSizes
}

// Options configure a run.
type Options struct {
	Quick      bool   // small sizes, for a smoke run
	Only       string // run only these sections (comma-separated: nonstream,stream,rss,shaping,review,abuse,cost; cost:latency, cost:saturation, cost:stream, cost:small, cost:large for parts of cost; cost:cutthrough, the design experiment, only when named)
	Subprocess bool   // each proxy in a child process of its own
	// Build builds a proxy variant in this process.
	Build Build
	// Child is the command line that runs ServeChild in a new process
	// (with Subprocess); the variant's arguments are appended.
	Child []string
	// Profile, when set, is a directory where the cost section's children
	// (the proxy variants, the reverse proxy, the upstream) write their CPU
	// and allocation profiles (ProfileEnv).
	Profile string
	// Without names features of proxy+all to turn off (comma-separated:
	// capture, guard, shaping): which one holds a figure up, measured.
	Without string
	// Saturation, when set ("ROUNDSxDURATION", e.g. "40x600ms"), replaces
	// the rounds of the cost section's saturation runs: shorter rounds,
	// more of them, leave less of the machine's drift inside a round.
	Saturation string
	// Against, when set, is another shaperproxy binary (an earlier build)
	// whose proxy+all takes the transparent core's column of the cost
	// section: two builds measured in one run, their rounds interleaved,
	// instead of in two runs a machine's drift sets apart. It needs
	// Subprocess.
	Against string
	// Rounds, when set, receives a line for each round of each target in
	// the cost section's saturation runs: the requests served and, per
	// request, the CPU of the target's process (user and system apart),
	// its page faults and context switches, its threads, and a proxy's
	// collections over the round (a target in this process, no Child
	// command, has none); and one for each latency round of each target:
	// the process that served it (costTarget.draws), its requests, p50
	// and p99. The table has medians; these say what moved.
	Rounds io.Writer
}

func pick(quick bool) sizes {
	s := pickSizes(quick)
	s.cost = pickCost(quick)
	return s
}

func pickSizes(quick bool) sizes {
	if quick {
		return sizes{rate: 500, nonStream: 200, streams: 2, events: 200, eventGap: 500 * time.Microsecond, bigStream: 32 << 20, warmup: 50, shapeRequests: 5, originalsPuts: 50, reviewRequests: 5,
			bomb: 16 << 20, flat: 8 << 20, abuseStreams: 20, abuseEv: 20}
	}
	return sizes{rate: 500, nonStream: 5000, streams: 5, events: 1000, eventGap: time.Millisecond, bigStream: 1 << 30, warmup: 500, shapeRequests: 40, originalsPuts: 500, reviewRequests: 50,
		bomb: 1 << 30, flat: 256 << 20, abuseStreams: 300, abuseEv: 400}
}

// Run measures every section and prints the table to out.
func Run(ctx context.Context, out io.Writer, o Options) error {
	quick, subprocess, only := o.Quick, o.Subprocess, o.Only
	sz := pick(quick)
	if err := checkOnly(only, sections); err != nil {
		return err
	}
	if err := checkWithout(o.Without); err != nil {
		return err
	}
	if o.Saturation != "" {
		n, d, err := parseRounds(o.Saturation)
		if err != nil {
			return err
		}
		sz.cost.satRounds, sz.cost.satDur = n, d
	}
	if o.Against != "" && !subprocess {
		return errors.New("bench: -against needs -subprocess (the other build runs as a child)")
	}
	if o.Against != "" && slices.Contains(strings.Split(only, ","), "cost:cutthrough") {
		return errors.New("bench: -against replaces the core, which the cutthrough experiment measures")
	}
	if o.Profile != "" { // the children write into it and say nothing when they cannot
		if err := os.MkdirAll(o.Profile, 0o700); err != nil {
			return fmt.Errorf("bench: the profiles' directory: %w", err)
		}
	}
	e, err := newEnv(o)
	if err != nil {
		return err
	}
	defer e.close()
	t := &table{}
	for _, sec := range sections {
		if only != "" && !selected(only, sec.name, &sz) {
			continue
		}
		if only == "" && sec.name == "cost" && !subprocess {
			continue // long, and meant for separate processes: -subprocess, or -only cost, runs it (with a Child command it always runs its own processes)
		}
		if err := sec.fn(ctx, e, sz, t); err != nil {
			return fmt.Errorf("%s: %w", sec.name, err)
		}
	}
	where := "each proxy in its own process"
	if !subprocess {
		where = "proxies in the benchmark's process"
	}
	fmt.Fprintf(out, "shaperproxy bench (%s, GOMAXPROCS=%d, %s; direct = straight to the fake upstream, proxy = through shaperproxy)\n\n", mode(quick), gomaxprocs(), where)
	if o.Without != "" {
		fmt.Fprintf(out, "proxy+all here runs without %s (-without)\n\n", strings.ReplaceAll(o.Without, ",", ", "))
	}
	t.print(out)
	return nil
}

// checkOnly refuses a -only list that names a section, or a part of the
// cost section, that does not exist: a typo must not run everything.
func checkOnly(only string, sections []section) error {
	if only == "" {
		return nil
	}
	for _, item := range strings.Split(only, ",") {
		name, part, hasPart := strings.Cut(item, ":")
		if !slices.ContainsFunc(sections, func(s section) bool { return s.name == name }) {
			return fmt.Errorf("-only: no section %q", name)
		}
		if hasPart && (name != "cost" || !slices.Contains(costMeasures, part) && !slices.Contains(costWorkloads, part)) {
			return fmt.Errorf("-only: %q is not a part of %s (cost has %s)", part, name, strings.Join(append(slices.Clone(costMeasures), costWorkloads...), ", "))
		}
	}
	return nil
}

// parseRounds reads "ROUNDSxDURATION" (-saturation): 1 to 1,000 rounds
// of 100 ms to 1 minute.
func parseRounds(s string) (int, time.Duration, error) {
	rounds, dur, ok := strings.Cut(s, "x")
	n, err := strconv.Atoi(rounds)
	if !ok || err != nil || n < 1 || n > 1000 {
		return 0, 0, fmt.Errorf("-saturation %q: want ROUNDSxDURATION, 1 to 1000 rounds (e.g. 40x600ms)", s)
	}
	d, err := time.ParseDuration(dur)
	if err != nil || d < 100*time.Millisecond || d > time.Minute {
		return 0, 0, fmt.Errorf("-saturation %q: a round lasts 100ms to 1m", s)
	}
	return n, d, nil
}

// section is one part of the table.
type section struct {
	name string
	fn   func(context.Context, *env, sizes, *table) error
}

// sections are the table's parts, in their order.
var sections = []section{
	{"nonstream", benchNonStream}, {"stream", benchStream}, {"rss", benchRSS},
	{"shaping", benchShaping}, {"review", benchReview}, {"abuse", benchAbuse}, {"cost", benchCost},
}

// selected reports whether the -only list names section name, and takes
// what it names of the section's parts ("cost:stream,cost:latency").
func selected(only, name string, sz *sizes) bool {
	found := false
	for _, s := range strings.Split(only, ",") {
		sec, part, _ := strings.Cut(s, ":")
		if sec != name {
			continue
		}
		found = true
		if part != "" && name == "cost" {
			sz.cost.parts = append(sz.cost.parts, part)
		}
	}
	return found
}

func mode(quick bool) string {
	if quick {
		return "quick"
	}
	return "full"
}
