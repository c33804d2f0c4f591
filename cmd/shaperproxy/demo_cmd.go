package main

import (
	"context"
	"flag"
	"io"
	"log/slog"

	"github.com/shaperproxy/shaperproxy/internal/config"

	"github.com/shaperproxy/shaperproxy/internal/demo"
)

func runDemo(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("demo", flag.ContinueOnError)
	fs.SetOutput(stderr)
	dataDir := fs.String("data-dir", "", "keep the demo's data in this `directory` (default: a temporary one, removed)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	_, err := demo.Run(ctx, demoOptions(*dataDir, stdout))
	return err
}

// demoOptions runs the demo on this program's own setup and commands.
func demoOptions(dataDir string, out io.Writer) demo.Options {
	return demo.Options{
		DataDir: dataDir, Out: out,
		Build: func(c config.Config, logger *slog.Logger) (demo.Proxy, error) { return build(c, logger) },
		Command: func(ctx context.Context, stdout io.Writer, args ...string) error {
			return run(ctx, args, stdout, io.Discard)
		},
	}
}
