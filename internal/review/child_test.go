package review

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/shaperproxy/shaperproxy/conv"
	"github.com/shaperproxy/shaperproxy/fixtures"
	"github.com/tidwall/gjson"
)

// checkSeed asserts that the child's messages start with the primary's
// messages before the open turn, byte for byte, and that the child body is
// the primary body up to the end of the seed when "messages" comes before
// every removed key.
func checkSeed(t *testing.T, primary *conv.Request, child []byte, wantPrefix bool) {
	t.Helper()
	open, _ := primary.OpenTurn()
	creq := mustParse(t, child)
	if len(creq.Messages) != open.Start+1 {
		t.Fatalf("child has %d messages, want the %d seed messages and the snapshot", len(creq.Messages), open.Start)
	}
	for i := range open.Start {
		if got, want := raw(creq, i), raw(primary, i); got != want {
			t.Errorf("seed message %d:\n got %s\nwant %s", i, got, want)
		}
	}
	parr := gjson.GetBytes(primary.Body, "messages")
	carr := gjson.GetBytes(child, "messages")
	seedEnd := primary.Messages[0].Start
	if open.Start > 0 {
		seedEnd = primary.Messages[open.Start-1].End
	}
	n := seedEnd - parr.Index
	if !strings.HasPrefix(carr.Raw, parr.Raw[:n]) {
		t.Errorf("child messages array does not start with the primary's %d seed bytes", n)
	}
	if wantPrefix && !bytes.HasPrefix(child, primary.Body[:seedEnd]) {
		t.Errorf("child body does not start with the primary body up to the seed's end (%d bytes)", seedEnd)
	}
}

// checkMasked asserts that no reasoning of the open turn (nor the draft's)
// is in the child body.
func checkMasked(t *testing.T, primary *conv.Request, d Draft, child []byte) {
	t.Helper()
	open, _ := primary.OpenTurn()
	reasons := []string{d.Reasoning}
	for _, s := range open.Steps {
		reasons = append(reasons, primary.Messages[s.Assistant].Reasoning)
	}
	for _, r := range reasons {
		if r == "" {
			continue
		}
		if bytes.Contains(child, []byte(r)) || bytes.Contains(child, []byte(strings.Trim(quoteTest(r), `"`))) {
			t.Errorf("child carries reasoning of the open turn: %.60q", r)
		}
	}
}

// checkChildKeys asserts the top-level keys of a child body.
func checkChildKeys(t *testing.T, child []byte, format Format) {
	t.Helper()
	for _, k := range []string{"tools", "tool_choice", "parallel_tool_calls", "stream_options", "n", "functions", "function_call"} {
		if gjson.GetBytes(child, k).Exists() {
			t.Errorf("child has %q", k)
		}
	}
	if s := gjson.GetBytes(child, "stream"); s.Raw != "false" {
		t.Errorf("child stream = %s, want false", s.Raw)
	}
	rf := gjson.GetBytes(child, "response_format")
	switch format {
	case FormatNone:
		if rf.Exists() {
			t.Errorf("response_format = %s, want none", rf.Raw)
		}
	case FormatJSONObject:
		if rf.Raw != `{"type":"json_object"}` {
			t.Errorf("response_format = %s", rf.Raw)
		}
	case FormatJSONSchema:
		if rf.Get("type").String() != "json_schema" || rf.Get("json_schema.name").String() != "masked_review" ||
			!rf.Get("json_schema.strict").Bool() || !rf.Get("json_schema.schema.properties.items").Exists() {
			t.Errorf("response_format = %.200s", rf.Raw)
		}
	}
	if !gjson.ValidBytes(child) {
		t.Fatalf("child is not valid json")
	}
}

