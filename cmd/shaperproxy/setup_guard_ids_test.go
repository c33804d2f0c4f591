package main

import (
	"context"
	"fmt"
	"testing"

	"github.com/shaperproxy/shaperproxy/internal/demo"
	"github.com/shaperproxy/shaperproxy/internal/fakeupstream"
)

// TestEchoNoticeReusedIDs is TestEchoNotice with Kimi-style call ids: the
// upstream names every step's call "functions.read_file:0". The notices
// come at the same requests as with distinct ids.
func TestEchoNoticeReusedIDs(t *testing.T) {
	r := newRig(t, nil)
	for range 6 {
		r.up.Push(fakeupstream.Response{Reply: &fakeupstream.Reply{
			Reasoning: "read it",
			ToolCalls: []fakeupstream.ToolCall{{ID: "functions.read_file:0", Name: "read_file", Arguments: `{"path": "config.yaml"}`}},
		}})
	}
	r.up.Push(fakeupstream.Response{Reply: &fakeupstream.Reply{Content: "I could not find the file."}})
	a := failingAgent(r)
	if err := a.Turn(context.Background(), "read the config", func(demo.StepReport) {}); err != nil {
		t.Fatal(err)
	}
	var counts []int
	for _, rq := range r.up.Requests() {
		counts = append(counts, len(noticesIn(t, rq.Body)))
	}
	if want := []int{0, 0, 0, 1, 1, 1, 2}; fmt.Sprint(counts) != fmt.Sprint(want) {
		t.Fatalf("notices per request = %v, want %v", counts, want)
	}
}
