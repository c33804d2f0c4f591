package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/shaperproxy/shaperproxy/capture"
)

// TestCaptureCommands writes a small log and runs tail, read, show and
// stats over it through the command line.
func TestCaptureCommands(t *testing.T) {
	dir := t.TempDir()
	w, err := capture.Open(capture.Options{Dir: filepath.Join(dir, "capture")})
	if err != nil {
		t.Fatal(err)
	}
	body := []byte(`{"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}]}`)
	w.Enqueue(capture.Record{Kind: capture.KindRequest, Call: "c1", Route: "r", Model: "m", Method: "POST", URL: "http://u/v1/chat/completions", Data: body, ReasoningShaped: 2, ReasoningRaw: 1})
	w.Enqueue(capture.Record{Kind: capture.KindResponse, Call: "c1", Status: 200, Stream: true})
	for i, ev := range []string{`{"choices":[{"index":0,"delta":{"reasoning_content":"think"}}]}`, `{"choices":[{"index":0,"delta":{"content":"hello"},"finish_reason":"stop"}]}`} {
		w.Enqueue(capture.Record{Kind: capture.KindEvent, Call: "c1", Seq: i, Data: []byte("data: " + ev + "\n\n")})
	}
	w.Enqueue(capture.Record{Kind: capture.KindEnd, Call: "c1", Status: 200, Outcome: "complete", Events: 2})
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	runCap := func(args ...string) string {
		t.Helper()
		var out bytes.Buffer
		if err := run(context.Background(), append([]string{"capture"}, args...), &out, &out); err != nil {
			t.Fatalf("capture %v: %v\n%s", args, err, out.String())
		}
		return out.String()
	}
	if s := runCap("tail", "-n", "2", "--data-dir", dir); strings.Count(s, "\n") != 2 || !strings.Contains(s, "end") {
		t.Errorf("tail: %q", s)
	}
	if s := runCap("show", "c1", "--data-dir", dir); !strings.Contains(s, "think") || !strings.Contains(s, "hello") || !strings.Contains(s, "shaped 2, raw 1") {
		t.Errorf("show: %s", s)
	}
	if s := runCap("stats", "--json", "--data-dir", dir); !strings.Contains(s, `"shaped":2`) {
		t.Errorf("stats: %s", s)
	}
	if s := runCap("read", "--from", "1", "--limit", "1", "--data-dir", dir); strings.Count(s, "\n") < 1 || !strings.Contains(s, "request") {
		t.Errorf("read: %q", s)
	}
}

// runOK runs a command line and returns its stdout.
func runOK(t *testing.T, args ...string) string {
	t.Helper()
	var out, errb bytes.Buffer
	if err := run(context.Background(), args, &out, &errb); err != nil {
		t.Fatalf("%v: %v\n%s%s", args, err, out.String(), errb.String())
	}
	return out.String()
}

