package main

// The command line's conventions: help on stdout with exit status 0
// (`shaperproxy help COMMAND [SUBCOMMAND]`, `COMMAND -h`, `COMMAND --help`),
// usage errors printed once with exit status 2, other errors with 1.

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
)

// Exit statuses.
const (
	exitOK    = 0
	exitError = 1
	exitUsage = 2
)

// usageError is a mistake in the command line (an unknown command or
// flag, a missing or extra argument, a bad flag value). main prints it
// once, with where to find help, and exits 2.
type usageError struct {
	cmd string // the command it concerns ("capture tail"), "" for none
	err error
}

func (e *usageError) Error() string {
	if e.cmd == "" {
		return e.err.Error()
	}
	return e.cmd + ": " + e.err.Error()
}

func (e *usageError) Unwrap() error { return e.err }

// usagef returns a usage error of the command cmd.
func usagef(cmd, format string, a ...any) error {
	return &usageError{cmd: cmd, err: fmt.Errorf(format, a...)}
}

// exitCode prints err (once) and returns the exit status for it: 0 for
// none or for help that was printed, 2 for a usage error, else 1.
func exitCode(err error, stderr io.Writer) int {
	if err == nil || errors.Is(err, flag.ErrHelp) {
		return exitOK
	}
	fmt.Fprintln(stderr, "shaperproxy:", err)
	var ue *usageError
	if !errors.As(err, &ue) {
		return exitError
	}
	fmt.Fprintf(stderr, "Run '%s' for usage.\n", strings.TrimSpace("shaperproxy help "+ue.cmd))
	return exitUsage
}

// isHelpFlag reports whether arg asks for help.
func isHelpFlag(arg string) bool { return arg == "-h" || arg == "-help" || arg == "--help" }

// wantsHelp reports whether args (a command's arguments) ask for help
// before any "--".
func wantsHelp(args []string) bool {
	for _, a := range args {
		if a == "--" {
			return false
		}
		if isHelpFlag(a) {
			return true
		}
	}
	return false
}

// runHelp is `shaperproxy help [COMMAND [SUBCOMMAND]]`.
func runHelp(ctx context.Context, args []string, stdout io.Writer) error {
	if len(args) == 0 {
		usage(stdout)
		return nil
	}
	cmd, ok := commands()[args[0]]
	if !ok {
		return usagef("help", "unknown command %q", args[0])
	}
	return commandHelp(ctx, cmd, args[1:], stdout)
}

// commandHelp prints the help of a command (of its subcommand when args
// begin with one) on stdout: it runs the command with -h in place of its
// flags and with stdout as its stderr too, so commands whose flag sets
// print help on stderr print it here as well.
func commandHelp(ctx context.Context, cmd command, args []string, stdout io.Writer) error {
	var path []string
	for _, a := range args {
		if strings.HasPrefix(a, "-") {
			break
		}
		path = append(path, a)
	}
	err := cmd.run(ctx, append(path, "-h"), stdout, stdout)
	if errors.Is(err, flag.ErrHelp) {
		return nil
	}
	return err
}
