package reqshape

import (
	"bytes"
	"context"
	"encoding/json"
	"testing"

	"github.com/shaperproxy/shaperproxy/internal/profile"
	"github.com/shaperproxy/shaperproxy/proxy"
)

// Requests the shaper must send as they came (PROTOCOLS.md rule 2: signed
// reasoning and what comes before it are never changed; a provider that
// asks for reasoning back unmodified gets it so), found by a read of the
// shaper against PROTOCOLS.md; each was shaped before.

var auditThought = longThought("audit", 40) // ~3.6k characters: shaped when allowed

func quoted(s string) string { b, _ := json.Marshal(s); return string(b) }

// shapeVia runs body through a Shaper (the default configuration, or
// keep-recent) on a route to upstream, as the proxy does.
func shapeVia(t *testing.T, body []byte, upstream, model, conv string, keepRecent bool) []byte {
	t.Helper()
	c := DefaultConfig()
	if keepRecent {
		c.Policy = PolicyKeepRecent
	}
	s := NewShaper(c, Options{Profiles: profile.NewTable(nil, map[string]string{"r": upstream})})
	t.Cleanup(func() { _ = s.Close() })
	call := &proxy.Call{Route: "r", Model: model, View: view(t, body), Conversation: conv}
	out, err := s.TransformRequest(context.Background(), call, body)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

const auditCall = `"tool_calls":[{"id":"c1","type":"function","function":{"name":"ls","arguments":"{}"}}]`

func TestSignatureSpellingsKeepHistory(t *testing.T) {
	first := `{"role":"user","content":"go"},{"role":"assistant","content":"","reasoning_content":` + quoted(auditThought) + `,` + auditCall + `},{"role":"tool","tool_call_id":"c1","content":"ok"},`
	for name, signed := range map[string]string{
		"message extra_content (Gemini OpenAI-compatible)": `{"role":"assistant","content":"done","extra_content":{"google":{"thought_signature":"SIG"}}}`,
		"content part extra_content":                       `{"role":"assistant","content":[{"type":"text","text":"done","extra_content":{"google":{"thought_signature":"SIG"}}}]}`,
		"message provider_specific_fields (LiteLLM)":       `{"role":"assistant","content":"done","provider_specific_fields":{"thought_signatures":["SIG"]}}`,
		"tool call provider_specific_fields (LiteLLM)":     `{"role":"assistant","content":"","tool_calls":[{"id":"c2","type":"function","function":{"name":"ls","arguments":"{}"},"provider_specific_fields":{"thought_signature":"SIG"}}]},{"role":"tool","tool_call_id":"c2","content":"ok"}`,
	} {
		body := []byte(`{"model":"deepseek-reasoner","messages":[` + first + signed + `,{"role":"user","content":"more"}]}`)
		if out := shapeVia(t, body, "https://api.deepseek.com", "deepseek-reasoner", "sig", true); !bytes.Equal(out, body) {
			t.Errorf("%s: the reasoning before a signed message was shaped", name)
		}
	}
}

func TestUnknownUpstreamShapesNothingAtABreak(t *testing.T) {
	mk := func(sys string) []byte {
		return []byte(`{"model":"some-model","messages":[{"role":"system","content":"` + sys + `"},{"role":"user","content":"go"},` +
			`{"role":"assistant","content":"","reasoning_content":` + quoted(auditThought) + `,` + auditCall + `},{"role":"tool","tool_call_id":"c1","content":"ok"}]}`)
	}
	c := DefaultConfig()
	s := NewShaper(c, Options{Profiles: profile.NewTable(nil, map[string]string{"r": "https://llm.example.com/v1"})})
	defer s.Close()
	for _, b := range [][]byte{mk("A"), mk("B")} { // the system prompt changes: the prompt breaks
		call := &proxy.Call{Route: "r", Model: "some-model", View: view(t, b), Conversation: "u1"}
		out, err := s.TransformRequest(context.Background(), call, b)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(out, b) {
			t.Fatal("an unknown upstream's reasoning was shaped at a prompt break")
		}
	}
}

func TestPrefillNotShaped(t *testing.T) {
	body := []byte(`{"tools":[{"type":"function","function":{"name":"ls"}}],"model":"deepseek-reasoner","messages":[{"role":"user","content":"go"},` +
		`{"role":"assistant","content":"","reasoning_content":` + quoted(auditThought) + `,"prefix":true}]}`)
	for _, kr := range []bool{false, true} {
		if out := shapeVia(t, body, "https://api.deepseek.com", "deepseek-reasoner", "prefix", kr); !bytes.Equal(out, body) {
			t.Errorf("keep-recent=%v: the prefill the model continues was shaped", kr)
		}
	}
}

func TestKeepRecentLeavesFrozenProfiles(t *testing.T) {
	step := func(r string) string {
		return `{"role":"assistant","content":"","reasoning":` + quoted(r) + `,"reasoning_details":[],` + auditCall + `},{"role":"tool","tool_call_id":"c1","content":"ok"}`
	}
	body := []byte(`{"model":"anthropic/claude-sonnet-4.5","messages":[{"role":"user","content":"go"},` +
		`{"role":"assistant","content":"","reasoning":` + quoted(auditThought) + `,"reasoning_details":[{"type":"reasoning.text","text":"x","signature":"S"}],` + auditCall + `},{"role":"tool","tool_call_id":"c1","content":"ok"},` +
		step(auditThought+" two") + `,` + step(auditThought+" three") + `]}`)
	if out := shapeVia(t, body, "https://openrouter.ai/api/v1", "anthropic/claude-sonnet-4.5", "frozen", true); !bytes.Equal(out, body) {
		t.Error("keep-recent shaped reasoning on a profile that asks for it back unmodified")
	}
}

// TestUnrelatedSignaturesDoNotFreeze: a holder key with an empty thought
// signature, or an unrelated "signature" (an e-mail's), does not stop the
// shaping of the history before it.
func TestUnrelatedSignaturesDoNotFreeze(t *testing.T) {
	first := `{"role":"user","content":"go"},{"role":"assistant","content":"","reasoning_content":` + quoted(auditThought) + `,` + auditCall + `},{"role":"tool","tool_call_id":"c1","content":"ok"},`
	for name, msg := range map[string]string{
		"empty thought_signatures": `{"role":"assistant","content":"done","provider_specific_fields":{"thought_signatures":[]}}`,
		"empty thought_signature":  `{"role":"assistant","content":"done","extra_content":{"google":{"thought_signature":""}}}`,
		"an e-mail's signature":    `{"role":"assistant","content":"done","extra_content":{"email":{"signature":"Best, J."}}}`,
	} {
		body := []byte(`{"model":"deepseek-reasoner","messages":[` + first + msg + `,{"role":"user","content":"more"}]}`)
		if out := shapeVia(t, body, "https://api.deepseek.com", "deepseek-reasoner", "nosig", true); bytes.Equal(out, body) {
			t.Errorf("%s: taken for a signature, the history before it was not shaped", name)
		}
	}
}
