package main

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/shaperproxy/shaperproxy/internal/demo"
)

func TestDemoRuns(t *testing.T) {
	var out bytes.Buffer
	res, err := demo.Run(context.Background(), demoOptions(t.TempDir(), &out))
	if err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	if res.Requests != demo.ScriptSteps || res.UpstreamSeen != demo.ScriptSteps {
		t.Errorf("requests = %d, upstream saw %d, want %d", res.Requests, res.UpstreamSeen, demo.ScriptSteps)
	}
	if res.NewTurns != demo.ScriptTurns || res.Turns != demo.ScriptTurns || res.Conversations != 1 {
		t.Errorf("turns: new %d, total %d, conversations %d", res.NewTurns, res.Turns, res.Conversations)
	}
	if res.Chunks < 50 {
		t.Errorf("only %d chunks", res.Chunks)
	}
	// The last request carries 7 reasoning blocks (the first turn's answer
	// went out as draft and revision): the latest step is kept, and blocks
	// within max_chars are left as they are by the short-block guard.
	if res.Shaped+res.Raw != 7 || res.Shaped < 3 || !res.LookupOK {
		t.Errorf("shaping: %d shaped, %d raw, lookup ok %v", res.Shaped, res.Raw, res.LookupOK)
	}
	// The agent's 7 streamed calls, and the revision the review streamed.
	if res.CapturedCalls != demo.ScriptSteps+1 {
		t.Errorf("capture holds %d streamed calls, want %d", res.CapturedCalls, demo.ScriptSteps+1)
	}
	if res.Reviews != 2 || res.Revisions != 1 || !res.Restored {
		t.Errorf("review: %d reviews, %d revisions, restored %v", res.Reviews, res.Revisions, res.Restored)
	}
	// Request k of a turn carries the turn's earlier steps; every step but
	// the latest goes out shaped when it is longer than max_chars. The
	// script's first two replies (410 and 500 chars) are shaped in requests
	// 3–7 and 4–7, the fifth (295 chars) in request 7: 5 + 4 + 1.
	if res.CapturedShaped != 10 {
		t.Errorf("capture counted %d shaped blocks, want 10", res.CapturedShaped)
	}
	// The sub-agent's requests 4 and 5 carry the one notice (after the
	// third failure; it stays in place in the last request).
	if res.GuardNotices != 2 {
		t.Errorf("guard notices placed %d times, want 2", res.GuardNotices)
	}
	if strings.Contains(out.String(), "chars omitted") {
		t.Errorf("a marker reached the upstream")
	}
	if !strings.Contains(out.String(), "tool call read_file") {
		t.Errorf("report lacks the tool call:\n%s", out.String())
	}
}
