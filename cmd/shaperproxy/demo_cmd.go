package main

import (
	"context"
	"flag"
	"io"

	"github.com/shaperproxy/shaperproxy/demo"
)

func runDemo(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("demo", flag.ContinueOnError)
	fs.SetOutput(stderr)
	dataDir := fs.String("data-dir", "", "keep the demo's data in this `directory` (default: a temporary one, removed)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	_, err := demo.Run(ctx, demo.Options{DataDir: *dataDir, Out: stdout})
	return err
}
