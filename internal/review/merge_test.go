package review

import (
	"bytes"
	"strings"
	"testing"

	"github.com/shaperproxy/shaperproxy/conv"
	"github.com/shaperproxy/shaperproxy/internal/fakeupstream"
	"github.com/shaperproxy/shaperproxy/sse"
	"github.com/tidwall/gjson"
)

// events splits an SSE body into raw events.
func events(tb testing.TB, body []byte) [][]byte {
	tb.Helper()
	r := sse.NewReader(bytes.NewReader(body))
	var out [][]byte
	for {
		ev, err := r.Next()
		if err != nil {
			return out
		}
		out = append(out, bytes.Clone(ev.Raw))
	}
}

// dataOf returns the data payload of a raw event.
func dataOf(tb testing.TB, raw []byte) []byte {
	tb.Helper()
	ev, err := sse.NewReader(bytes.NewReader(raw)).Next()
	if err != nil {
		tb.Fatal(err)
	}
	return bytes.Clone(ev.Data)
}

// streamCase renders a draft stream and its continuation stream the way
// DeepSeek does, with the continuation's id, created and model made
// different from the draft's (a fresh fakeupstream reply would share them).
func streamCase(tb testing.TB, draft, cont fakeupstream.Reply) (draftEvs, contEvs [][]byte) {
	tb.Helper()
	req := requestBody(agentMessages())
	ds := fakeupstream.RenderStream(req, draft)
	d := conv.NewAssembler()
	for _, ev := range events(tb, ds) {
		_ = d.AddChunk(dataOf(tb, ev))
	}
	contReq, err := continuationRequest(req, DraftOf(d.Response().Choices[0]), noticeMessage(testPacket()))
	if err != nil {
		tb.Fatal(err)
	}
	cont.Model = "deepseek-v4-flash-continuation"
	cs := fakeupstream.RenderStream(contReq, cont)
	id := gjson.GetBytes(dataOf(tb, events(tb, ds)[0]), "id").String()
	cs = bytes.ReplaceAll(cs, []byte(`"id":"`+id+`"`), []byte(`"id":"continuation-id"`))
	cs = bytes.ReplaceAll(cs, []byte(`"created":1764664569`), []byte(`"created":1999999999`))
	cs = append([]byte(": keep-alive\n\n"), cs...)
	return events(tb, ds), events(tb, cs)
}

// clientStream is what the client gets: the draft's events up to its
// finish chunk (held back with [DONE]), then the merged continuation.
func clientStream(tb testing.TB, draftEvs, contEvs [][]byte, m *StreamMerger) []byte {
	tb.Helper()
	var out []byte
	for _, ev := range draftEvs[:len(draftEvs)-2] {
		out = append(out, ev...)
	}
	for _, ev := range contEvs {
		b, err := m.Next(ev)
		if err != nil {
			tb.Fatal(err)
		}
		out = append(out, b...)
	}
	return out
}

func assembleStream(tb testing.TB, body []byte) (conv.Response, [][]byte) {
	tb.Helper()
	a := conv.NewAssembler()
	var datas [][]byte
	for _, ev := range events(tb, body) {
		if bytes.HasPrefix(ev, []byte(":")) {
			continue
		}
		data := dataOf(tb, ev)
		if err := a.AddChunk(data); err != nil {
			tb.Fatalf("chunk %s: %v", data, err)
		}
		if string(data) != "[DONE]" {
			datas = append(datas, data)
		}
	}
	return a.Response(), datas
}

