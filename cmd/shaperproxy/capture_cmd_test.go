package main

import (
	"bytes"
	"context"
	"path/filepath"
	"strings"
	"testing"

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
