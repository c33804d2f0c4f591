package main

import (
	"bytes"
	"context"
	"net/http"
	"strings"
	"testing"

	"github.com/shaperproxy/shaperproxy/capture"
	"github.com/shaperproxy/shaperproxy/internal/config"
	"github.com/shaperproxy/shaperproxy/internal/demo"
	"github.com/shaperproxy/shaperproxy/internal/fakeupstream"
	"github.com/shaperproxy/shaperproxy/internal/guard"
)

const echoNotice = "Note from the shaperproxy guard"

// failingAgent is an agent whose tool always fails the same way.
func failingAgent(r *rig) *demo.Agent {
	a := &demo.Agent{BaseURL: r.url, Model: "deepseek-reasoner", Client: http.DefaultClient,
		Tools: func(name, args string) string { return "Error: file not found: config.yaml" }}
	a.System("sys")
	return a
}

// pushCalls scripts n identical failing tool calls, then an answer.
func pushCalls(r *rig, n int) {
	for i := 0; i < n; i++ {
		r.up.Push(fakeupstream.Response{Reply: &fakeupstream.Reply{
			Reasoning: "read it", ToolCalls: []fakeupstream.ToolCall{{Name: "read_file", Arguments: `{"path": "config.yaml"}`}},
		}})
	}
	r.up.Push(fakeupstream.Response{Reply: &fakeupstream.Reply{Content: "I could not find the file."}})
}

// noticesIn returns the indexes of the messages carrying the ECHO notice.
func noticesIn(t *testing.T, body []byte) []int {
	var at []int
	for _, m := range mustView(t, body).Messages {
		if strings.Contains(m.Content, echoNotice) {
			if m.Role != "tool" {
				t.Fatalf("notice placed in a %s message", m.Role)
			}
			at = append(at, m.Index)
		}
	}
	return at
}

// TestEchoNotice: three failures of the same call → one notice, on the
// newest failing result; it stays in place without repeating; three new
// failures → a second notice; a restart keeps the acknowledgement.
func TestEchoNotice(t *testing.T) {
	r := newRig(t, nil)
	pushCalls(r, 6)
	a := failingAgent(r)
	if err := a.Turn(context.Background(), "read the config", func(demo.StepReport) {}); err != nil {
		t.Fatal(err)
	}
	reqs := r.up.Requests()
	// Request k (0-based) carries k failed results.
	var counts []int
	for _, rq := range reqs {
		counts = append(counts, len(noticesIn(t, rq.Body)))
	}
	want := []int{0, 0, 0, 1, 1, 1, 2}
	if len(counts) != len(want) {
		t.Fatalf("%d requests", len(counts))
	}
	for i := range want {
		if counts[i] != want[i] {
			t.Fatalf("notices per request = %v, want %v", counts, want)
		}
	}
	// The first notice sits on the third failing result (message 7: sys,
	// user, then assistant/tool pairs) in every later request.
	if at := noticesIn(t, reqs[3].Body); at[0] != 7 {
		t.Fatalf("notice at message %d", at[0])
	}
	if at := noticesIn(t, reqs[6].Body); at[0] != 7 || at[1] != 13 {
		t.Fatalf("notices at %v", at)
	}

	// A restart on the same data directory: the same history gets the
	// same notices back and no new one.
	dir := r.dataDir
	last := a.LastBody()
	r.app.Close()
	r2 := newRig(t, func(c *config.Config) { c.DataDir = dir })
	r2.up.Push(fakeupstream.Response{Reply: &fakeupstream.Reply{Content: "ok"}})
	post(t, r2.url, last)
	got := r2.up.Requests()
	if at := noticesIn(t, got[len(got)-1].Body); len(at) != 2 {
		t.Fatalf("after a restart: notices at %v", at)
	}
}

