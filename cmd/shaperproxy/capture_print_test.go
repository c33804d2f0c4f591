package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/shaperproxy/shaperproxy/capture"
)

// writeCall writes one DeepSeek-style streamed call with reasoning,
// content, a tool call and usage, the events 10 ms apart except one 2 s
// gap.
func writeCall(t testing.TB, w *capture.Writer, call string, start time.Time) {
	t.Helper()
	body := `{"model":"deepseek-reasoner","messages":[{"role":"system","content":"be brief"},{"role":"user","content":"fix it"},` +
		`{"role":"assistant","content":null,"reasoning_content":"Look at the file.","tool_calls":[{"id":"c0","type":"function","function":{"name":"read","arguments":"{}"}}]},` +
		`{"role":"tool","tool_call_id":"c0","content":"package main"}],"stream":true}`
	enqueue(t, w, capture.Record{Kind: capture.KindRequest, Call: call, Time: start, Route: "deepseek", Model: "deepseek-reasoner",
		Method: "POST", URL: "https://api.deepseek.com/chat/completions", Stream: true, Data: []byte(body),
		ReasoningShaped: 1, ReasoningRaw: 0, Header: testHeader()})
	enqueue(t, w, capture.Record{Kind: capture.KindResponse, Call: call, Time: start.Add(90 * time.Millisecond), Status: 200, Offset: 90 * time.Millisecond})
	chunks := []string{
		`{"choices":[{"index":0,"delta":{"role":"assistant","content":null,"reasoning_content":""}}]}`,
		`{"choices":[{"index":0,"delta":{"content":null,"reasoning_content":"[reason"}}]}`,
		`{"choices":[{"index":0,"delta":{"content":null,"reasoning_content":"ing] Both fixes"}}]}`,
		`{"choices":[{"index":0,"delta":{"content":"Done.","reasoning_content":null}}]}`,
		`{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"c1","type":"function","function":{"name":"write","arguments":""}}]}}]}`,
		`{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"{\"path\":"}}]}}]}`,
		`{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"\"a.go\"}"}}]}}]}`,
		`{"choices":[{"index":0,"delta":{},"finish_reason":"tool_calls"}],"usage":{"prompt_tokens":10,"completion_tokens":5,"total_tokens":15}}`,
		`[DONE]`,
	}
	off := 100 * time.Millisecond
	enqueue(t, w, capture.Record{Kind: capture.KindEvent, Call: call, Seq: 0, Offset: off, Time: start.Add(off), Data: []byte(": keep-alive\n\n")})
	for i, c := range chunks {
		off += 10 * time.Millisecond
		if i == 4 {
			off += 2 * time.Second
		}
		enqueue(t, w, capture.Record{Kind: capture.KindEvent, Call: call, Seq: i + 1, Offset: off, Time: start.Add(off), Data: []byte("data: " + c + "\n\n")})
	}
	enqueue(t, w, capture.Record{Kind: capture.KindEnd, Call: call, Time: start.Add(off), Offset: off, Outcome: "complete", Events: len(chunks) + 1, Bytes: 1234})
}

func TestShowCmd(t *testing.T) {
	w, dir := openCaptureTest(t, capture.Options{})
	writeCall(t, w, "call-a", t0)
	writeCall(t, w, "call-b", t0.Add(time.Minute))
	mustFlush(t, w)

	var out bytes.Buffer
	if err := showCmd(&out, showOptions{captureOptions: captureOptions{Dir: dir, JSON: true}, Call: "call-a"}); err != nil {
		t.Fatal(err)
	}
	var v callJSON
	if err := json.Unmarshal(out.Bytes(), &v); err != nil {
		t.Fatal(err)
	}
	q, rv := v.Request, v.Response
	if q == nil || rv == nil || len(rv.Choices) != 1 {
		t.Fatalf("view: %s", out.String())
	}
	c := rv.Choices[0]
	checks := []struct {
		name      string
		got, want any
	}{
		{"messages", q.Messages, 4},
		{"roles", q.Roles, map[string]int{"system": 1, "user": 1, "assistant": 1, "tool": 1}},
		{"reasoning blocks", q.ReasoningBlocks, 1},
		{"shaped", q.ReasoningShaped, 1},
		{"reasoning", c.Reasoning, "[reasoning] Both fixes"},
		{"content", c.Content, "Done."},
		{"finish", c.FinishReason, "tool_calls"},
		{"tool call", fmt.Sprint(c.ToolCalls[0].ID, c.ToolCalls[0].Name, c.ToolCalls[0].Arguments), `c1write{"path":"a.go"}`},
		{"usage", string(rv.Usage), `{"prompt_tokens":10,"completion_tokens":5,"total_tokens":15}`},
		{"chunks", rv.Chunks, 8},
		{"events", rv.Events, 10},
		{"first chunk", rv.FirstChunkMS, 100},
		{"largest gap", rv.LargestGapMS, 2010},
		{"gap at", rv.LargestGapSeq, 5},
		{"status", v.Status, 200},
		{"outcome", v.End.Outcome, "complete"},
		{"no chunks without --chunks", v.Chunks == nil, true},
	}
	for _, c := range checks {
		if fmt.Sprint(c.got) != fmt.Sprint(c.want) {
			t.Errorf("%s = %v, want %v", c.name, c.got, c.want)
		}
	}

	// Text output, for the last call by default.
	out.Reset()
	if err := showCmd(&out, showOptions{captureOptions: captureOptions{Dir: dir}}); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"call call-b", "messages 4: system 1, user 1, assistant 1, tool 1",
		"shaped 1, raw 0", "8 chunks in 10 upstream events", "largest gap 2.01s", "[reasoning] Both fixes",
		`tool call [0] c1 write({"path":"a.go"})`, "end: complete"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("show output lacks %q:\n%s", want, out.String())
		}
	}
	if err := showCmd(&out, showOptions{captureOptions: captureOptions{Dir: dir}, Call: "nope"}); err == nil {
		t.Error("show of a missing call succeeded")
	}
}

