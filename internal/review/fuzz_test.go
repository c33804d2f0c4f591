package review

import (
	"bytes"
	"errors"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/shaperproxy/shaperproxy/conv"
	"github.com/shaperproxy/shaperproxy/fixtures"
	"github.com/tidwall/gjson"
)

// FuzzParsePacket: ParsePacketText never panics, and whatever it accepts
// keeps every bound.
func FuzzParsePacket(f *testing.F) {
	for _, s := range []string{
		`{"role":"masked-review","status":"no_update"}`,
		`{"role":"masked-review","status":"update","items":[{"kind":"unknown","certainty":"likely","content":"a"}]}`,
		"```json\n{\"role\":\"masked-review\",\"status\":\"no_update\",\"items\":[]}\n```",
		"```\n```", "```json", `{"role":"masked-review","status":"update","items":[{"kind":"unknown","certainty":"likely","content":"a"},{"kind":"unknown","certainty":"likely","content":"a "}]}`,
		`{"items":{"a":1}}`, `null`, ``, `[]`,
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		p, err := parsePacketText(s)
		if err != nil {
			if !errors.Is(err, errInvalidPacket) {
				t.Fatalf("error %v does not wrap ErrInvalidPacket", err)
			}
			return
		}
		checkPacket(t, p)
		if _, err := parsePacket(completion(s)); err != nil && utf8.ValidString(s) {
			t.Fatalf("accepted as text, rejected in a body: %v", err)
		}
	})
}

func checkPacket(t *testing.T, p Packet) {
	t.Helper()
	if p.Role != packetRole || (p.Status != statusUpdate && p.Status != statusNoUpdate) {
		t.Fatalf("packet %+v", p)
	}
	if (p.Status == statusUpdate) != (len(p.Items) > 0) || len(p.Items) > maxItems {
		t.Fatalf("%s with %d items", p.Status, len(p.Items))
	}
	chars := 0
	for _, it := range p.Items {
		if strings.TrimSpace(it.Content) != it.Content || it.Content == "" {
			t.Fatalf("content %q", it.Content)
		}
		chars += utf8.RuneCountInString(it.Content)
	}
	if chars > maxPacketChars {
		t.Fatalf("%d characters", chars)
	}
}

// FuzzRestore: Restore never panics; with a lookup that matches nothing it
// returns the body unchanged; with one that matches everything, a restored
// body is still a chat request with two more messages per restoration.
func FuzzRestore(f *testing.F) {
	merged := msg("role", "assistant", "content", MergedContent(testDraft().Content, contDraft.Content), "reasoning_content", "r")
	f.Add(laterRequest(merged))
	f.Add(requestBody(agentMessages()))
	f.Add([]byte(`{"messages":[{"role":"assistant","content":[{"type":"text","text":"a` + strings.ReplaceAll(Separator, "\n", `\n`) + `b"}]}]}`))
	f.Add([]byte(`{"messages":[{"role":"assistant","content":"` + strings.ReplaceAll(Separator, "\n", `\n`) + `","tool_calls":[1]},{"role":"assistant","content":null}]}`))
	if exs, err := fixtures.Load("deepseek-v4-flash_tool-loop_reasoning-passback_multiturn.pydantic-ai.vcr.yaml"); err == nil {
		for _, ex := range exs {
			f.Add(ex.RequestBody)
		}
	}
	ins := NewInsertion(testDraft(), noticeMessage(testPacket()), contDraft)
	f.Fuzz(func(t *testing.T, body []byte) {
		req, err := conv.ParseRequest(body)
		if err != nil {
			return
		}
		out, n, _ := Restore(req, func([32]byte) (Insertion, bool) { return Insertion{}, false })
		if n != 0 || !bytes.Equal(out, body) {
			t.Fatalf("no match, yet %d restored", n)
		}
		out, n, _ = Restore(req, func(k [32]byte) (Insertion, bool) { i := ins; i.Key = k; return i, true })
		if n == 0 {
			return
		}
		got, err := conv.ParseRequest(out)
		if err != nil {
			t.Fatalf("restored body is not a chat request: %v\n%s", err, out)
		}
		if len(got.Messages) != len(req.Messages)+2*n {
			t.Fatalf("%d messages after %d restorations of %d", len(got.Messages), n, len(req.Messages))
		}
	})
}

// FuzzBuildChild: BuildChild never panics and its child is valid JSON
// whose messages start with the seed.
func FuzzBuildChild(f *testing.F) {
	f.Add(requestBody(agentMessages()), "draft")
	f.Add([]byte(`{"messages":[{"role":"user","content":[{"type":"image_url"},{"type":"text","text":"x"}]}]}`), "<think>x")
	f.Add([]byte(`{"messages":[ ],"stream":true}`), "")
	f.Fuzz(func(t *testing.T, body []byte, content string) {
		req, err := conv.ParseRequest(body)
		if err != nil {
			return
		}
		c, err := buildChild(req, Draft{Content: content, ReasoningField: "reasoning_content", Reasoning: "hidden"}, childOptions{})
		if err != nil {
			if _, ok := skipReason(err); !ok {
				t.Fatalf("non-skip error: %v", err)
			}
			return
		}
		creq, err := conv.ParseRequest(c.Body)
		if err != nil {
			t.Fatalf("child is not a chat request: %v\n%s", err, c.Body)
		}
		open, _ := req.OpenTurn()
		if len(creq.Messages) != open.Start+1 {
			t.Fatalf("child has %d messages, seed %d", len(creq.Messages), open.Start)
		}
	})
}

// FuzzStreamMerger: Next never panics, on any bytes, and a continuation
// event's data never keeps an id other than the draft's.
func FuzzStreamMerger(f *testing.F) {
	f.Add([]byte("data: {\"id\":\"c\",\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":null}}]}\n\n"))
	f.Add([]byte("data: {\"id\":\"c\",\"choices\":[{\"index\":0,\"delta\":{\"reasoning_content\":\"x\"}}],\"usage\":{\"prompt_tokens\":1}}\r\n\r\n"))
	f.Add([]byte(": keep-alive\n\ndata: [DONE]\n\n"))
	f.Add([]byte("data: {\"a\":\ndata: 1}\n\nevent: x\ndata: {}"))
	f.Fuzz(func(t *testing.T, raw []byte) {
		m, err := newStreamMerger([]byte(`{"id":"draft","created":1,"model":"m","choices":[]}`), Draft{ReasoningField: "reasoning_content", Reasoning: "r"})
		if err != nil {
			t.Fatal(err)
		}
		m.DraftUsage = []byte(`{"prompt_tokens":2}`)
		out, err := m.Next(raw)
		if err != nil {
			return
		}
		for _, ev := range events(t, out) {
			d := dataOf(t, ev)
			if id := gjson.GetBytes(d, "id"); gjson.ValidBytes(d) && id.Exists() && id.Raw != `"draft"` && gjson.ParseBytes(d).IsObject() {
				t.Fatalf("id %s passed: %q", id.Raw, ev)
			}
		}
	})
}