// TestCaptureConfigDataDir: capture reads the data_dir of --config, and
// --data-dir wins over it, as for serve.
func TestCaptureConfigDataDir(t *testing.T) {
	dir := filepath.Dir(captureFixture(t))
	if s := runOK(t, "capture", "stats", "--config", writeConfig(t, dir)); !strings.Contains(s, "deepseek-reasoner") {
		t.Errorf("stats --config:\n%s", s)
	}
	if s := runOK(t, "capture", "tail", "-n", "1", "--config", writeConfig(t, t.TempDir()), "--data-dir", dir); !strings.Contains(s, "drops") {
		t.Errorf("tail --data-dir over --config:\n%s", s)
	}
	var out bytes.Buffer
	err := run(context.Background(), []string{"capture", "stats", "--config", writeConfig(t, t.TempDir())}, &out, &out)
	if err == nil || !strings.Contains(err.Error(), "no capture log") {
		t.Errorf("config pointing at an empty dir: %v", err)
	}
	// The config's data_dir wins over $SHAPERPROXY_DATA_DIR; a config
	// without one leaves it to the variable.
	t.Setenv("SHAPERPROXY_DATA_DIR", t.TempDir())
	if s := runOK(t, "capture", "stats", "--config", writeConfig(t, dir)); !strings.Contains(s, "deepseek-reasoner") {
		t.Errorf("config over the environment:\n%s", s)
	}
	t.Setenv("SHAPERPROXY_DATA_DIR", dir)
	noDir := filepath.Join(t.TempDir(), "c.toml")
	if err := os.WriteFile(noDir, []byte("log_level = \"warn\"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if s := runOK(t, "capture", "stats", "--config", noDir); !strings.Contains(s, "deepseek-reasoner") {
		t.Errorf("config without data_dir:\n%s", s)
	}
}

// TestCaptureFindCommand: find through the command line, in text and JSON.
func TestCaptureFindCommand(t *testing.T) {
	dir := filepath.Dir(captureFixture(t))
	s := runOK(t, "capture", "find", "--text", "both FIXES", "-i", "--data-dir", dir)
	for _, want := range []string{"call-a", "call-b", "deepseek-reasoner", "complete", "response choices[0].reasoning_content: [reasoning] Both fixes", "2 call(s)", "2026-10-13T12:00:00.000Z"} {
		if !strings.Contains(s, want) {
			t.Errorf("find lacks %q:\n%s", want, s)
		}
	}
	s = runOK(t, "capture", "find", "--text", "package main", "--in", "request", "--since", "2026-10-13T12:00:30Z", "--json", "--data-dir", dir)
	var m findJSON
	if err := json.Unmarshal([]byte(s), &m); err != nil || m.Call != "call-b" || len(m.Hits) != 1 || m.Hits[0].Field != "messages[3].content" || m.DurationMS == nil {
		t.Errorf("find --json: %v %s", err, s)
	}
	if s := runOK(t, "capture", "find", "--outcome", "timeout", "--data-dir", dir); !strings.Contains(s, "no call matches") {
		t.Errorf("no match: %s", s)
	}
	var out, errb bytes.Buffer
	if err := run(context.Background(), []string{"capture", "find", "--limit", "1", "--data-dir", dir}, &out, &errb); err != nil ||
		!strings.Contains(out.String(), "1 call(s)") || !strings.Contains(errb.String(), "stopped at --limit 1") {
		t.Errorf("--limit: %v\n%s%s", err, out.String(), errb.String())
	}
}

// TestCaptureShowChunks: --chunks lists every event with its offset, gap
// and the delta it carried, the part that varies included however long
// the event's fixed prefix is.
func TestCaptureShowChunks(t *testing.T) {
	w, capDir := openCaptureTest(t, capture.Options{})
	writeCall(t, w, "call-a", t0)
	prefix := `{"id":"` + strings.Repeat("x", 200) + `","object":"chat.completion.chunk","created":1760000000,"model":"deepseek-reasoner",`
	enqueue(t, w, capture.Record{Kind: capture.KindRequest, Call: "call-long", Time: t0.Add(time.Hour), Data: []byte(`{"messages":[]}`)})
	enqueue(t, w, capture.Record{Kind: capture.KindEvent, Call: "call-long", Time: t0.Add(time.Hour), Offset: 5 * time.Millisecond,
		Data: []byte("data: " + prefix + `"choices":[{"index":0,"delta":{"content":"THE PART THAT VARIES"}}]}` + "\n\n")})
	mustFlush(t, w)
	dir := filepath.Dir(capDir)

	s := runOK(t, "capture", "show", "call-a", "--chunks", "--data-dir", dir)
	for _, want := range []string{
		"chunks: 10 events (upstream-wire)",
		`comment ": keep-alive"`,
		`role=assistant reasoning_content ""`,
		`reasoning_content "ing] Both fixes"`,
		"2150.0ms", // the event after the 2 s gap: its offset ...
		"2010.0ms", // ... and the gap before it
		`tool_calls[0] id=c1 type=function name=write arguments ""`,
		`tool_calls[0] arguments "{\"path\":"`,
		`finish_reason=tool_calls usage {"prompt_tokens":10,"completion_tokens":5,"total_tokens":15}`,
		"[DONE]",
	} {
		if !strings.Contains(s, want) {
			t.Errorf("show --chunks lacks %q:\n%s", want, s)
		}
	}
	if s := runOK(t, "capture", "show", "call-long", "--chunks", "--data-dir", dir); !strings.Contains(s, `content "THE PART THAT VARIES"`) {
		t.Errorf("show --chunks of a long event:\n%s", s)
	}
	if s := runOK(t, "capture", "tail", "-n", "1", "--data-dir", dir); !strings.Contains(s, "THE PART THAT VARIES") {
		t.Errorf("tail of a long event:\n%s", s)
	}
	var v callJSON
	s = runOK(t, "capture", "show", "call-a", "--chunks", "--json", "--data-dir", dir)
	if err := json.Unmarshal([]byte(s), &v); err != nil || len(v.Chunks) != 10 || v.Chunks[5].GapMS != 2010 || v.Chunks[7].Choices[0].ToolCalls[0].Arguments != `"a.go"}` {
		t.Errorf("show --chunks --json: %v\n%s", err, s)
	}
}