// TestStallObserve: observe mode changes no byte and records a continuing
// stall once.
func TestStallObserve(t *testing.T) {
	long := strings.Repeat("Let me think about the schema once more. ", 400) // ~16k chars
	run := func(enabled bool) (client [][]byte, upstream [][]byte, notes int) {
		r := newRig(t, func(c *config.Config) {
			c.Guard.Enabled = enabled
			c.Shaping.Enabled = false
		})
		for i := 0; i < 3; i++ {
			r.up.Push(fakeupstream.Response{Reply: &fakeupstream.Reply{Reasoning: long, ToolCalls: []fakeupstream.ToolCall{{Name: "ls", Arguments: `{}`}}}})
		}
		r.up.Push(fakeupstream.Response{Reply: &fakeupstream.Reply{Content: "done"}})
		a := r.agent("sys")
		a.RawBodies = true
		if err := a.Turn(context.Background(), "design the schema", func(demo.StepReport) {}); err != nil {
			t.Fatal(err)
		}
		for _, rq := range r.up.Requests() {
			upstream = append(upstream, rq.Body)
		}
		for _, rec := range records(t, r) {
			if rec.Kind == capture.KindNote && bytes.Contains(rec.Data, []byte("stall")) {
				notes++
			}
		}
		return a.RawResponses, upstream, notes
	}
	c1, u1, n1 := run(true)
	c2, u2, _ := run(false)
	for i := range u1 {
		if !bytes.Equal(u1[i], u2[i]) {
			t.Fatalf("request %d differs with the guard on", i)
		}
	}
	for i := range c1 {
		// Stream ids and timestamps of the fake upstream are counters,
		// equal across the two runs.
		if !bytes.Equal(c1[i], c2[i]) {
			t.Fatalf("response %d differs with the guard on", i)
		}
	}
	if n1 != 1 {
		t.Fatalf("a continuing stall was recorded %d times, want once", n1)
	}
}

// TestStallInterruptStepDown: interrupt with step_down_requests = 2: the
// next two requests carry the lowered effort, the third the original.
func TestStallInterruptStepDown(t *testing.T) {
	r := newRig(t, func(c *config.Config) {
		c.Guard.StallAction = "interrupt"
		c.Guard.StepDownRequests = 2
		c.Guard.StepDownMap = map[string]guard.Lowering{"default": {Path: "reasoning_effort", Values: map[string]string{"max": "high"}}}
		c.Shaping.Enabled = false
	})
	long := strings.Repeat("Hmm, what about the index again? ", 500)
	r.up.Push(fakeupstream.Response{Reply: &fakeupstream.Reply{Reasoning: long, ToolCalls: []fakeupstream.ToolCall{{Name: "ls", Arguments: `{}`}}}})
	for i := 0; i < 3; i++ {
		r.up.Push(fakeupstream.Response{Reply: &fakeupstream.Reply{Reasoning: "ok", ToolCalls: []fakeupstream.ToolCall{{Name: "ls", Arguments: `{"n":` + string(rune('1'+i)) + `}`}}}})
	}
	r.up.Push(fakeupstream.Response{Reply: &fakeupstream.Reply{Content: "done"}})
	a := r.agent("sys")
	a.Effort = "max"
	if err := a.Turn(context.Background(), "tune the index", func(demo.StepReport) {}); err != nil {
		t.Fatal(err)
	}
	var efforts []string
	for _, rq := range r.up.Requests() {
		efforts = append(efforts, effortOf(rq.Body))
	}
	want := []string{"max", "high", "high", "max", "max"}
	if strings.Join(efforts, ",") != strings.Join(want, ",") {
		t.Fatalf("efforts = %v, want %v", efforts, want)
	}
	if !strings.Contains(string(r.up.Requests()[1].Body), "shaperproxy guard") {
		t.Fatal("no interrupt notice in the request after the stall")
	}
}

func effortOf(body []byte) string {
	i := bytes.Index(body, []byte(`"reasoning_effort":"`))
	if i < 0 {
		return ""
	}
	rest := body[i+len(`"reasoning_effort":"`):]
	return string(rest[:bytes.IndexByte(rest, '"')])
}
