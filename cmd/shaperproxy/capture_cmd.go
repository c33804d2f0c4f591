package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"golang.org/x/term"

	"github.com/shaperproxy/shaperproxy/capture"
	"github.com/shaperproxy/shaperproxy/proxy"
)

const captureUsageText = `usage: shaperproxy capture COMMAND [flags]

Read the wire capture logs (<data-dir>/capture/). tail, read and show read
from the end of the log: their cost does not grow with the log; find and
stats with --since read only the time they cover.

commands:
  tail [-n N] [--kind KIND] [--call ID] [-f]
                   the last N records (default 20) with their positions;
                   -f keeps printing new ones
  read --from POS [--limit N]
                   records from a position SEG:OFF[+IDX] on (default 100),
                   then the position to continue from
  show [CALL] [--chunks] [--full]
                   one call (default: the last): the request summary and
                   the response rebuilt field by field, with timings;
                   --chunks lists every event with its offset, gap and delta
  find [--text TEXT [-i] [--in request|response]] [--model M] [--route R]
       [--outcome O] [--since TIME] [--until TIME] [--limit N]
                   the calls that match, oldest first
  stats [--since TIME]
                   reasoning blocks shaped vs raw per route and model,
                   markers found, tokens and cost per route, model, kind
                   of call and conversation, chunks per call, outcomes,
                   drops, bytes on disk vs wire
  cost [--policy P] [--conversation KEY] [--since TIME]
                   replays the captured requests under another shaping
                   policy (default none) and prints actual vs what-if:
                   bytes, cache hits and misses, cost

flags of every command:
  --json           one JSON object per line (shapes in the README)
  --data-dir DIR   data directory (default: the config's data_dir, else
                   $SHAPERPROXY_DATA_DIR, else the user's state directory)
  --config FILE    take data_dir from this configuration, as serve does

kinds: request, client_request, response, event, body, end, drops, note
Times print in UTC (RFC 3339). Run 'shaperproxy help capture COMMAND' for
a command's flags.
`

// runCapture is the command "capture": tail, read, show, find and stats
// over the capture logs.
func runCapture(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 || isHelpFlag(args[0]) {
		_, err := io.WriteString(stdout, captureUsageText)
		if err == nil && len(args) > 0 {
			err = flag.ErrHelp
		}
		return err
	}
	switch args[0] {
	case "tail":
		return captureTail(ctx, args[1:], stdout, stderr)
	case "read":
		return captureRead(args[1:], stdout, stderr)
	case "show":
		return captureShow(args[1:], stdout, stderr)
	case "find":
		return captureFind(args[1:], stdout, stderr)
	case "stats":
		return captureStats(args[1:], stdout, stderr)
	case "cost":
		return captureCost(ctx, args[1:], stdout, stderr)
	}
	return usagef("capture", "unknown command %q (tail, read, show, find, stats, cost)", args[0])
}

// captureFlags are the flags every capture command takes.
type captureFlags struct{ *forensicFlags }

func newCaptureFlags(name, usage string, stdout io.Writer) *captureFlags {
	return &captureFlags{newForensicFlags("capture "+name, "usage: shaperproxy capture "+usage, stdout)}
}

func (f *captureFlags) options(stderr io.Writer) (captureOptions, error) {
	dir, err := f.dataDirectory()
	if err != nil {
		return captureOptions{}, err
	}
	c, err := f.forensicConfig()
	if err != nil {
		return captureOptions{}, err
	}
	o := captureOptions{Dir: filepath.Join(dir, capture.Dir), JSON: f.json, Profiles: profileTable(c)}
	if _, err := os.Stat(o.Dir); err != nil {
		return o, fmt.Errorf("no capture log in %s: %w", o.Dir, err)
	}
	if file, ok := stderr.(*os.File); ok && term.IsTerminal(int(file.Fd())) {
		o.Progress = stderr
	}
	return o, nil
}

// parseNone parses the flags of a command without positional arguments.
func (f *captureFlags) parseNone(args []string, stderr io.Writer) (captureOptions, error) {
	if err := f.parse(args); err != nil {
		return captureOptions{}, err
	}
	return f.options(stderr)
}

func captureTail(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	f := newCaptureFlags("tail", `tail [-n N] [--kind KIND] [--call ID] [-f] [flags]

The last N records of the log with their positions (SEG:OFF+IDX, for
capture read --from), oldest first; -f keeps printing new ones.
`, stdout)
	var o tailOptions
	var kinds string
	f.IntVar(&o.N, "n", 20, "number of records (0: none, with -f only the new ones)")
	f.StringVar(&kinds, "kind", "", "only records of these `kinds` (comma-separated: request, client_request, response, event, body, end, drops, note)")
	f.StringVar(&o.Call, "call", "", "only the records of this call `ID`")
	f.BoolVar(&o.Follow, "f", false, "keep printing new records until interrupted")
	cmd, err := f.parseNone(args, stderr)
	if err != nil {
		return err
	}
	o.captureOptions = cmd
	if o.Kinds, err = parseKinds(kinds); err != nil {
		return f.usageErr("--kind: %w", err)
	}
	if o.N < 0 {
		return f.usageErr("-n: must not be negative")
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
			return nil, err
		}
		kinds = append(kinds, k)
	}
	return kinds, nil
}

