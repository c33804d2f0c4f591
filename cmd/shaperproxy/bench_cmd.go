package main

import (
	"context"
	"io"
	"log/slog"
	"os"

	"github.com/shaperproxy/shaperproxy/internal/bench"
	"github.com/shaperproxy/shaperproxy/internal/config"
)

const benchUsage = `usage: shaperproxy bench [flags]

Measures the proxy against a baseline in the same run: the README's table.`

// runBench is the command "bench": the README's benchmark table, every
// figure against a baseline measured in the same run.
func runBench(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("bench", benchUsage, stdout)
	o := bench.Options{Build: benchBuild}
	fs.BoolVar(&o.Quick, "quick", false, "small sizes, for a smoke run")
	fs.StringVar(&o.Only, "only", "", "run only these `sections` (comma-separated: nonstream,stream,rss,shaping,review,abuse,cost; cost:latency, cost:saturation, cost:stream, cost:small, cost:large for a part of cost; cost:cutthrough runs a design experiment, only when named)")
	fs.StringVar(&o.Profile, "profile", "", "write the CPU and allocation profiles of the cost section's children (each proxy, the reverse proxy, the upstream) into `dir`")
	fs.StringVar(&o.Without, "without", "", "turn these `features` of proxy+all off (comma-separated: capture, guard, shaping), to see which one holds a figure up")
	fs.StringVar(&o.Saturation, "saturation", "", "the cost section's saturation rounds as `ROUNDSxDURATION` (default 10x3s; e.g. 40x600ms: shorter rounds leave less of a shared machine's drift inside each)")
	fs.StringVar(&o.Against, "against", "", "with -subprocess: the proxy+all of this other shaperproxy `binary` (an earlier build) takes the core's column of the cost section, measured in the same rounds")
	rounds := fs.Bool("rounds", false, "write a line to stderr for each saturation round of each target of the cost section (requests; per request the CPU of its process, user and system apart, page faults and context switches; its threads; a proxy's collections), and for each latency round (the target's process that served it, requests, p50, p99)")
	fs.BoolVar(&o.Subprocess, "subprocess", false, "run each proxy in a child process of its own (RSS is then the proxy's alone)")
	child := fs.Bool("child", false, "internal: serve one proxy variant until stdin closes (args: variant fake-url stream-url dir; or upstream; or reverseproxy or reverseproxy-read upstream-url)")
	pos, err := fs.parseInterspersed(args)
	switch {
	case err != nil:
		return err
	case *child:
		return bench.ServeChild(benchBuild, pos)
	case len(pos) > 0:
		return fs.usageErr("unexpected argument %q", pos[0])
	}
	exe, err := os.Executable()
	if err != nil {
		return err
	}
	o.Child = []string{exe, "bench", "-child"}
	if *rounds {
		o.Rounds = stderr
	}
	return bench.Run(ctx, stdout, o)
}

func benchBuild(c config.Config, logger *slog.Logger) (bench.Proxy, error) { return build(c, logger) }
