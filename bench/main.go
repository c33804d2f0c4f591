// Command bench measures shaperproxy against a baseline taken in the same
// run: every figure is "directly to the fake upstream" vs "through the
// proxy" on loopback, so ratios and differences hold across machines.
//
//	go run ./bench            # the README's table
//	go run ./bench -quick     # a fast smoke run (small sizes)
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
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
}

func main() {
	quick := flag.Bool("quick", false, "small sizes, for a smoke run")
	flag.Parse()
	if err := run(context.Background(), os.Stdout, *quick); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

func pick(quick bool) sizes {
	if quick {
		return sizes{rate: 500, nonStream: 200, streams: 2, events: 200, eventGap: 500 * time.Microsecond, bigStream: 32 << 20, warmup: 50, shapeRequests: 5, originalsPuts: 50, reviewRequests: 5}
	}
	return sizes{rate: 500, nonStream: 5000, streams: 5, events: 1000, eventGap: time.Millisecond, bigStream: 1 << 30, warmup: 500, shapeRequests: 40, originalsPuts: 500, reviewRequests: 50}
}

func run(ctx context.Context, out io.Writer, quick bool) error {
	sz := pick(quick)
	env, err := newEnv()
	if err != nil {
		return err
	}
	defer env.close()
	t := &table{}
	if err := benchNonStream(ctx, env, sz, t); err != nil {
		return err
	}
	if err := benchStream(ctx, env, sz, t); err != nil {
		return err
	}
	if err := benchRSS(ctx, env, sz, t); err != nil {
		return err
	}
	if err := benchShaping(ctx, env, sz, t); err != nil {
		return err
	}
	if err := benchReview(ctx, env, sz, t); err != nil {
		return err
	}
	fmt.Fprintf(out, "shaperproxy bench (%s, GOMAXPROCS=%d; direct = straight to the fake upstream, proxy = through shaperproxy)\n\n", mode(quick), gomaxprocs())
	t.print(out)
	return nil
}

func mode(quick bool) string {
	if quick {
		return "quick"
	}
	return "full"
}
