package replay

import (
	"testing"

	"github.com/shaperproxy/shaperproxy/conv"
	"github.com/shaperproxy/shaperproxy/internal/accounting"
)

func view(t *testing.T, body string) *conv.Request {
	t.Helper()
	v, err := conv.ParseRequest([]byte(body))
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// TestRestore puts back the reply a message came from, by position and
// only when its text and tool call ids match; a block whose reply is not
// known is counted and left alone.
func TestRestore(t *testing.T) {
	o := origins{}
	o.learn("k", 2, conv.Response{Choices: []conv.Choice{{Reasoning: "Long original \"quoted\" reasoning.", Content: "",
		ToolCalls: []conv.ToolCall{{ID: "c1", Name: "read"}}}}})
	o.learn("k", 4, conv.Response{Choices: []conv.Choice{{Reasoning: "Second original.", Content: "done"}}})
	body := `{"messages":[{"role":"system","content":"s"},{"role":"user","content":"u"},` +
		`{"role":"assistant","content":"","reasoning_content":"Shaped.","tool_calls":[{"id":"c1","type":"function","function":{"name":"read","arguments":"{}"}}]},` +
		`{"role":"tool","tool_call_id":"c1","content":"r"},` +
		`{"role":"assistant","content":"done, and more","reasoning_content":"Other shaped."},` +
		`{"role":"assistant","content":"x","reasoning_content":"No reply known."}]}`
	got, restored, unmatched := o.restore("k", view(t, body))
	want := `{"messages":[{"role":"system","content":"s"},{"role":"user","content":"u"},` +
		`{"role":"assistant","content":"","reasoning_content":"Long original \"quoted\" reasoning.","tool_calls":[{"id":"c1","type":"function","function":{"name":"read","arguments":"{}"}}]},` +
		`{"role":"tool","tool_call_id":"c1","content":"r"},` +
		`{"role":"assistant","content":"done, and more","reasoning_content":"Other shaped."},` +
		`{"role":"assistant","content":"x","reasoning_content":"No reply known."}]}`
	if string(got) != want || restored != 1 || unmatched != 2 {
		t.Errorf("restore = %s, %d restored, %d unmatched", got, restored, unmatched)
	}
	if got, restored, unmatched = o.restore("other", view(t, body)); string(got) != body || restored != 0 || unmatched != 3 {
		t.Errorf("another conversation: %d restored, %d unmatched", restored, unmatched)
	}
}

// TestWhatIfCalibrated moves the reported usage by the simulated
// difference, scaled by reported/simulated prompt tokens.
func TestWhatIfCalibrated(t *testing.T) {
	g := &Group{
		Actual:    accounting.Usage{Prompt: 2000, Hit: 1500, Miss: 500, Output: 70},
		SimSent:   Sim{Prompt: 1000, Hit: 700},
		SimWhatIf: Sim{Prompt: 1400, Hit: 1300},
	}
	if g.Scale() != 2 {
		t.Fatalf("scale %v", g.Scale())
	}
	// hits +600 ×2, misses (100 − 300) ×2.
	w := g.WhatIf()
	if w.Hit != 2700 || w.Miss != 100 || w.Prompt != 2800 || w.Output != 70 {
		t.Errorf("what-if %+v", w)
	}
	g.SimWhatIf = Sim{} // hits −700 ×2, misses −300 ×2: below zero
	if w := g.WhatIf(); w.Hit != 100 || w.Miss != 0 {
		t.Errorf("clamped at zero: %+v", w)
	}
}
