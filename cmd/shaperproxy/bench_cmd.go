package main

import (
	"context"
	"flag"
	"io"
	"log/slog"
	"os"

	"github.com/shaperproxy/shaperproxy/internal/bench"
	"github.com/shaperproxy/shaperproxy/internal/config"
)

// runBench is the command "bench": the README's benchmark table, every
// figure against a baseline measured in the same run.
func runBench(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	o := bench.Options{Build: benchBuild}
	fs.BoolVar(&o.Quick, "quick", false, "small sizes, for a smoke run")
	fs.StringVar(&o.Only, "only", "", "run only these `sections` (comma-separated: nonstream,stream,rss,shaping,review)")
	fs.BoolVar(&o.Subprocess, "subprocess", false, "run each proxy in a child process of its own (RSS is then the proxy's alone)")
	child := fs.Bool("child", false, "internal: serve one proxy variant until stdin closes (args: variant fake-url stream-url dir)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *child {
		return bench.ServeChild(benchBuild, fs.Args())
	}
	exe, err := os.Executable()
	if err != nil {
		return err
	}
	o.Child = []string{exe, "bench", "-child"}
	return bench.Run(ctx, stdout, o)
}

func benchBuild(c config.Config, logger *slog.Logger) (bench.Proxy, error) { return build(c, logger) }
