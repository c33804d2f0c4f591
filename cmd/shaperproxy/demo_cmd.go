package main

import (
	"context"
	"io"
	"log/slog"

	"github.com/shaperproxy/shaperproxy/internal/config"
	"github.com/shaperproxy/shaperproxy/internal/demo"
)

func runDemo(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("demo", `usage: shaperproxy demo [--data-dir DIR]

Run the embedded demo: the project's fake upstream and the proxy on
loopback, a scripted coding agent for two user turns with tool calls, the
masked review, shaping with an originals lookup, the capture and the guard.
No API key, no network. With --data-dir the data is kept (and a second run
in the same directory shows everything again, as a new conversation).
`, stdout)
	dataDir := fs.String("data-dir", "", "keep the demo's data in this `directory` (default: a temporary one, removed)")
	if err := fs.parse(args); err != nil {
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