func TestStreamMerger(t *testing.T) {
	draft := fakeupstream.Reply{Reasoning: "The tests pass, done.", Content: "Done: the test passes now.", ChunkChars: 5}
	cont := fakeupstream.Reply{Reasoning: "Vet failed; check calc.go line 3.", Content: "Correction: `go vet` fails on calc.go:3; fixing it next.", ChunkChars: 7}
	draftEvs, contEvs := streamCase(t, draft, cont)
	first := dataOf(t, draftEvs[0])
	m, err := newStreamMerger(first, Draft{ReasoningField: "reasoning_content", Reasoning: draft.Reasoning, Content: draft.Content})
	if err != nil {
		t.Fatal(err)
	}
	out := clientStream(t, draftEvs, contEvs, m)
	resp, datas := assembleStream(t, out)
	c := resp.Choices[0]
	if want := MergedContent(draft.Content, cont.Content); c.Content != want {
		t.Errorf("content %q\nwant    %q", c.Content, want)
	}
	if want := draft.Reasoning + reasoningSeparator + cont.Reasoning; c.Reasoning != want {
		t.Errorf("reasoning %q, want %q", c.Reasoning, want)
	}
	if c.FinishReason != "stop" || !resp.Done || len(resp.Choices) != 1 {
		t.Errorf("finish %q, done %v, %d choices", c.FinishReason, resp.Done, len(resp.Choices))
	}
	roles := 0
	for _, d := range datas {
		for _, k := range []string{"id", "created", "model"} {
			if got, want := gjson.GetBytes(d, k).Raw, gjson.GetBytes(first, k).Raw; got != want {
				t.Errorf("chunk %s = %s, want the draft's %s", k, got, want)
			}
		}
		if gjson.GetBytes(d, "choices.0.delta.role").Exists() {
			roles++
		}
	}
	if roles != 1 {
		t.Errorf("%d chunks carry a role, want the draft's first only", roles)
	}
	if !bytes.Contains(out, []byte("\n\n: keep-alive\n\n")) {
		t.Error("keep-alive comment lost")
	}
	// Usage passes as the continuation sent it.
	contUsage := gjson.GetBytes(dataOf(t, contEvs[len(contEvs)-2]), "usage").Raw
	if string(resp.Usage) != contUsage {
		t.Errorf("usage %s, want the continuation's %s", resp.Usage, contUsage)
	}
	// Apart from the rewritten keys, continuation events pass byte for byte.
	fid, fcreated := gjson.GetBytes(first, "id").String(), gjson.GetBytes(first, "created").Raw
	for i, ev := range contEvs[2:] { // after the keep-alive and the role-only chunk
		want := bytes.ReplaceAll(ev, []byte(`"id":"continuation-id"`), []byte(`"id":"`+fid+`"`))
		want = bytes.ReplaceAll(want, []byte(`"created":1999999999`), []byte(`"created":`+fcreated))
		want = bytes.ReplaceAll(want, []byte(`"deepseek-v4-flash-continuation"`), []byte(`"deepseek-reasoner"`))
		if !bytes.Contains(out, want) {
			t.Errorf("continuation event %d not passed as it came:\n%s", i+2, want)
		}
	}
}

func TestStreamMergerSumsUsage(t *testing.T) {
	draftEvs, contEvs := streamCase(t, fakeupstream.Reply{Content: "a"}, fakeupstream.Reply{Content: "b"})
	draftUsage := gjson.GetBytes(dataOf(t, draftEvs[len(draftEvs)-2]), "usage")
	contUsage := gjson.GetBytes(dataOf(t, contEvs[len(contEvs)-2]), "usage")
	m, err := newStreamMerger(dataOf(t, draftEvs[0]), Draft{ReasoningField: "reasoning_content", Content: "a"})
	if err != nil {
		t.Fatal(err)
	}
	m.DraftUsage = []byte(draftUsage.Raw)
	resp, _ := assembleStream(t, clientStream(t, draftEvs, contEvs, m))
	u := gjson.ParseBytes(resp.Usage)
	for _, k := range []string{"prompt_tokens", "completion_tokens", "total_tokens", "prompt_cache_miss_tokens"} {
		if got, want := u.Get(k).Int(), draftUsage.Get(k).Int()+contUsage.Get(k).Int(); got != want || want == 0 {
			t.Errorf("%s = %d, want %d", k, got, want)
		}
	}
	if resp.Choices[0].Content != MergedContent("a", "b") {
		t.Errorf("content %q", resp.Choices[0].Content)
	}
	if resp.Choices[0].Reasoning != "" {
		t.Errorf("reasoning %q: no reasoning separator without reasoning", resp.Choices[0].Reasoning)
	}
}