func captureRead(args []string, stdout, stderr io.Writer) error {
	f := newCaptureFlags("read", `read --from POS [--limit N] [flags]

Records from a position on, in log order, then (in text) the position to
continue from; in JSON every record carries "next", the position after it.
`, stdout)
	var o readOptions
	var from string
	f.StringVar(&from, "from", "", "start `POS` (SEG, SEG:OFF or SEG:OFF+IDX, as tail prints)")
	f.IntVar(&o.Limit, "limit", 100, "number of records")
	if err := f.parse(args); err != nil {
		return err
	}
	if from == "" {
		return f.usageErr("--from is required")
	}
	var err error
	if o.From, err = capture.ParsePos(from); err != nil {
		return f.usageErr("--from: %w", err)
	}
	if o.captureOptions, err = f.options(stderr); err != nil {
		return err
	}
	return readCmd(stdout, o)
}

func captureShow(args []string, stdout, stderr io.Writer) error {
	f := newCaptureFlags("show", `show [CALL] [--chunks] [--full] [flags]

One call (default: the last with a request): the request as sent upstream,
the response rebuilt field by field, the timings and the end. --chunks
lists every stream event with its offset, the gap before it and the delta
it carried (reasoning and content text, tool call fragments, finish_reason,
usage).
`, stdout)
	var o showOptions
	f.BoolVar(&o.Full, "full", false, "print reasoning, content and deltas whole")
	f.BoolVar(&o.Chunks, "chunks", false, "list the stream's events one by one")
	pos, err := f.parseInterspersed(args)
	if err != nil {
		return err
	}
	if len(pos) > 1 {
		return f.usageErr("one call id at most, got %d", len(pos))
	}
	if len(pos) == 1 {
		o.Call = pos[0]
	}
	if o.captureOptions, err = f.options(stderr); err != nil {
		return err
	}
	return showCmd(stdout, o)
}

func captureFind(args []string, stdout, stderr io.Writer) error {
	f := newCaptureFlags("find", `find [--text TEXT [-i] [--in request|response]] [--model M] [--route R]
       [--outcome O] [--since TIME] [--until TIME] [--limit N] [flags]

The calls that match every condition given, oldest first: one line per
call (time, id, route, model, status, outcome, duration) and where the text
was found. The text is looked for in the request's messages (content,
reasoning, tool calls) and in the response rebuilt field by field, so a
text split over several stream chunks is found. With --since only the end
of the log is read; with --until reading stops after it.

TIME is `+timeHelp+`.
`, stdout)
	var o findOptions
	var in string
	f.StringVar(&o.Query.Text, "text", "", "the `TEXT` to look for")
	f.BoolVar(&o.Query.Fold, "i", false, "match the text regardless of case")
	f.StringVar(&in, "in", "", "look for the text only in the `request` or the `response`")
	f.StringVar(&o.Query.Model, "model", "", "only calls whose model contains `M` (any case)")
	f.StringVar(&o.Query.Route, "route", "", "only calls of this `route`")
	f.StringVar(&o.Query.Outcome, "outcome", "", "only calls with this `outcome` ("+strings.Join(findOutcomes, ", ")+"; none: no end in the log)")
	f.Var(timeValue{t: &o.Query.Since}, "since", "only calls whose request came at or after `TIME`")
	f.Var(timeValue{t: &o.Query.Until}, "until", "only calls whose request came before `TIME`")
	f.IntVar(&o.Query.Limit, "limit", 100, "print at most `N` calls (0: all)")
	cmd, err := f.parseNone(args, stderr)
	if err != nil {
		return err
	}
	switch in {
	case "":
	case "request":
		o.Query.In = capture.InRequest
	case "response":
		o.Query.In = capture.InResponse
	default:
		return f.usageErr("--in: want request or response, got %q", in)
	}
	if o.Query.Outcome != "" && o.Query.Outcome != "none" && !slices.Contains(findOutcomes, o.Query.Outcome) {
		return f.usageErr("--outcome: want one of %s or none, got %q", strings.Join(findOutcomes, ", "), o.Query.Outcome)
	}
	if o.Query.Limit < 0 {
		return f.usageErr("--limit: must not be negative")
	}
	o.captureOptions = cmd
	return findCmd(stdout, stderr, o)
}

// findOutcomes are the outcomes a captured call can end with
// (proxy.Outcome; a retried attempt is not a call's end, and a request
// whose body could not be read never reaches an upstream or the capture).
var findOutcomes = []string{
	string(proxy.OutcomeComplete), string(proxy.OutcomeClientCancelled), string(proxy.OutcomeUpstreamError),
	string(proxy.OutcomeTimeout), string(proxy.OutcomeShutdown),
}

func captureStats(args []string, stdout, stderr io.Writer) error {
	f := newCaptureFlags("stats", `stats [--since TIME] [flags]

Statistics of the log: records by kind, bytes on disk vs on the wire,
outgoing reasoning blocks shaped vs raw per route and model and the
shaping markers found in them, the tokens the upstream reported (prompt,
cache hits and misses, output, reasoning) and their cost at the route's
profile prices per route, model and kind of call (primary, review-child,
review-continuation, deliberate-branch, deliberate-continuation) and per
conversation, chunks per streamed call, calls by outcome, dropped records.
--config gives the routes whose profiles price the tokens.

TIME is `+timeHelp+`.
`, stdout)
	var o statsOptions
	f.Var(timeValue{t: &o.Since}, "since", "only records at or after `TIME`")
	cmd, err := f.parseNone(args, stderr)
	if err != nil {
		return err
	}
	o.captureOptions = cmd
	return statsCmd(stdout, o)
}