func TestTailAndReadCmd(t *testing.T) {
	w, dir := openCaptureTest(t, capture.Options{})
	writeCall(t, w, "call-a", t0)
	mustFlush(t, w)

	var out bytes.Buffer
	if err := tailCmd(context.Background(), &out, tailOptions{captureOptions: captureOptions{Dir: dir}, N: 3}); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != 3 || !strings.Contains(lines[2], "end") || !strings.Contains(lines[2], "complete") {
		t.Fatalf("tail -n 3:\n%s", out.String())
	}
	if strings.Contains(out.String(), "TESTSECRET") {
		t.Error("secret in tail output")
	}

	// JSON: the request's position leads read --from to the same record.
	out.Reset()
	err := tailCmd(context.Background(), &out, tailOptions{captureOptions: captureOptions{Dir: dir, JSON: true}, N: 1, Kinds: []capture.Kind{capture.KindRequest}})
	if err != nil {
		t.Fatal(err)
	}
	var req recordJSON
	if err := json.Unmarshal(out.Bytes(), &req); err != nil || req.Kind != "request" || req.Data == nil || !strings.Contains(*req.Data, `"messages"`) ||
		len(req.Headers) != 2 || req.Headers[0].Name != "Authorization" || strings.Contains(req.Headers[0].Value, "TESTSECRET") {
		t.Fatalf("tail --json: %v %s", err, out.String())
	}
	pos, err := capture.ParsePos(req.Pos)
	if err != nil {
		t.Fatal(err)
	}
	out.Reset()
	if err := readCmd(&out, readOptions{captureOptions: captureOptions{Dir: dir, JSON: true}, From: pos, Limit: 2}); err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(&out)
	var kinds, nexts []string
	for sc.Scan() {
		var m map[string]any
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
			t.Fatal(err)
		}
		kinds = append(kinds, fmt.Sprint(m["kind"]))
		nexts = append(nexts, fmt.Sprint(m["next"]))
	}
	if strings.Join(kinds, ",") != "request,response" {
		t.Errorf("read --from %s: %v", pos, kinds)
	}
	// The last record's next continues the read where it stopped.
	next, err := capture.ParsePos(nexts[1])
	if err != nil {
		t.Fatal(err)
	}
	out.Reset()
	if err := readCmd(&out, readOptions{captureOptions: captureOptions{Dir: dir, JSON: true}, From: next, Limit: 1}); err != nil {
		t.Fatal(err)
	}
	var ev recordJSON
	if err := json.Unmarshal(out.Bytes(), &ev); err != nil || ev.Kind != "event" || ev.Seq != 0 {
		t.Errorf("read from next %s: %v %s", next, err, out.String())
	}
}

func TestTailFollow(t *testing.T) {
	w, dir := openCaptureTest(t, capture.Options{FlushInterval: 5 * time.Millisecond})
	enqueue(t, w, capture.Record{Kind: capture.KindNote, Call: "before", Data: []byte(`{}`)})
	mustFlush(t, w)
	ctx, cancel := context.WithCancel(context.Background())
	pr := &syncBuffer{}
	done := make(chan error, 1)
	go func() {
		done <- tailCmd(ctx, pr, tailOptions{captureOptions: captureOptions{Dir: dir}, N: 5, Follow: true, Kinds: []capture.Kind{capture.KindNote}})
	}()
	time.Sleep(50 * time.Millisecond)
	enqueue(t, w, capture.Record{Kind: capture.KindEvent, Call: "skipped", Data: []byte("data: x\n\n")})
	enqueue(t, w, capture.Record{Kind: capture.KindNote, Call: "after", Data: []byte(`{}`)})
	mustFlush(t, w)
	deadline := time.Now().Add(5 * time.Second)
	for !strings.Contains(pr.String(), "after") && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	got := pr.String()
	if strings.Count(got, "before") != 1 || strings.Count(got, "after") != 1 || strings.Contains(got, "skipped") {
		t.Errorf("tail -f output:\n%s", got)
	}
}

