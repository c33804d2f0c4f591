package main

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/shaperproxy/shaperproxy/conv"
	"github.com/shaperproxy/shaperproxy/internal/guard"
	"github.com/shaperproxy/shaperproxy/internal/ledger"
	"github.com/shaperproxy/shaperproxy/internal/reqshape"
	"github.com/shaperproxy/shaperproxy/internal/review"
	"github.com/shaperproxy/shaperproxy/proxy"
)

// requestPathSeeds are FuzzRequestPath's seeds: agent histories and the
// deep nesting of issue 10 in each place the request path reads JSON.
func requestPathSeeds() [][]byte {
	deep := strings.Repeat("[", 12_000)
	closedDeep := func(n int) string { return strings.Repeat(`[{"k":`, n/2) + `0` + strings.Repeat(`}]`, n/2) }
	call := func(id, args string) string {
		return `{"role":"assistant","content":null,"reasoning_content":"r","tool_calls":[{"id":"` + id +
			`","type":"function","function":{"name":"bash","arguments":"` + args + `"}}]}`
	}
	tool := func(id, content string) string {
		return `{"role":"tool","tool_call_id":"` + id + `","content":"` + content + `"}`
	}
	long := strings.Repeat("Hmm, let me think. Wait, the config path is relative. So the fix is to resolve it. ", 8)
	return [][]byte{
		[]byte(`{"model":"m","messages":` + deep),
		[]byte(`{"model":"m","messages":[` + closedDeep(conv.MaxDepth) + `]}`),
		[]byte(`{"model":"m","messages":[` + closedDeep(conv.MaxDepth+2) + `]}`),
		[]byte(`{"model":"m","messages":[{"role":"user","content":"go"},` + call("functions.bash:0", deep) + `,` +
			tool("functions.bash:0", `{\"error\":`+deep) + `]}`),
		[]byte(`{"model":"m","reasoning":{"max_tokens":16000},"messages":[{"role":"user","content":"go"},` +
			call("a", `{\"cmd\":\"make\"}`) + `,` + tool("a", "Error: exit status 2") + `,` +
			call("a", `{\"cmd\":\"make\"}`) + `,` + tool("a", "exit code: 1") + `,` +
			call("a", `{ \"cmd\" : \"make\" }`) + `,` + tool("a", `{\"error\":\"boom\"}`) + `]}`),
		[]byte(`{"model":"deepseek-reasoner","reasoning_effort":"max","messages":[{"role":"system","content":"s"},{"role":"user","content":"fix"},` +
			`{"role":"assistant","content":"","reasoning_content":"` + long + `","tool_calls":[{"id":"c1","type":"function","function":{"name":"read","arguments":"{}"}}]},` +
			`{"role":"tool","tool_call_id":"c1","content":"ok"},` +
			`{"role":"assistant","content":"","reasoning_content":"` + long + `","tool_calls":[{"id":"c2","type":"function","function":{"name":"read","arguments":"{}"}}]},` +
			`{"role":"tool","tool_call_id":"c2","content":"ok"}]}`),
	}
}

// historyAround is a chat request whose three failing steps carry text as
// tool-call arguments and tool result, and its first 2 KB as reasoning:
// every input reaches the guard's JSON checks and the shaping, valid JSON
// or not. (Shaping long texts is fuzzed in shaping/.)
func historyAround(text string) []byte {
	q, _ := json.Marshal(text)
	r, _ := json.Marshal(strings.ToValidUTF8(text[:min(len(text), 2048)], ""))
	var b strings.Builder
	b.WriteString(`{"model":"m","reasoning":{"max_tokens":9000},"messages":[{"role":"user","content":"go"}`)
	for _, id := range []string{"functions.run:0", "functions.run:0", "x"} {
		b.WriteString(`,{"role":"assistant","content":null,"reasoning_content":` + string(r) +
			`,"tool_calls":[{"id":"` + id + `","type":"function","function":{"name":"run","arguments":` + string(q) + `}}]}`)
		b.WriteString(`,{"role":"tool","tool_call_id":"` + id + `","content":` + string(q) + `}`)
	}
	b.WriteString(`]}`)
	return []byte(b.String())
}