func TestBuildChildAgentHistory(t *testing.T) {
	primary := mustParse(t, requestBody(agentMessages()))
	for _, format := range []Format{"", FormatJSONObject, FormatJSONSchema, FormatNone} {
		t.Run("format="+string(format), func(t *testing.T) {
			c := mustChild(t, primary, testDraft(), childOptions{ResponseFormat: format})
			checkSeed(t, primary, c.Body, true)
			checkMasked(t, primary, testDraft(), c.Body)
			checkChildKeys(t, c.Body, cmp(format, FormatJSONObject))
			snap := snapshotText(t, c.Body)
			for _, want := range []string{
				// the task first, then the snapshot
				"Automatic masked review", "reasoning is hidden on purpose", "may be wrong", "no_update",
				// inputs by source
				"input from user (message 3):\nFix the failing test in calc_test.go.",
				"input from system (message 6):\nReminder: the CI runs go vet too.",
				"input from user (message 10):\nAlso update the README",
				// visible text as claims, tool calls with arguments, results
				"the actor's claims", "Let me read the test.", "Add subtracts; fixing it.",
				`read_file (id "call_1"`, `{"path":"calc_test.go"}`,
				`edit_file (id "call_2"`, `{"path":"calc.go","old":"a - b","new":"a + b"}`, `run_tests (id "call_3"`,
				`tool result for call id "call_3" (run_tests)`, "ERROR: vet: calc.go:3: unreachable code",
				"the draft it is about to end the turn with", "Done: the test passes now.",
			} {
				if !strings.Contains(snap, want) {
					t.Errorf("snapshot lacks %q", want)
				}
			}
			if i, j := strings.Index(snap, "Automatic masked review"), strings.Index(snap, "=== SNAPSHOT"); i != 0 || j < 0 {
				t.Errorf("task at %d, snapshot at %d: want the task first", i, j)
			}
			if strings.Contains(snap, "What does calc.go do?") {
				t.Error("the snapshot repeats the seed")
			}
			if !bytes.Contains(c.Body, []byte(seedReasoning)) {
				t.Error("the seed lost its reasoning")
			}
			if got := gjson.GetBytes(c.Body, "thinking").Raw; got != `{"type":"enabled"}` {
				t.Errorf("thinking = %s, want the primary's", got)
			}
			if got := gjson.GetBytes(c.Body, "temperature").Raw; got != "0.2" {
				t.Errorf("temperature = %s", got)
			}
			st := c.Stats
			if st.SeedMessages != 3 || st.ReasoningMasked != 3 || st.ChildBytes != len(c.Body) || st.PrimaryBytes != len(primary.Body) {
				t.Errorf("stats %+v", st)
			}
		})
	}
}

func cmp[T ~string](s, def T) T {
	if s == "" {
		return def
	}
	return s
}

func TestBuildChildActionOnly(t *testing.T) {
	primary := mustParse(t, requestBody(agentMessages()))
	c := mustChild(t, primary, testDraft(), childOptions{Mask: MaskActionOnly})
	checkSeed(t, primary, c.Body, true)
	checkMasked(t, primary, testDraft(), c.Body)
	snap := snapshotText(t, c.Body)
	snap = snap[strings.Index(snap, "=== SNAPSHOT"):] // the task mentions "visible text" too
	for _, gone := range []string{"Let me read the test.", "Add subtracts; fixing it.", "Done: the test passes now.", "visible text"} {
		if strings.Contains(snap, gone) {
			t.Errorf("action-only snapshot keeps the actor's text %q", gone)
		}
	}
	for _, kept := range []string{`{"path":"calc_test.go"}`, "ERROR: vet", "Fix the failing test", "Also update the README"} {
		if !strings.Contains(snap, kept) {
			t.Errorf("action-only snapshot lacks %q", kept)
		}
	}
	if c.Stats.ProseMasked != 3 {
		t.Errorf("ProseMasked = %d, want 3", c.Stats.ProseMasked)
	}
}

func TestBuildChildKeepsPrimary(t *testing.T) {
	body := requestBody(agentMessages())
	before := bytes.Clone(body)
	primary := mustParse(t, body)
	c := mustChild(t, primary, testDraft(), childOptions{Model: "deepseek-v4-pro", KeepTools: true})
	if !bytes.Equal(body, before) {
		t.Fatal("BuildChild changed the primary body")
	}
	if got := gjson.GetBytes(c.Body, "model").String(); got != "deepseek-v4-pro" {
		t.Errorf("model = %q", got)
	}
	if !gjson.GetBytes(c.Body, "tools").Exists() || gjson.GetBytes(c.Body, "tool_choice").Exists() {
		t.Error("KeepTools: want tools kept and tool_choice removed")
	}
}

