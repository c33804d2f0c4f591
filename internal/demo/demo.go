// Package demo runs shaperproxy end to end on loopback with the project's
// fake upstream: a scripted coding agent talks through the proxy for two
// user turns with tool calls, and the demo prints what passed. No API key
// and no network are needed.
package demo

import (
	"context"
	"crypto/rand"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/shaperproxy/shaperproxy/capture"
	"github.com/shaperproxy/shaperproxy/conv"
	"github.com/shaperproxy/shaperproxy/internal/config"
	"github.com/shaperproxy/shaperproxy/internal/fakeupstream"
	"github.com/shaperproxy/shaperproxy/internal/review"
	"github.com/shaperproxy/shaperproxy/proxy"
)

// Proxy is the proxy the demo runs, as the command builds it.
type Proxy interface {
	http.Handler
	// Flush writes what the proxy's queues hold (originals, capture).
	Flush() error
	Close() error
}

// Options configure a demo run.
type Options struct {
	// Build builds the proxy for a configuration (the command's setup).
	Build func(config.Config, *slog.Logger) (Proxy, error)
	// Command runs one of the program's commands (as `shaperproxy ARGS…`
	// would), to show what a user sees.
	Command func(ctx context.Context, stdout io.Writer, args ...string) error
	// DataDir holds the demo's stores; "" uses a temporary directory
	// removed at the end.
	DataDir string
	// Out receives the report.
	Out io.Writer
	// Logger receives the proxy's log; nil discards it.
	Logger *slog.Logger
}

// Result sums up a run, for tests.
type Result struct {
	Requests       int // requests the agent sent
	UpstreamSeen   int // chat requests the upstream received
	Chunks         int // stream chunks the agent received
	Turns          int // turns the proxy's conversation model counted
	NewTurns       int // requests that started a new turn
	Conversations  int // distinct conversation keys
	Shaped, Raw    int // reasoning blocks the upstream received shaped / as sent
	LookupOK       bool
	Reviews        int  // review children the upstream answered
	Revisions      int  // continuations the upstream answered
	Restored       bool // a later request carried draft, notice and continuation
	GuardNotices   int  // ECHO notice placements the upstream saw in the sub-agent's requests
	Branches       int  // deliberate branches the upstream answered
	DeliberateSeen bool // the deliberating agent saw the deliberate call (it must not)
	// DeliberateRestored: the request after the deliberation carried the
	// hidden call and its result.
	DeliberateRestored bool
	CapturedCalls      int // streamed calls in the capture log
	CapturedShaped     int // outgoing reasoning blocks the capture counted as shaped
}

// Run starts the fake upstream and the proxy on loopback, drives the
// scripted conversation through the proxy and prints a report.
func Run(ctx context.Context, opts Options) (Result, error) {
	var res Result
	out := opts.Out
	if out == nil {
		out = io.Discard
	}
	dir, cleanup, err := dataDir(opts.DataDir)
	if err != nil {
		return res, err
	}
	defer cleanup()
	kept := opts.DataDir != ""
	started := time.Now()
	// Each run is a conversation of its own: on a kept data directory the
	// review, the guard and the originals of an earlier run (state.db,
	// originals.db) do not apply to this one.
	run := newRunID()
	mainConv, subConv := "demo-"+run, "demo-"+run+"-sub-agent"

	up := fakeupstream.New()
	for i := range replies {
		up.Push(fakeupstream.Response{Reply: &replies[i]})
	}
	review, deliberation := reviewAnswers(&res), deliberateAnswers(&res)
	up.Handle(func(r fakeupstream.Recorded) (fakeupstream.Response, bool) {
		if resp, ok := deliberation(r); ok {
			return resp, true
		}
		return review(r)
	})
	upURL, closeUp, err := up.Start("127.0.0.1:0")
	if err != nil {
		return res, err
	}
	defer closeUp()

	c := config.Default()
	c.DataDir = dir
	c.Routes = c.WithDefaultRoute(upURL)
	c.Review.Routes = []string{"default"}
	c.Deliberate.Routes = []string{"default"} // only requests that declare tools get it
	px, err := opts.Build(c, opts.Logger)
	if err != nil {
		return res, err
	}
	defer px.Close()
	pxURL, stop, err := proxy.ServeLoopback(px)
	if err != nil {
		return res, err
	}
	defer stop()

	where := dir
	if !kept {
		where += " (temporary, removed at the end)"
	}
	fmt.Fprintf(out, "shaperproxy demo: fake upstream %s, proxy %s, data %s\n", upURL, pxURL, where)
	fmt.Fprintf(out, "conversation %q (sent as X-Shaper-Conversation: every run is a new conversation)\n\n", mainConv)
	agent := &Agent{BaseURL: pxURL + "/v1", Model: "deepseek-reasoner", Client: &http.Client{Timeout: 30 * time.Second}, Tools: runTool,
		Header: http.Header{"X-Shaper-Conversation": {mainConv}}}
	agent.System(systemPrompt)
	for i, u := range userTurns {
		fmt.Fprintf(out, "── user turn %d: %s\n", i+1, u)
		err := agent.Turn(ctx, u, func(r StepReport) {
			res.Requests++
			res.Chunks += r.Response.Chunks
			printStep(out, res.Requests, r)
		})
		if err != nil {
			return res, fmt.Errorf("turn %d: %w", i+1, err)
		}
	}
	summarise(out, primaries(up.Requests()), &res)
	showReview(out, up.Requests(), &res)
	if err := px.Flush(); err != nil {
		return res, err
	}
	if err := showShaping(out, agent.lastBody, up.Requests(), pxURL, conv.ConversationKey(nil, mainConv), &res); err != nil {
		return res, err
	}
	if err := showCapture(ctx, out, opts.Command, dir, kept, started, &res); err != nil {
		return res, err
	}
	if err := showGuard(ctx, out, up, pxURL, subConv, &res); err != nil {
		return res, err
	}
	if err := showDeliberate(ctx, out, up, pxURL, "demo-"+run+"-deliberation", &res); err != nil {
		return res, err
	}
	showNext(out, dir, kept)
	return res, nil
}

