package review

import (
	"bytes"
	"strings"
	"testing"

	"github.com/shaperproxy/shaperproxy/internal/profile"
	"github.com/tidwall/gjson"
)

// TestPlaceNotice: each placement gives the continuation request a draft
// and a notice of the right form; a tool pair's call and result share an
// id derived from the turn, and the bytes are the same every time.
func TestPlaceNotice(t *testing.T) {
	const turn = "t:0123456789abcdef0123456789abcdef"
	for _, tt := range []struct {
		pl        profile.Placement
		role      string
		toolCalls int
	}{
		{profile.PlaceSystem, "system", 0},
		{profile.PlaceUser, "user", 0},
		{profile.PlaceToolPair, "tool", 1},
	} {
		d, n := placeNotice(testDraft(), testPacket(), tt.pl, turn)
		d2, n2 := placeNotice(testDraft(), testPacket(), tt.pl, turn)
		if !bytes.Equal(d.Message(), d2.Message()) || !bytes.Equal(n, n2) {
			t.Errorf("%s: not deterministic", tt.pl)
		}
		if got := gjson.GetBytes(n, "role").Str; got != tt.role || !strings.HasPrefix(gjson.GetBytes(n, "content").Str, "Automatic masked review by the proxy") {
			t.Errorf("%s: notice %s", tt.pl, n)
		}
		if len(d.ToolCalls) != tt.toolCalls || d.Content != testDraft().Content || d.Reasoning != testDraft().Reasoning {
			t.Errorf("%s: draft %+v", tt.pl, d)
		}
		if tt.toolCalls == 1 {
			id := d.ToolCalls[0].ID
			if gjson.GetBytes(n, "tool_call_id").Str != id || d.ToolCalls[0].Name != reviewTool || !strings.HasSuffix(id, "_"+turn[2:18]) {
				t.Errorf("tool pair: call %+v, result %s", d.ToolCalls[0], n)
			}
		}
		if len(testDraft().ToolCalls) != 0 {
			t.Fatal("placeNotice changed the caller's draft")
		}
	}
}

// TestRestoreToolPair: a turn revised with a tool-pair notice comes back
// as the draft with its synthetic call (and its reasoning, which a
// tool-call message must keep, even when the client dropped the key), the
// tool result and the continuation.
func TestRestoreToolPair(t *testing.T) {
	draft, notice := placeNotice(testDraft(), testPacket(), profile.PlaceToolPair, "t:abc")
	ins := NewInsertion(draft, notice, contDraft)
	mergedText := MergedContent(testDraft().Content, contDraft.Content)
	for _, withKey := range []bool{true, false} {
		merged := msg("role", "assistant", "content", mergedText)
		if withKey {
			merged = msg("role", "assistant", "content", mergedText, "reasoning_content", "merged")
		}
		req := mustParse(t, laterRequest(merged))
		lookup, _ := lookupOf(ins)
		out, n, err := Restore(req, lookup)
		if err != nil || n != 1 {
			t.Fatalf("restored %d, err %v", n, err)
		}
		got := mustParse(t, out)
		at := len(agentMessages())
		d, tool, c := got.Messages[at], got.Messages[at+1], got.Messages[at+2]
		if len(d.ToolCalls) != 1 || d.ToolCalls[0].Name != reviewTool || d.Reasoning != draftReasoning {
			t.Errorf("withKey %v: draft %+v", withKey, d)
		}
		if tool.Role != "tool" || tool.ToolCallID != d.ToolCalls[0].ID || c.Content != contDraft.Content {
			t.Errorf("withKey %v: tool %+v, continuation %+v", withKey, tool, c)
		}
	}
}

// TestChildToolChoice: the child keeps the primary's tools and sends the
// profile's tool_choice only when there are tools.
func TestChildToolChoice(t *testing.T) {
	primary := mustParse(t, requestBody(agentMessages()))
	c := mustChild(t, primary, testDraft(), childOptions{KeepTools: true, ToolChoice: "none"})
	if !gjson.GetBytes(c.Body, "tools").Exists() || gjson.GetBytes(c.Body, "tool_choice").Str != "none" {
		t.Errorf("child: tools %v, tool_choice %s", gjson.GetBytes(c.Body, "tools").Exists(), gjson.GetBytes(c.Body, "tool_choice").Raw)
	}
	noTools := bytes.Replace(requestBody(agentMessages()), []byte(`"tools":[{"type":"function","function":{"name":"read_file","parameters":{"type":"object"}}}],`), nil, 1)
	c = mustChild(t, mustParse(t, noTools), testDraft(), childOptions{KeepTools: true, ToolChoice: "none"})
	if gjson.GetBytes(c.Body, "tool_choice").Exists() {
		t.Error("tool_choice sent without tools")
	}
}
