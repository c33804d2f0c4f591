package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/term"

	"github.com/shaperproxy/shaperproxy/capture"
)

const captureUsageText = `usage: shaperproxy capture COMMAND [flags]

Read the wire capture logs (<data-dir>/capture/). Logs are read from the
tail: the cost of tail, read and show does not grow with the log.

commands:
  tail [-n N] [--kind KIND] [--call ID] [-f]
                   the last N records (default 20) with their positions;
                   -f keeps printing new ones
  read --from POS [--limit N]
                   records from a position SEG:OFF[+IDX] on (default 100),
                   then the position to continue from
  show [CALL]      one call (default: the last): the request summary and
                   the response rebuilt field by field, with timings
  stats [--since DURATION]
                   reasoning blocks shaped vs raw per route and model,
                   chunks per call, outcomes, drops, bytes on disk vs wire

flags of every command:
  --json           one JSON object per line
  --data-dir DIR   data directory (default $SHAPERPROXY_DATA_DIR or the
                   user's state directory)

kinds: request, client_request, response, event, body, end, drops, note
`

// runCapture is the command "capture": tail, read, show and stats over the
// capture logs.
func runCapture(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 || args[0] == "help" || args[0] == "-h" || args[0] == "--help" {
		_, err := io.WriteString(stdout, captureUsageText)
		return err
	}
	switch args[0] {
	case "tail":
		return captureTail(ctx, args[1:], stdout, stderr)
	case "read":
		return captureRead(args[1:], stdout, stderr)
	case "show":
		return captureShow(args[1:], stdout, stderr)
	case "stats":
		return captureStats(args[1:], stdout, stderr)
	}
	_, _ = io.WriteString(stderr, captureUsageText)
	return fmt.Errorf("capture: unknown command %q", args[0])
}

// captureFlags are the flags every capture command takes.
type captureFlags struct{ forensicFlags }

func newCaptureFlags(name string, stderr io.Writer) *captureFlags {
	f := &captureFlags{}
	f.init("capture "+name, "print one JSON object per line", stderr)
	return f
}

func (f *captureFlags) options(stderr io.Writer) (captureOptions, error) {
	dir, err := resolveDataDir(f.dataDir)
	if err != nil {
		return captureOptions{}, err
	}
	o := captureOptions{Dir: filepath.Join(dir, "capture"), JSON: f.json}
	if _, err := os.Stat(o.Dir); err != nil {
		return o, fmt.Errorf("no capture log in %s: %w", o.Dir, err)
	}
	if file, ok := stderr.(*os.File); ok && term.IsTerminal(int(file.Fd())) {
		o.Progress = stderr
	}
	return o, nil
}

// parseNone parses flags of a command without positional arguments.
func (f *captureFlags) parseNone(args []string, stderr io.Writer) (captureOptions, error) {
	pos, err := f.parse(args)
	if err != nil {
		return captureOptions{}, err
	}
	if len(pos) > 0 {
		return captureOptions{}, fmt.Errorf("%s: unexpected argument %q", f.fs.Name(), pos[0])
	}
	return f.options(stderr)
}

func captureTail(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	f := newCaptureFlags("tail", stderr)
	var o tailOptions
	var kinds string
	f.fs.IntVar(&o.N, "n", 20, "number of records")
	f.fs.StringVar(&kinds, "kind", "", "only records of these `kinds` (comma-separated)")
	f.fs.StringVar(&o.Call, "call", "", "only the records of this call `ID`")
	f.fs.BoolVar(&o.Follow, "f", false, "keep printing new records")
	cmd, err := f.parseNone(args, stderr)
	if err != nil {
		return err
	}
	o.captureOptions = cmd
	if o.Kinds, err = parseKinds(kinds); err != nil {
		return err
	}
	return tailCmd(ctx, stdout, o)
}

func parseKinds(s string) ([]capture.Kind, error) {
	var kinds []capture.Kind
	for _, name := range strings.Split(s, ",") {
		if name = strings.TrimSpace(name); name == "" {
			continue
		}
		k, err := capture.ParseKind(name)
		if err != nil {
			return nil, fmt.Errorf("--kind: %w", err)
		}
		kinds = append(kinds, k)
	}
	return kinds, nil
}

func captureRead(args []string, stdout, stderr io.Writer) error {
	f := newCaptureFlags("read", stderr)
	var o readOptions
	var from string
	f.fs.StringVar(&from, "from", "", "start `POS` (SEG:OFF[+IDX], as printed by tail)")
	f.fs.IntVar(&o.Limit, "limit", 100, "number of records")
	cmd, err := f.parseNone(args, stderr)
	if err != nil {
		return err
	}
	if from == "" {
		return fmt.Errorf("capture read: --from is required")
	}
	if o.From, err = capture.ParsePos(from); err != nil {
		return fmt.Errorf("--from: %w", err)
	}
	o.captureOptions = cmd
	return readCmd(stdout, o)
}

func captureShow(args []string, stdout, stderr io.Writer) error {
	f := newCaptureFlags("show", stderr)
	var o showOptions
	f.fs.BoolVar(&o.Full, "full", false, "print reasoning and content whole")
	pos, err := f.parse(args)
	if err != nil {
		return err
	}
	if len(pos) > 1 {
		return fmt.Errorf("capture show: one call id at most, got %d", len(pos))
	}
	if len(pos) == 1 {
		o.Call = pos[0]
	}
	if o.captureOptions, err = f.options(stderr); err != nil {
		return err
	}
	return showCmd(stdout, o)
}

func captureStats(args []string, stdout, stderr io.Writer) error {
	f := newCaptureFlags("stats", stderr)
	var o statsOptions
	f.fs.DurationVar(&o.Since, "since", 0, "only records of the last `DURATION` (e.g. 24h)")
	cmd, err := f.parseNone(args, stderr)
	if err != nil {
		return err
	}
	o.captureOptions = cmd
	return statsCmd(stdout, o)
}