// fuzzDir is a directory for FuzzRequestPath's ledger: on /dev/shm when
// there is one (a tmpfs: the guard's state writes cost no fsync, so a
// million executions take minutes, not hours), else under TempDir.
func fuzzDir(f *testing.F) string {
	if dir, err := os.MkdirTemp("/dev/shm", "shaperproxy-fuzz-"); err == nil {
		f.Cleanup(func() { os.RemoveAll(dir) })
		return dir
	}
	return f.TempDir()
}

// FuzzRequestPath runs a body through the request path as the proxy does:
// conv.ParseRequest, then the transforms in their order (review's
// restorer, the guard's fold and decision, shaping), re-parsing after a
// transform that changed the body; and the same for a history made around
// text (historyAround). No input may crash it, and every body a transform
// makes must still be a chat request.
//
// Run it with the minimization bounded:
//
//	go test -run=^$ -fuzz=FuzzRequestPath -fuzztime=60s -fuzzminimizetime=10x ./cmd/shaperproxy
//
// Its seeds are tens of kilobytes (12,000-deep nesting), so every input
// that finds new coverage is one of that size, and Go's default (minimize
// it for up to 60 s, executions not counted) leaves the workers minimizing
// for the whole run: `execs` stops after a handful.
func FuzzRequestPath(f *testing.F) {
	texts := []string{`{"cmd":"make"}`, `{"error":"boom"}`, "Error: exit status 2", strings.Repeat("[", 12_000),
		`{"error":` + strings.Repeat(`{"a":`, 12_000), "Hmm. Wait. So the fix is to resolve the path. " + strings.Repeat("x", 300)}
	for i, s := range requestPathSeeds() {
		f.Add(s, texts[i%len(texts)])
	}
	led, err := ledger.Open(filepath.Join(fuzzDir(f), ledger.FileName), ledger.Options{})
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { led.Close() })
	gc := guard.DefaultConfig()
	gc.StallAction, gc.StepDownRequests, gc.StallStepChars, gc.StallTurnChars = guard.StallInterrupt, 2, 200, 400
	g, err := guard.New(gc)
	if err != nil {
		f.Fatal(err)
	}
	discard := slog.New(slog.DiscardHandler)
	shaper := reqshape.NewShaper(reqshape.DefaultConfig(), reqshape.Options{Log: discard})
	f.Cleanup(func() { shaper.Close() })
	transforms := []proxy.RequestTransform{
		review.NewRestorer(led),
		guard.NewHook(g, led, map[string]string{"r": "https://openrouter.ai/api"}, discard),
		shaper,
	}
	f.Fuzz(func(t *testing.T, body []byte, text string) {
		runRequestPath(t, transforms, body)
		if utf8.ValidString(text) {
			runRequestPath(t, transforms, historyAround(text))
		}
	})
}

// runRequestPath parses body and runs it through transforms.
func runRequestPath(t *testing.T, transforms []proxy.RequestTransform, body []byte) {
	req, err := conv.ParseRequest(body)
	if err != nil {
		return
	}
	call := &proxy.Call{ID: "fuzz", Route: "r", Chat: true, View: req, ClientBody: body,
		Conversation: conv.ConversationKey(req, ""), Model: req.Model, Stream: req.Stream}
	out := body
	for _, tr := range transforms {
		next, err := tr.TransformRequest(context.Background(), call, out)
		if err != nil || bytes.Equal(next, out) {
			continue
		}
		if call.View, err = conv.ParseRequest(next); err != nil {
			t.Fatalf("%T made a body that is not a chat request: %v\n%.300s", tr, err, next)
		}
		out = next
	}
	call.RunBeside() // what the proxy would run beside the trip upstream
	call.RunAfter()  // and after the answer (the shaper's counts and originals)
}