// newRunID names a run: random, so that runs on one data directory never
// share a conversation.
func newRunID() string {
	return strings.ToLower(rand.Text()[:10])
}

// showNext says how to look at the data: the commands on a kept
// directory, or how to keep it.
func showNext(out io.Writer, dir string, kept bool) {
	if !kept {
		fmt.Fprintf(out, "\nThe demo's data was in a temporary directory, now removed. To keep it and look at it with\n"+
			"the forensic commands, run: shaperproxy demo --data-dir DIR\n")
		return
	}
	fmt.Fprintf(out, "\nThe demo's data is kept in %[1]s; look at it with:\n"+
		"  shaperproxy capture find --data-dir %[1]s --text ParseDate --since 1h\n"+
		"  shaperproxy capture show --data-dir %[1]s --chunks\n"+
		"  shaperproxy originals list --data-dir %[1]s\n", dir)
}

// showCapture prints what the wire capture recorded: `shaperproxy capture
// stats` and the last call as `capture show` rebuilds it. The commands are
// printed as a user would type them only when the data is kept; the
// result counts this run's records (since started).
func showCapture(ctx context.Context, out io.Writer, command func(context.Context, io.Writer, ...string) error, dataDir string, kept bool, started time.Time, res *Result) error {
	dir := filepath.Join(dataDir, capture.Dir)
	shown := func(args string) string {
		if kept {
			return "shaperproxy capture " + args + " --data-dir " + dataDir
		}
		return "shaperproxy capture " + args + " (on the demo's temporary data)"
	}
	fmt.Fprintf(out, "\n── capture: %s\n", shown("stats"))
	if err := command(ctx, out, "capture", "stats", "--data-dir", dataDir); err != nil {
		return err
	}
	r, err := capture.OpenReader(dir)
	if err != nil {
		return err
	}
	defer r.Close()
	last := lastAgentCall(r)
	fmt.Fprintf(out, "\n── capture: %s (the agent's last call, reassembled field by field)\n", shown("show "+last))
	if err := command(ctx, out, "capture", "show", "--data-dir", dataDir, last); err != nil {
		return err
	}
	st, err := capture.ComputeStats(r, started, nil)
	if err != nil {
		return err
	}
	res.CapturedCalls = st.Chunks.Calls
	for _, rr := range st.Reasoning {
		res.CapturedShaped += int(rr.Shaped)
	}
	return nil
}

// lastAgentCall returns the id of the last call the agent made (not one
// the proxy made on its own for a review).
func lastAgentCall(r *capture.Reader) string {
	recs, err := r.Tail(20, capture.Filter{Kinds: []capture.Kind{capture.KindRequest}})
	if err != nil {
		return ""
	}
	for i := len(recs) - 1; i >= 0; i-- {
		if !recs[i].Record.Internal {
			return recs[i].Record.Call
		}
	}
	return ""
}

func printStep(out io.Writer, n int, r StepReport) {
	ch := firstChoice(r.Response)
	fmt.Fprintf(out, "  → request %d: %d messages, %d bytes\n", n, r.Messages, len(r.Body))
	what := fmt.Sprintf("answer %q", clip(ch.Content, 60))
	if draft, revised, ok := strings.Cut(ch.Content, review.Separator); ok {
		what = fmt.Sprintf("answer %q, then after the review's separator %q", clip(draft, 40), clip(revised, 60))
	}
	if len(ch.ToolCalls) > 0 {
		what = "tool call " + ch.ToolCalls[0].Name + " " + ch.ToolCalls[0].Arguments
	}
	fmt.Fprintf(out, "  ← %d chunks, %d reasoning chars, finish=%s, %s\n", r.Response.Chunks, len([]rune(ch.Reasoning)), ch.FinishReason, what)
}

// summarise reads the requests as the upstream received them through the
// conversation model.
func summarise(out io.Writer, reqs []fakeupstream.Recorded, res *Result) {
	keys := map[string]bool{}
	for _, r := range reqs {
		view, err := conv.ParseRequest(r.Body)
		if err != nil {
			continue
		}
		res.UpstreamSeen++
		if view.StartsNewTurn() {
			res.NewTurns++
		}
		res.Turns = max(res.Turns, len(view.Turns()))
		keys[conv.ConversationKey(view, "")] = true
	}
	res.Conversations = len(keys)
	fmt.Fprintf(out, "\nupstream saw %d chat requests (%d started a new turn), %d turns, %d conversation(s); the agent received %d chunks.\n",
		res.UpstreamSeen, res.NewTurns, res.Turns, res.Conversations, res.Chunks)
}

func clip(s string, n int) string {
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	return string(r[:n]) + "…"
}

func dataDir(dir string) (string, func(), error) {
	if dir != "" {
		return dir, func() {}, os.MkdirAll(dir, 0o700)
	}
	d, err := os.MkdirTemp("", "shaperproxy-demo-")
	return d, func() { _ = os.RemoveAll(d) }, err
}