func TestStreamMergerToolCalls(t *testing.T) {
	cont := fakeupstream.Reply{Reasoning: "r", Content: "Checking vet.", ToolCalls: []fakeupstream.ToolCall{{Name: "run", Arguments: `{"cmd":"go vet ./..."}`}}}
	draftEvs, contEvs := streamCase(t, fakeupstream.Reply{Reasoning: "d", Content: "Done."}, cont)
	m, err := newStreamMerger(dataOf(t, draftEvs[0]), Draft{ReasoningField: "reasoning_content", Reasoning: "d", Content: "Done."})
	if err != nil {
		t.Fatal(err)
	}
	resp, _ := assembleStream(t, clientStream(t, draftEvs, contEvs, m))
	c := resp.Choices[0]
	if c.FinishReason != "tool_calls" || len(c.ToolCalls) != 1 || c.ToolCalls[0].Arguments != `{"cmd":"go vet ./..."}` || c.ToolCalls[0].Name != "run" {
		t.Errorf("choice %+v", c)
	}
	if c.Content != MergedContent("Done.", "Checking vet.") {
		t.Errorf("content %q", c.Content)
	}
}

// TestStreamMergerOpenAIShape: a role-only first chunk with content "",
// usage in a separate chunk with empty choices, CRLF line ends.
func TestStreamMergerOpenAIShape(t *testing.T) {
	first := []byte(`{"id":"chatcmpl-draft","object":"chat.completion.chunk","created":1,"model":"gpt-x","choices":[{"index":0,"delta":{"role":"assistant","content":""},"finish_reason":null}]}`)
	cont := []string{
		"data: {\"id\":\"chatcmpl-cont\",\"object\":\"chat.completion.chunk\",\"created\":2,\"model\":\"gpt-y\",\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"\",\"refusal\":null},\"finish_reason\":null}]}\r\n\r\n",
		"data: {\"id\":\"chatcmpl-cont\",\"object\":\"chat.completion.chunk\",\"created\":2,\"model\":\"gpt-y\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Fixed.\"},\"finish_reason\":null}]}\r\n\r\n",
		"data: {\"id\":\"chatcmpl-cont\",\"object\":\"chat.completion.chunk\",\"created\":2,\"model\":\"gpt-y\",\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}]}\r\n\r\n",
		"data: {\"id\":\"chatcmpl-cont\",\"object\":\"chat.completion.chunk\",\"created\":2,\"model\":\"gpt-y\",\"choices\":[],\"usage\":{\"prompt_tokens\":10,\"completion_tokens\":2,\"total_tokens\":12}}\r\n\r\n",
		"data: [DONE]\r\n\r\n",
	}
	m, err := newStreamMerger(first, Draft{Content: "Done."})
	if err != nil {
		t.Fatal(err)
	}
	out := []byte("data: " + string(first) + "\n\n" + `data: {"id":"chatcmpl-draft","object":"chat.completion.chunk","created":1,"model":"gpt-x","choices":[{"index":0,"delta":{"content":"Done."},"finish_reason":null}]}` + "\n\n")
	for i, ev := range cont {
		b, err := m.Next([]byte(ev))
		if err != nil {
			t.Fatal(err)
		}
		if i == 0 && bytes.Contains(b, []byte("chatcmpl-cont")) {
			t.Error("role-only chunk passed")
		}
		out = append(out, b...)
	}
	resp, _ := assembleStream(t, out)
	if resp.Choices[0].Content != MergedContent("Done.", "Fixed.") || string(resp.Usage) != `{"prompt_tokens":10,"completion_tokens":2,"total_tokens":12}` || !resp.Done {
		t.Errorf("resp %+v usage %s", resp.Choices[0], resp.Usage)
	}
	if bytes.Contains(out, []byte("chatcmpl-cont")) || bytes.Contains(out, []byte("gpt-y")) {
		t.Error("continuation id or model leaked")
	}
	if !bytes.Contains(out, []byte("\"choices\":[],\"usage\"")) || !bytes.Contains(out, []byte("}\r\n\r\n")) {
		t.Error("usage chunk or CRLF framing not passed as it came")
	}
}