// TestBuildChildToolsFirst: with the removed keys before "messages", the
// body prefix moves but the seed elements and the array prefix do not.
func TestBuildChildToolsFirst(t *testing.T) {
	body := []byte(`{"tools":[{"type":"function","function":{"name":"x"}}],"stream":true,"messages":[` + strings.Join(agentMessages(), ",") + `],"model":"m"}`)
	primary := mustParse(t, body)
	c := mustChild(t, primary, testDraft(), childOptions{})
	checkSeed(t, primary, c.Body, false)
	checkChildKeys(t, c.Body, FormatJSONObject)
}

// TestBuildChildFirstTurn: the open turn is the first one; the seed is
// the prelude, or nothing.
func TestBuildChildFirstTurn(t *testing.T) {
	msgs := agentMessages()
	for _, tc := range []struct {
		name string
		msgs []string
		seed int
	}{
		{"prelude", []string{msgs[0], msgs[3], msgs[4], msgs[5]}, 1},
		{"no prelude", []string{msgs[3], msgs[4], msgs[5]}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			primary := mustParse(t, requestBody(tc.msgs))
			c := mustChild(t, primary, testDraft(), childOptions{})
			checkSeed(t, primary, c.Body, true)
			checkMasked(t, primary, testDraft(), c.Body)
			if c.Stats.SeedMessages != tc.seed {
				t.Errorf("seed messages %d, want %d", c.Stats.SeedMessages, tc.seed)
			}
		})
	}
}

func TestBuildChildOversize(t *testing.T) {
	msgs := agentMessages()
	big := strings.Repeat("0123456789", 7000) + "THE-END"
	msgs[9] = msg("role", "tool", "tool_call_id", "call_3", "content", big)
	primary := mustParse(t, requestBody(msgs))
	_, err := buildChild(primary, testDraft(), childOptions{})
	if reason, ok := skipReason(err); !ok || reason != skipOversize {
		t.Fatalf("err = %v, want a skip for oversize", err)
	}
	// With room for it, the whole result is there: never truncated.
	c := mustChild(t, primary, testDraft(), childOptions{MaxSnapshotChars: 100000})
	if !strings.Contains(snapshotText(t, c.Body), big) {
		t.Error("the large tool result was not kept whole")
	}
	if c.Stats.SnapshotChars <= 70000 || c.Stats.SnapshotChars > 100000 {
		t.Errorf("SnapshotChars = %d", c.Stats.SnapshotChars)
	}
}

// imageMessage is a user message with n image parts (fake data URLs).
func imageMessage(n int) string {
	parts := []any{map[string]any{"type": "text", "text": "what is wrong in these screenshots?"}}
	for i := range n {
		parts = append(parts, map[string]any{"type": "image_url", "image_url": map[string]any{"url": fmt.Sprintf("data:image/png;base64,SECRETPIXELS%03d", i)}})
	}
	return msg("role", "user", "content", parts)
}

func TestBuildChildImages(t *testing.T) {
	msgs := agentMessages()
	for _, n := range []int{20, 21} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			m := append(append([]string{}, msgs[:10]...), imageMessage(n))
			primary := mustParse(t, requestBody(m))
			c, err := buildChild(primary, testDraft(), childOptions{})
			if n > defaultMaxImages {
				if reason, ok := skipReason(err); !ok || reason != skipImages {
					t.Fatalf("err = %v, want a skip for images", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			snap := snapshotText(t, c.Body)
			if !strings.Contains(snap, "[image 1: image_url part of message 10]") || !strings.Contains(snap, "[image 20: image_url part of message 10]") {
				t.Error("image references missing")
			}
			// The seed keeps its own bytes; the snapshot's images are references only.
			if strings.Contains(snap, "SECRETPIXELS") {
				t.Error("image bytes copied into the snapshot")
			}
			if c.Stats.Images != n {
				t.Errorf("Images = %d, want %d", c.Stats.Images, n)
			}
		})
	}
}