func TestStatsCmd(t *testing.T) {
	w, dir := openCaptureTest(t, capture.Options{})
	writeCall(t, w, "call-a", t0)
	writeCall(t, w, "call-b", t0.Add(time.Minute))
	enqueue(t, w, capture.Record{Kind: capture.KindRequest, Call: "call-c", Route: "deepseek", Model: "deepseek-reasoner", ReasoningShaped: 179, ReasoningRaw: 12, Data: []byte(`{"messages":[]}`)})
	enqueue(t, w, capture.Record{Kind: capture.KindEnd, Call: "call-c", Outcome: "client_cancelled"})
	enqueue(t, w, capture.Record{Kind: capture.KindDrops, DroppedCount: 3})
	mustFlush(t, w)

	var out bytes.Buffer
	if err := statsCmd(&out, statsOptions{captureOptions: captureOptions{Dir: dir, JSON: true}}); err != nil {
		t.Fatal(err)
	}
	var st capture.Stats
	if err := json.Unmarshal(out.Bytes(), &st); err != nil || !bytes.HasSuffix(bytes.TrimSpace(out.Bytes()), []byte("}")) || bytes.Count(out.Bytes(), []byte("\n")) != 1 {
		t.Fatal(err)
	}
	if len(st.Reasoning) != 1 || st.Reasoning[0].Shaped != 181 || st.Reasoning[0].Raw != 12 || st.Reasoning[0].Requests != 3 {
		t.Errorf("reasoning: %+v", st.Reasoning)
	}
	if st.Chunks != (capture.ChunkStats{Calls: 2, Min: 10, Median: 10, Max: 10}) {
		t.Errorf("chunks: %+v", st.Chunks)
	}
	if st.Outcomes["complete"] != 2 || st.Outcomes["client_cancelled"] != 1 || st.Dropped != 3 {
		t.Errorf("outcomes %v dropped %d", st.Outcomes, st.Dropped)
	}
	if st.BytesOnDisk == 0 || st.BytesWire == 0 {
		t.Errorf("bytes: %+v", st)
	}

	// --since: only call-b and what follows (the records written with the
	// current time).
	out.Reset()
	err := statsCmd(&out, statsOptions{captureOptions: captureOptions{Dir: dir, JSON: true}, Since: t0.Add(30 * time.Second)})
	if err != nil {
		t.Fatal(err)
	}
	st = capture.Stats{}
	_ = json.Unmarshal(out.Bytes(), &st)
	if st.Chunks.Calls != 1 || st.Outcomes["complete"] != 1 {
		t.Errorf("since: %+v", st)
	}

	out.Reset()
	if err := statsCmd(&out, statsOptions{captureOptions: captureOptions{Dir: dir}}); err != nil {
		t.Fatal(err)
	}
	text := strings.Join(strings.Fields(out.String()), " ")
	for _, want := range []string{"deepseek deepseek-reasoner 3 0 181 12 93.8", "min 10, median 10, max 10", "client_cancelled 1", "dropped records 3"} {
		if !strings.Contains(text, want) {
			t.Errorf("stats output lacks %q:\n%s", want, out.String())
		}
	}
}

// openCaptureTest opens a capture Writer on a new directory under
// t.TempDir and closes it at the end of the test.
func openCaptureTest(t testing.TB, opts capture.Options) (*capture.Writer, string) {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "capture")
	opts.Dir = dir
	w, err := capture.Open(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = w.Close() })
	return w, dir
}

func enqueue(t testing.TB, w *capture.Writer, r capture.Record) {
	t.Helper()
	if !w.Enqueue(r) {
		t.Fatalf("Enqueue refused (%+v)", w.Stats())
	}
}

func testHeader() http.Header {
	return http.Header{"Content-Type": {"application/json"}, "Authorization": {"Bearer sk-TESTSECRET-0123456789"}}
}

// syncBuffer is a bytes.Buffer safe for one writer and one reader.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func mustFlush(t testing.TB, w *capture.Writer) {
	t.Helper()
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
}

var t0 = time.Date(2026, 10, 13, 12, 0, 0, 0, time.UTC)
