package main

import (
	"bytes"
	"context"
	"os"
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
	checkDemo(t, res, out.String())
}

// checkDemo checks what one run of the demo did and printed.
func checkDemo(t *testing.T, res demo.Result, out string) {
	t.Helper()
	if res.Requests != demo.ScriptSteps || res.UpstreamSeen != demo.ScriptSteps {
		t.Errorf("requests = %d, upstream saw %d, want %d", res.Requests, res.UpstreamSeen, demo.ScriptSteps)
	}
	// The review's notice is a user message for deepseek-reasoner (the
	// DeepSeek V4 profile), which the conversation model counts as a turn
	// of its own: one more turn than the script's.
	if res.NewTurns != demo.ScriptTurns || res.Turns != demo.ScriptTurns+1 || res.Conversations != 1 {
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
	// The default cache-aware policy: the agent sends no tools, so the
	// DeepSeek V4 profile renders only the reasoning after the last tool
	// result or user message, and every earlier block longer than
	// max_chars goes out shaped (bytes only, the prompt is unchanged). The
	// script's first two replies (410 and 500 chars) are shaped in requests
	// 2–7 and 3–7, the fifth (295 chars) in requests 6–7; the others are
	// within max_chars: 6 + 5 + 2.
	if res.CapturedShaped != 13 {
		t.Errorf("capture counted %d shaped blocks, want 13", res.CapturedShaped)
	}
	// The sub-agent's requests 4 and 5 carry the one notice (after the
	// third failure; it stays in place in the last request).
	if res.Branches != 2 || res.DeliberateSeen || !res.DeliberateRestored {
		t.Errorf("deliberation: %d branches, call seen by the client %v, restored %v", res.Branches, res.DeliberateSeen, res.DeliberateRestored)
	}
	if res.GuardNotices != 2 {
		t.Errorf("guard notices placed %d times, want 2", res.GuardNotices)
	}
	if strings.Contains(out, "chars omitted") {
		t.Errorf("a marker reached the upstream")
	}
	if !strings.Contains(out, "tool call read_file") {
		t.Errorf("report lacks the tool call:\n%s", out)
	}
}

// TestDemoTwiceOnOneDataDir: a second run on a kept data directory shows
// the review, the guard and the originals lookup again (each run is a
// conversation of its own), and the commands it prints name the directory.
func TestDemoTwiceOnOneDataDir(t *testing.T) {
	dir := t.TempDir()
	for run := 1; run <= 2; run++ {
		var out bytes.Buffer
		res, err := demo.Run(context.Background(), demoOptions(dir, &out))
		if err != nil {
			t.Fatalf("run %d: %v\n%s", run, err, out.String())
		}
		checkDemo(t, res, out.String())
		if want := "shaperproxy capture stats --data-dir " + dir; !strings.Contains(out.String(), want) {
			t.Errorf("run %d does not print %q:\n%s", run, want, out.String())
		}
		if !strings.Contains(out.String(), "the model was told") {
			t.Errorf("run %d does not show the review's notice", run)
		}
	}
}

// TestDemoTemporaryDataPrintsNoPath: the demo prints no command for the
// temporary directory it removes.
func TestDemoTemporaryDataPrintsNoPath(t *testing.T) {
	var out bytes.Buffer
	if _, err := demo.Run(context.Background(), demoOptions("", &out)); err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	text := out.String()
	first, _, _ := strings.Cut(text, "\n")
	_, tmp, _ := strings.Cut(first, "data ")
	tmp, _, _ = strings.Cut(tmp, " (temporary")
	if tmp == "" || !strings.Contains(first, "(temporary, removed at the end)") {
		t.Fatalf("first line: %q", first)
	}
	if strings.Contains(text, "--data-dir "+tmp) {
		t.Errorf("a command names the removed directory %s:\n%s", tmp, text)
	}
	if _, err := os.Stat(tmp); !os.IsNotExist(err) {
		t.Errorf("the temporary directory %s was not removed (%v)", tmp, err)
	}
	if !strings.Contains(text, "shaperproxy demo --data-dir DIR") {
		t.Errorf("no hint on keeping the data:\n%s", text)
	}
}