// TestBuildChildThinkTags: an inline <think> block of the open turn is
// reasoning too.
func TestBuildChildThinkTags(t *testing.T) {
	msgs := agentMessages()
	msgs[7] = msg("role", "assistant", "content", "<think>INLINE-THINK-SECRET</think>Add subtracts; fixing it.",
		"tool_calls", []any{call("call_2", "edit_file", "{}"), call("call_3", "run_tests", "{}")})
	primary := mustParse(t, requestBody(msgs))
	d := Draft{Content: "<think>DRAFT-THINK-SECRET</think>\nDone."}
	c := mustChild(t, primary, d, childOptions{})
	if bytes.Contains(c.Body, []byte("THINK-SECRET")) {
		t.Error("inline think block reached the child")
	}
	if !strings.Contains(snapshotText(t, c.Body), "Add subtracts; fixing it.") {
		t.Error("the text after </think> was lost")
	}
}

func TestBuildChildSkips(t *testing.T) {
	noUser := mustParse(t, []byte(`{"model":"m","messages":[{"role":"system","content":"s"}]}`))
	if reason, _ := skipReason(errOf(buildChild(noUser, testDraft(), childOptions{}))); reason != skipNoTurn {
		t.Errorf("no user: reason %q", reason)
	}
	dup := mustParse(t, []byte(`{"model":"m","model":"n","messages":[{"role":"user","content":"u"}]}`))
	if reason, _ := skipReason(errOf(buildChild(dup, testDraft(), childOptions{}))); reason != skipDuplicateKeys {
		t.Errorf("duplicate keys: reason %q", reason)
	}
	ok := mustParse(t, requestBody(agentMessages()))
	err := errOf(buildChild(ok, testDraft(), childOptions{Mask: "everything"}))
	if _, skip := skipReason(err); err == nil || skip {
		t.Errorf("bad mask: err %v, want a non-skip error", err)
	}
	var se *skipError
	if errors.As(err, &se) {
		t.Error("bad options reported as a skip")
	}
}

func errOf(_ child, err error) error { return err }

// TestBuildChildFixture runs BuildChild on real DeepSeek traffic: the last
// request of a tool loop and the turn-ending response it got.
func TestBuildChildFixture(t *testing.T) {
	exs, err := fixtures.Load("deepseek-v4-flash_tool-loop_reasoning-passback_multiturn.pydantic-ai.vcr.yaml")
	if err != nil {
		t.Fatal(err)
	}
	ex := exs[len(exs)-1]
	a := conv.NewAssembler()
	if err := a.AddBody(ex.ResponseBody); err != nil {
		t.Fatal(err)
	}
	choice := a.Response().Choices[0]
	if choice.FinishReason != "stop" || len(choice.ToolCalls) > 0 {
		t.Fatalf("fixture's last response is not a turn end: %+v", choice)
	}
	draft := DraftOf(choice)
	primary := mustParse(t, ex.RequestBody)
	for _, mask := range []Mask{MaskReasoningOnly, MaskActionOnly} {
		t.Run(string(mask), func(t *testing.T) {
			c := mustChild(t, primary, draft, childOptions{Mask: mask})
			checkSeed(t, primary, c.Body, true)
			checkMasked(t, primary, draft, c.Body)
			checkChildKeys(t, c.Body, FormatJSONObject)
			snap := snapshotText(t, c.Body)
			for _, want := range []string{"My guess is 4", `load_capability (id "call_00_sXqYgMESDht75NCLLZtt9804"`, `{\"id\": \"DICE_ROLL\"}`, "search_tools", "get_player_name", "roll_dice", "Anne", `"discovered_tools"`} {
				w := want
				if strings.Contains(w, `\"`) {
					w = strings.ReplaceAll(w, `\"`, `"`)
				}
				if !strings.Contains(snap, w) {
					t.Errorf("snapshot lacks %q", w)
				}
			}
			visible := []string{"Let me load the dice rolling capability!", "Congratulations, Anne!"}
			for _, v := range visible {
				if got := strings.Contains(snap, v); got != (mask == MaskReasoningOnly) {
					t.Errorf("%s: visible text %q present = %v", mask, v, got)
				}
			}
			if c.Stats.SeedMessages != 2 {
				t.Errorf("seed messages %d, want the 2 system messages", c.Stats.SeedMessages)
			}
			t.Logf("%s: primary %d bytes, child %d bytes (seed %d bytes), snapshot %d chars, %d reasoning blocks masked",
				mask, c.Stats.PrimaryBytes, c.Stats.ChildBytes, c.Stats.SeedBytes, c.Stats.SnapshotChars, c.Stats.ReasoningMasked)
		})
	}
}
