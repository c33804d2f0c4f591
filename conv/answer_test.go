package conv

import (
	"testing"

	"github.com/tidwall/gjson"
)

// lookedUp is what the readers of a non-stream body found with a gjson
// lookup each, before ReadAnswer read it once for all of them: the
// usage watcher's "usage" and "model", and the guard's only choice.
func lookedUp(body []byte) (usage, model gjson.Result, c Choice, ok bool) {
	r := gjson.GetMany(AsString(body), "usage", "model")
	usage, model = r[0], r[1]
	var first gjson.Result
	n := 0
	if choices := gjson.Get(AsString(body), "choices"); choices.IsArray() {
		choices.ForEach(func(_, v gjson.Result) bool {
			n++
			first = v
			return n < 2
		})
	}
	if n == 1 && first.Get("index").Int() == 0 {
		msg := first.Get("message")
		if content := msg.Get("content"); msg.IsObject() && (content.Type == gjson.String || content.Type == gjson.Null) {
			return usage, model, Choice{Reasoning: DeltaReasoning(msg), Content: content.Str}, true
		}
	}
	return usage, model, Choice{}, false
}

// checkAnswer holds ReadAnswer to the lookups on a valid body: the same
// usage (at its place in the body), model and choice.
func checkAnswer(t *testing.T, body []byte) {
	t.Helper()
	a := ReadAnswer(body)
	usage, model, want, wantOK := lookedUp(body)
	if a.Usage.Raw != usage.Raw || a.Usage.Type != usage.Type || a.Model.Raw != model.Raw || a.Model.Type != model.Type {
		t.Fatalf("%q: usage %q model %q, the lookups %q and %q", body, a.Usage.Raw, a.Model.Raw, usage.Raw, model.Raw)
	}
	if u := a.Usage; u.Exists() && AsString(body[u.Index:u.Index+len(u.Raw)]) != u.Raw {
		t.Fatalf("%q: the usage is not at its Index %d", body, u.Index)
	}
	got, ok := a.Choice()
	if ok != wantOK || got.Content != want.Content || got.Reasoning != want.Reasoning {
		t.Fatalf("%q: choice %+v (%v), the lookups %+v (%v)", body, got, ok, want, wantOK)
	}
}

var answerBodies = []string{
	`{"id":"x","model":"deepseek-reasoner","choices":[{"index":0,"message":{"role":"assistant","content":"ok","reasoning_content":"Hmm."},"finish_reason":"stop"}],"usage":{"prompt_tokens":5,"completion_tokens":2}}`,
	"  \n\t{\"model\":\"m\",\"usage\":{\"prompt_tokens\":1},\"choices\":[{\"index\":0,\"message\":{\"content\":null}}]}", // blanks before: the places count from the body's start
	`{"usage":{"a":1},"usage":{"b":2},"model":"first","model":"second","choices":[{"index":0,"message":{"content":"x"}}],"choices":[]}`,
	`{"us\u0061ge":{"escaped":1},"model":7,"choices":[{"message":{"content":"no index"},"index":0,"index":1}]}`,
	`{"choices":[{"index":0,"message":{"content":"x","reasoning":"r","reasoning_content":"rc"}}]}`,
	`{"choices":[{"index":0,"message":{"content":"x","reasoning_content":null,"reasoning":"second field","reasoning":"again"}}]}`,
	`{"choices":[{"index":0,"message":{"role":"assistant"}}]}`,
	`{"choices":[{"index":0,"message":{"content":[{"type":"text","text":"parts"}]}}]}`,
	`{"choices":[{"index":1,"message":{"content":"x"}}]}`,
	`{"choices":[{"index":0,"message":{"content":"a"}},{"index":1,"message":{"content":"b"}}]}`,
	`{"choices":[{"index":0,"message":"not an object"}]}`,
	`{"choices":{"index":0}}`,
	`{"choices":[]}`,
	`{"data":{"usage":{"nested":1}},"usage":null}`,
	`[{"usage":{"in":"an array"}}]`,
	`{}`,
	`"a string"`,
}

// TestReadAnswerAsLookups: one pass finds what the lookups found, on real
// bodies and odd ones (repeated and escaped keys, blanks before the body,
// other shapes of choices).
func TestReadAnswerAsLookups(t *testing.T) {
	for _, b := range answerBodies {
		checkAnswer(t, []byte(b))
	}
	if a := ReadAnswer([]byte(`{"choices":[{},{},{}]}`)); a.Choices != 2 || !a.First.IsObject() {
		t.Fatalf("three choices counted %d (first %q): two at most are looked at", a.Choices, a.First.Raw)
	}
	checkAnswer(t, readTestdata(t, "deepseek-reasoner_tool-call_nonstream.vercel-ai.json"))
	a := ReadAnswer(readTestdata(t, "deepseek-reasoner_tool-call_nonstream.vercel-ai.json"))
	if c, ok := a.Choice(); !ok || c.ReasoningField != "reasoning_content" || c.Reasoning == "" || !a.Usage.IsObject() || a.Model.Str != "deepseek-reasoner" {
		t.Fatalf("the DeepSeek body read as %+v, %v (usage %q, model %q)", c, ok, a.Usage.Raw, a.Model.Str)
	}
}

// TestUsageWatcherAnswer: a whole body's answer comes with its usage, at
// its place in the body; a stream and a body too long to keep whole have
// none.
func TestUsageWatcherAnswer(t *testing.T) {
	body := []byte("  " + answerBodies[0])
	var w UsageWatcher
	w.Body(body[:40])
	w.Body(body[40:])
	if string(w.Raw()) != `{"prompt_tokens":5,"completion_tokens":2}` || w.Model() != "deepseek-reasoner" {
		t.Fatalf("usage %s, model %q", w.Raw(), w.Model())
	}
	a := w.Answer()
	if a == nil {
		t.Fatal("no answer for a whole body")
	}
	if c, ok := a.Choice(); !ok || c.Reasoning != "Hmm." || c.Content != "ok" {
		t.Fatalf("choice %+v, %v", c, ok)
	}
	var s UsageWatcher
	s.Event([]byte(`{"choices":[],"usage":{"prompt_tokens":1}}`))
	if s.Raw() == nil || s.Answer() != nil {
		t.Fatalf("a stream: usage %s, answer %v", s.Raw(), s.Answer())
	}
	var long UsageWatcher
	long.Body([]byte(`{"pad":"`))
	for range 3 * tailBytes / 1024 {
		long.Body(make([]byte, 1024))
	}
	long.Body([]byte(`","usage":{"prompt_tokens":9}}`))
	if string(long.Raw()) != `{"prompt_tokens":9}` || long.Answer() != nil {
		t.Fatalf("a long body: usage %s, answer %v", long.Raw(), long.Answer())
	}
}

// FuzzReadAnswer: on any valid body, one pass finds what the lookups
// found; on any other, it returns.
func FuzzReadAnswer(f *testing.F) {
	for _, b := range answerBodies {
		f.Add([]byte(b))
	}
	f.Add([]byte(`{"choices":[{"index":0,"message":{"content":"x"`))
	f.Fuzz(func(t *testing.T, body []byte) {
		if !ValidJSON(body) {
			a := ReadAnswer(body)
			_, _ = a.Choice()
			return
		}
		checkAnswer(t, body)
	})
}
