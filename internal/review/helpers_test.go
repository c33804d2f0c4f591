package review

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/shaperproxy/shaperproxy/conv"
	"github.com/tidwall/gjson"
)

// Reasoning texts of the scripted agent history. The seed's must reach the
// child byte for byte; the open turn's must not reach it at all.
const (
	seedReasoning  = "SEED-REASONING: the user asked what calc.go does; read it."
	openReasoning1 = "OPEN-REASONING-1: the failing test is probably TestAdd, read it first."
	openReasoning2 = "OPEN-REASONING-2: Add subtracts, so flip the sign and rerun the tests."
	draftReasoning = "DRAFT-REASONING: tests pass, so I am done; no need to check the docs."
)

// msg renders a message object with keys in the order given (k, v pairs).
func msg(kv ...any) string {
	var b strings.Builder
	b.WriteByte('{')
	for i := 0; i < len(kv); i += 2 {
		if i > 0 {
			b.WriteByte(',')
		}
		k, _ := json.Marshal(kv[i])
		v, err := json.Marshal(kv[i+1])
		if raw, ok := kv[i+1].(json.RawMessage); ok {
			v, err = raw, nil
		}
		if err != nil {
			panic(err)
		}
		b.Write(k)
		b.WriteByte(':')
		b.Write(v)
	}
	b.WriteByte('}')
	return b.String()
}

// call renders one tool call.
func call(id, name, args string) map[string]any {
	return map[string]any{"id": id, "type": "function", "function": map[string]any{"name": name, "arguments": args}}
}

// agentMessages is a scripted coding-agent history: a prelude, one closed
// turn, and an open turn in a tool loop (parallel calls, an injected system
// message, a user message inside the loop).
func agentMessages() []string {
	return []string{
		msg("role", "system", "content", "You are a coding agent. Use the tools."),
		msg("role", "user", "content", "What does calc.go do?"),
		msg("role", "assistant", "content", "It adds two numbers.", "reasoning_content", seedReasoning),
		msg("role", "user", "content", "Fix the failing test in calc_test.go."),
		msg("role", "assistant", "content", "Let me read the test.", "reasoning_content", openReasoning1,
			"tool_calls", []any{call("call_1", "read_file", `{"path":"calc_test.go"}`)}),
		msg("role", "tool", "tool_call_id", "call_1", "content", "func TestAdd(t *testing.T) { if Add(2, 3) != 5 { t.Fatal() } }"),
		msg("role", "system", "content", "Reminder: the CI runs go vet too."),
		msg("role", "assistant", "content", "Add subtracts; fixing it.", "reasoning_content", openReasoning2,
			"tool_calls", []any{call("call_2", "edit_file", `{"path":"calc.go","old":"a - b","new":"a + b"}`), call("call_3", "run_tests", `{"pkg":"./..."}`)}),
		msg("role", "tool", "tool_call_id", "call_2", "content", "edited calc.go"),
		msg("role", "tool", "tool_call_id", "call_3", "content", "ERROR: vet: calc.go:3: unreachable code\nok calc 0.01s"),
		msg("role", "user", "content", "Also update the README when you are done."),
	}
}

// testDraft is the draft that would end the open turn.
func testDraft() Draft {
	return Draft{ReasoningField: "reasoning_content", Reasoning: draftReasoning, Content: "Done: the test passes now."}
}

// requestBody renders a request: model, then messages (with some
// whitespace, as clients send it), then tools and the stream keys.
func requestBody(msgs []string) []byte {
	return []byte(`{"model":"deepseek-reasoner", "messages": [` + strings.Join(msgs, ",\n  ") + ` ],` +
		`"tools":[{"type":"function","function":{"name":"read_file","parameters":{"type":"object"}}}],` +
		`"tool_choice":"auto","parallel_tool_calls":true,"stream":true,"stream_options":{"include_usage":true},` +
		`"n":1,"functions":[],"function_call":"auto","response_format":{"type":"text"},"temperature":0.2,"thinking":{"type":"enabled"}}`)
}

func mustParse(tb testing.TB, body []byte) *conv.Request {
	tb.Helper()
	req, err := conv.ParseRequest(body)
	if err != nil {
		tb.Fatalf("parse: %v\n%s", err, body)
	}
	return req
}

func mustChild(tb testing.TB, req *conv.Request, d Draft, opts childOptions) child {
	tb.Helper()
	c, err := buildChild(req, d, opts)
	if err != nil {
		tb.Fatalf("BuildChild: %v", err)
	}
	return c
}

// snapshotText returns the content of the child's last message.
func snapshotText(tb testing.TB, child []byte) string {
	tb.Helper()
	last := gjson.GetBytes(child, "messages.@reverse.0")
	if r := last.Get("role").String(); r != "user" {
		tb.Fatalf("last child message has role %q, want user", r)
	}
	return last.Get("content").String()
}

// raw returns the raw bytes of message i of req.
func raw(req *conv.Request, i int) string {
	m := req.Messages[i]
	return string(req.Body[m.Start:m.End])
}

func quoteTest(s string) string { b, _ := json.Marshal(s); return string(b) }

func testToolCalls() []conv.ToolCall {
	return []conv.ToolCall{{ID: "call_9", Type: "function", Name: "search", Arguments: `{"q":"x"}`}}
}
