package guard

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/shaperproxy/shaperproxy/conv"
)

// hist builds a chat completions body message by message.
type hist struct {
	msgs []string
}

// tc is a tool call for hist.assistant.
type tc struct {
	id, name, args string
}

func q(s string) string {
	b, err := json.Marshal(s)
	if err != nil {
		panic(err)
	}
	return string(b)
}

func (h *hist) raw(m string) *hist { h.msgs = append(h.msgs, m); return h }

func (h *hist) system(text string) *hist {
	return h.raw(`{"role":"system","content":` + q(text) + `}`)
}

func (h *hist) user(text string) *hist {
	return h.raw(`{"role":"user","content":` + q(text) + `}`)
}

// assistant adds an assistant message with reasoning_content and calls.
func (h *hist) assistant(reasoning string, calls ...tc) *hist {
	var b strings.Builder
	b.WriteString(`{"role":"assistant","content":"","reasoning_content":` + q(reasoning))
	if len(calls) > 0 {
		b.WriteString(`,"tool_calls":[`)
		for i, c := range calls {
			if i > 0 {
				b.WriteByte(',')
			}
			b.WriteString(`{"id":` + q(c.id) + `,"type":"function","function":{"name":` + q(c.name) + `,"arguments":` + q(c.args) + `}}`)
		}
		b.WriteByte(']')
	}
	b.WriteByte('}')
	return h.raw(b.String())
}

func (h *hist) tool(id, content string) *hist {
	return h.raw(`{"role":"tool","tool_call_id":` + q(id) + `,"content":` + q(content) + `}`)
}

func (h *hist) body() []byte {
	return []byte(`{"model":"deepseek-chat","reasoning_effort":"max","messages":[` + strings.Join(h.msgs, ",") + `],"stream":true}`)
}

func (h *hist) req(t testing.TB) *conv.Request { return mustParse(t, h.body()) }

func mustParse(t testing.TB, body []byte) *conv.Request {
	t.Helper()
	r, err := conv.ParseRequest(body)
	if err != nil {
		t.Fatalf("parse: %v\n%s", err, body)
	}
	return r
}

func mustGuard(t testing.TB, mod func(*Config)) *Guard {
	t.Helper()
	c := DefaultConfig()
	if mod != nil {
		mod(&c)
	}
	g, err := New(c)
	if err != nil {
		t.Fatal(err)
	}
	return g
}

const failOut = "Error: no such file or directory"
const okOut = "package main\n"

// failingLoop returns a history where the same call fails n times in a
// row, each in its own step.
func failingLoop(n int) *hist {
	h := (&hist{}).system("You are an agent.").user("fix the build")
	for i := range n {
		id := fmt.Sprintf("call_%d", i)
		h.assistant("try again", tc{id, "read_file", `{"path":"main.go"}`}).tool(id, failOut)
	}
	return h
}