func TestWithData(t *testing.T) {
	for _, tc := range []struct{ raw, data, want string }{
		{"data: {\"a\":1}\n\n", `{"a":2}`, "data: {\"a\":2}\n\n"},
		{"data:{\"a\":1}\r\n\r\n", `{"a":2}`, "data:{\"a\":2}\r\n\r\n"},
		{"event: x\ndata: {\"a\":1}\n\n", `{"a":2}`, "event: x\ndata: {\"a\":2}\n\n"},
		{"data: {\"a\":\ndata: 1}\n\n", "{\"a\":\n2}", "data: {\"a\":\ndata: 2}\n\n"},
	} {
		if got := string(withData([]byte(tc.raw), []byte(tc.data))); got != tc.want {
			t.Errorf("withData(%q) = %q, want %q", tc.raw, got, tc.want)
		}
	}
}

func TestMergeBodies(t *testing.T) {
	draftBody := fakeupstream.RenderJSON(fakeupstream.Reply{Reasoning: "The tests pass.", Content: "Done."})
	contBody := fakeupstream.RenderJSON(fakeupstream.Reply{Reasoning: "Vet failed.", Content: "Correction: vet fails.", Model: "other-model"})
	contBody = bytes.Replace(contBody, []byte(`"id":"`), []byte(`"id":"c-`), 1)
	out, err := mergeBodies(draftBody, contBody)
	if err != nil {
		t.Fatal(err)
	}
	a := conv.NewAssembler()
	if err := a.AddBody(out); err != nil {
		t.Fatal(err)
	}
	resp := a.Response()
	c := resp.Choices[0]
	if c.Content != MergedContent("Done.", "Correction: vet fails.") || c.Reasoning != "The tests pass."+reasoningSeparator+"Vet failed." || c.FinishReason != "stop" {
		t.Errorf("choice %+v", c)
	}
	for _, k := range []string{"id", "created", "model", "system_fingerprint"} {
		if got, want := gjson.GetBytes(out, k).Raw, gjson.GetBytes(draftBody, k).Raw; got != want {
			t.Errorf("%s = %s, want the draft's %s", k, got, want)
		}
	}
	du, cu, u := gjson.GetBytes(draftBody, "usage"), gjson.GetBytes(contBody, "usage"), gjson.GetBytes(out, "usage")
	for _, k := range []string{"prompt_tokens", "completion_tokens", "total_tokens", "completion_tokens_details.reasoning_tokens"} {
		if got, want := u.Get(k).Int(), du.Get(k).Int()+cu.Get(k).Int(); got != want {
			t.Errorf("usage %s = %d, want %d", k, got, want)
		}
	}
	if !strings.HasPrefix(string(out), `{"id":"`) || gjson.GetBytes(out, "choices.0.message.tool_calls").Exists() {
		t.Errorf("out %s", out)
	}
}

func TestMergeBodiesToolCalls(t *testing.T) {
	draftBody := fakeupstream.RenderJSON(fakeupstream.Reply{Content: "Done."})
	contBody := fakeupstream.RenderJSON(fakeupstream.Reply{Content: "Let me check.", ToolCalls: []fakeupstream.ToolCall{{Name: "run", Arguments: "{}"}}})
	out, err := mergeBodies(draftBody, contBody)
	if err != nil {
		t.Fatal(err)
	}
	if got := gjson.GetBytes(out, "choices.0.message.tool_calls.0.function.name").String(); got != "run" {
		t.Errorf("tool call %q", got)
	}
	if got := gjson.GetBytes(out, "choices.0.finish_reason").String(); got != "tool_calls" {
		t.Errorf("finish_reason %q", got)
	}
	if _, err := mergeBodies([]byte(`{"choices":[]}`), contBody); err == nil {
		t.Error("draft without choices accepted")
	}
}

func TestSumUsage(t *testing.T) {
	got, err := SumUsage([]byte(`{"prompt_tokens":3,"x":{"y":1},"f":0.5,"only_draft":9}`), []byte(`{"prompt_tokens":4, "x":{"y":2,"z":7},"f":0.5,"s":"a"}`))
	if err != nil {
		t.Fatal(err)
	}
	if want := `{"prompt_tokens":7, "x":{"y":3,"z":7},"f":0.5,"s":"a"}`; string(got) != want {
		t.Errorf("got  %s\nwant %s", got, want)
	}
	if got, _ := SumUsage(nil, []byte(`{"a":1}`)); string(got) != `{"a":1}` {
		t.Errorf("nil draft: %s", got)
	}
}
