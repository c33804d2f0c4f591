// Command shaperproxy is a transparent proxy for OpenAI-compatible LLM APIs
// that shapes the reasoning in outgoing history, keeps the originals aside,
// captures the wire and reviews turns before they end.
package main

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"runtime/debug"
	"slices"
)

// version is set at build time with -ldflags "-X main.version=…".
var version = "dev"

func main() {
	ctx, stop := notifyStop(context.Background()) // signals.go: a second signal cuts
	err := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(exitCode(err, os.Stderr)) // cli.go: 0 ok or help, 1 error, 2 usage error
}

// command is one subcommand: it parses its own flags from args.
type command struct {
	summary string
	run     func(ctx context.Context, args []string, stdout, stderr io.Writer) error
}

func commands() map[string]command {
	return map[string]command{
		"serve":     {"run the proxy", runServe},
		"demo":      {"run the embedded demo (fake upstream, no API key, no network)", runDemo},
		"ca":        {"manage the local CA for HTTPS_PROXY mode (ca init)", runCA},
		"version":   {"print the version", runVersion},
		"capture":   {"read the wire capture logs (tail, read, show, find, stats)", runCapture},
		"originals": {"look up original reasoning (stats, list, lookup)", runOriginals},
		"shape":     {"run the configured shaping over a corpus", runShape},
		"bench":     {"measure the proxy against a baseline in the same run (the README's table)", runBench},
		"profiles":  {"list the rendering profiles and the one each route resolves to", runProfiles},
	}
}

// run runs the command named by args[0]; help (cli.go) is printed on
// stdout, and usage errors come back as *usageError.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		usage(stdout)
		return nil
	}
	switch args[0] {
	case "help", "-h", "-help", "--help":
		return runHelp(ctx, args[1:], stdout)
	case "--version", "-version":
		return runVersion(ctx, nil, stdout, stderr)
	}
	cmd, ok := commands()[args[0]]
	if !ok {
		return usagef("", "unknown command %q", args[0])
	}
	if wantsHelp(args[1:]) {
		return commandHelp(ctx, cmd, args[1:], stdout)
	}
	return cmd.run(ctx, args[1:], stdout, stderr)
}

// usageOrder is the order of the commands in usage; commands missing from
// it follow, sorted.
var usageOrder = []string{"serve", "demo", "ca", "capture", "originals", "shape", "bench", "version"}

func usage(w io.Writer) {
	fmt.Fprintln(w, "usage: shaperproxy COMMAND [flags]\n\ncommands:")
	cmds := commands()
	names := slices.Sorted(maps.Keys(cmds))
	slices.SortStableFunc(names, func(a, b string) int {
		ia, ib := slices.Index(usageOrder, a), slices.Index(usageOrder, b)
		return cmp.Compare(uint(ia), uint(ib)) // -1 (not listed) sorts last
	})
	for _, name := range names {
		fmt.Fprintf(w, "  %-10s %s\n", name, cmds[name].summary)
	}
	fmt.Fprint(w, `  help       print a command's help: shaperproxy help COMMAND [SUBCOMMAND]

Every command also takes -h/--help; --version prints the version.
Exit status: 0 success, 1 error, 2 usage error.
`)
}

func runVersion(_ context.Context, _ []string, stdout, _ io.Writer) error {
	_, err := fmt.Fprintln(stdout, "shaperproxy", versionString())
	return err
}

// versionString is the -ldflags version, else the VCS revision the Go
// toolchain stamped into the binary, else "dev".
func versionString() string {
	if version != "dev" {
		return version
	}
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return version
	}
	rev, dirty := "", false
	for _, s := range info.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			dirty = s.Value == "true"
		}
	}
	if len(rev) > 12 {
		rev = rev[:12]
	}
	switch {
	case rev == "":
		return version
	case dirty:
		return "dev-" + rev + "-dirty"
	}
	return "dev-" + rev
}

// resolveDataDir returns the data directory: flagValue if set, else
// $SHAPERPROXY_DATA_DIR, else shaperproxy under the user's state directory
// ($XDG_STATE_HOME or ~/.local/state).
func resolveDataDir(flagValue string) (string, error) {
	if flagValue != "" {
		return flagValue, nil
	}
	if d := os.Getenv("SHAPERPROXY_DATA_DIR"); d != "" {
		return d, nil
	}
	if d := os.Getenv("XDG_STATE_HOME"); d != "" {
		return filepath.Join(d, "shaperproxy"), nil
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return "", fmt.Errorf("data dir: %w", err)
	}
	return filepath.Join(home, ".local", "state", "shaperproxy"), nil
}
