package reqshape

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/shaperproxy/shaperproxy/conv"
	"github.com/shaperproxy/shaperproxy/fixtures"
	"github.com/shaperproxy/shaperproxy/shaping"
	"github.com/tidwall/gjson"
)

func view(t testing.TB, body []byte) *conv.Request {
	t.Helper()
	v, err := conv.ParseRequest(body)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// outsideReasoning returns the body with every assistant reasoning value
// cut out, so two bodies can be compared on everything else.
func outsideReasoning(t testing.TB, body []byte) []byte {
	t.Helper()
	v := view(t, body)
	var out []byte
	at := 0
	for _, m := range v.Messages {
		if m.Role == "assistant" && m.ReasoningStart >= 0 {
			out = append(out, body[at:m.ReasoningStart]...)
			at = m.ReasoningEnd
		}
	}
	return append(out, body[at:]...)
}

// TestRealDeepSeekToolLoop: on the recorded DeepSeek tool loop, every
// assistant message that carried reasoning_content still carries it,
// non-empty; every other byte is identical.
func TestRealDeepSeekToolLoop(t *testing.T) {
	exs, err := fixtures.Load("deepseek-v4-flash_tool-loop_reasoning-passback_multiturn.pydantic-ai.vcr.yaml")
	if err != nil {
		t.Fatal(err)
	}
	changed := 0
	for _, ex := range exs {
		in := view(t, ex.RequestBody)
		res := apply(in, shapeRule{Shaping: shaping.Options{MaxChars: 60}, KeepRecent: -1})
		if !json.Valid(res.Body) {
			t.Fatalf("%s: shaped body is not valid JSON", ex.Name)
		}
		out := view(t, res.Body)
		for i, m := range in.Messages {
			o := out.Messages[i]
			if m.HasReasoningKey != o.HasReasoningKey || m.ReasoningField != o.ReasoningField {
				t.Errorf("%s: message %d reasoning key changed", ex.Name, i)
			}
			if m.Reasoning != "" && o.Reasoning == "" {
				t.Errorf("%s: message %d reasoning emptied", ex.Name, i)
			}
			if strings.Contains(o.Reasoning, "[reasoning extract") {
				t.Errorf("%s: marker added", ex.Name)
			}
		}
		if !bytes.Equal(outsideReasoning(t, ex.RequestBody), outsideReasoning(t, res.Body)) {
			t.Errorf("%s: bytes outside the reasoning values changed", ex.Name)
		}
		changed += res.Shaped
	}
	if changed == 0 {
		t.Fatal("nothing was shaped: the test proves nothing")
	}
}

// TestSignedTrafficUntouched: every request carrying signed or encrypted
// reasoning comes out byte-identical, whatever the rule.
func TestSignedTrafficUntouched(t *testing.T) {
	exs, err := fixtures.All()
	if err != nil {
		t.Fatal(err)
	}
	signed := 0
	for _, ex := range exs {
		v, err := conv.ParseRequest(ex.RequestBody)
		if err != nil {
			continue
		}
		if v.LastSigned() < 0 {
			continue
		}
		signed++
		res := apply(v, shapeRule{Shaping: shaping.Options{MaxChars: 20}, KeepRecent: -1, ThinkTags: true})
		if !bytes.Equal(res.Body, ex.RequestBody) || res.Shaped != 0 {
			t.Errorf("%s: signed request changed", ex.Name)
		}
	}
	if signed == 0 {
		t.Fatal("no fixture carried signed reasoning")
	}
}

const long = "Hmm, let me think about this. Wait, the file might not exist. " +
	"Actually I need to look at the directory first. Let me list it. " +
	"So the plan is to list the directory and then read the config file."

func history(reasonings ...string) []byte {
	body := []byte(`{"model":"deepseek-reasoner","messages":[{"role":"user","content":"go"}]}`)
	for i, r := range reasonings {
		m := []byte(`{"role":"assistant","content":"","reasoning_content":"","tool_calls":[{"id":"c","type":"function","function":{"name":"ls","arguments":"{}"}}]}`)
		m = setStr(m, "reasoning_content", r)
		body = appendMsg(body, m)
		body = appendMsg(body, []byte(`{"role":"tool","tool_call_id":"c","content":"ok `+string(rune('a'+i))+`"}`))
	}
	return body
}

func TestKeepRecentAndDeterminism(t *testing.T) {
	body := history(long, long+" One.", long+" Two.")
	rule := shapeRule{Shaping: shaping.Options{MaxChars: 80}}
	a := apply(view(t, body), rule)
	b := apply(view(t, body), rule)
	if !bytes.Equal(a.Body, b.Body) {
		t.Fatal("not deterministic")
	}
	if a.Shaped != 2 || a.Raw != 1 {
		t.Fatalf("shaped %d raw %d, want 2 and 1 (latest step kept)", a.Shaped, a.Raw)
	}
	last := gjson.GetBytes(a.Body, "messages.5.reasoning_content").String()
	if last != long+" Two." {
		t.Errorf("latest step changed: %q", last)
	}
	again := apply(view(t, a.Body), rule)
	if !bytes.Equal(again.Body, a.Body) {
		t.Error("shaping the shaped request changed it (not idempotent)")
	}
	all := apply(view(t, body), shapeRule{Shaping: shaping.Options{MaxChars: 80}, KeepRecent: -1})
	if all.Shaped != 3 {
		t.Errorf("KeepRecent -1 shaped %d", all.Shaped)
	}
}

func TestDropOnlyWhereAllowed(t *testing.T) {
	noTools := []byte(`{"model":"m","messages":[{"role":"user","content":"q"},{"role":"assistant","content":"a","reasoning_content":"` + long + `"},{"role":"user","content":"q2"},{"role":"assistant", "reasoning_content": "r2" , "content":"a2"},{"role":"user","content":"q3"}]}`)
	res := apply(view(t, noTools), shapeRule{Shaping: shaping.Options{Op: shaping.OpDrop}, KeepRecent: -1})
	if !json.Valid(res.Body) || res.Shaped != 2 {
		t.Fatalf("drop: valid=%v shaped=%d body=%s", json.Valid(res.Body), res.Shaped, res.Body)
	}
	if gjson.GetBytes(res.Body, "messages.1.reasoning_content").Exists() || gjson.GetBytes(res.Body, "messages.3.reasoning_content").Exists() {
		t.Fatalf("field not dropped: %s", res.Body)
	}
	if gjson.GetBytes(res.Body, "messages.3.content").String() != "a2" {
		t.Fatalf("neighbour damaged: %s", res.Body)
	}
	// With tool calls the field must stay (DeepSeek/Kimi 400 without it): drop acts as extract.
	withTools := history(long, long)
	res = apply(view(t, withTools), shapeRule{Shaping: shaping.Options{Op: shaping.OpDrop, MaxChars: 80}, KeepRecent: -1})
	for i := 1; i <= 3; i += 2 {
		if r := gjson.GetBytes(res.Body, "messages."+string(rune('0'+i))+".reasoning_content"); r.String() == "" {
			t.Errorf("message %d lost its reasoning in a tool loop", i)
		}
	}
}

// TestDropNeedsNoToolsMember: dropping asks whether the request declares
// tools (profile.HasTools: a top-level "tools" array with a tool in it),
// wherever the member lies; a "tools" key elsewhere (here in metadata)
// declares none.
func TestDropNeedsNoToolsMember(t *testing.T) {
	msgs := `"messages":[{"role":"user","content":"q"},{"role":"assistant","content":"a","reasoning_content":"` + long + `"},{"role":"user","content":"q2"}]`
	rule := shapeRule{Shaping: shaping.Options{Op: shaping.OpDrop, MaxChars: 80}, KeepRecent: -1}
	mention := apply(view(t, []byte(`{"model":"m",`+msgs+`,"metadata":{"tools":"none"}}`)), rule)
	if gjson.GetBytes(mention.Body, "messages.1.reasoning_content").Exists() {
		t.Errorf("a message mentioning tools kept the field from being dropped: %s", mention.Body)
	}
	declared := apply(view(t, []byte(`{"model":"m",`+msgs+`,"tools":[{"type":"function","function":{"name":"f"}}]}`)), rule)
	if r := gjson.GetBytes(declared.Body, "messages.1.reasoning_content"); r.String() == "" || declared.Shaped != 1 {
		t.Errorf("declared tools after the messages: the field must stay, shaped: %s", declared.Body)
	}
}

func TestThinkTagsOptIn(t *testing.T) {
	body := []byte(`{"model":"qwen3","messages":[{"role":"user","content":"q"},{"role":"assistant","content":"<think>` + long + `</think>\n\nThe answer."},{"role":"user","content":"q2"}]}`)
	if res := apply(view(t, body), shapeRule{KeepRecent: -1, Shaping: shaping.Options{MaxChars: 80}}); !bytes.Equal(res.Body, body) {
		t.Fatal("think tags shaped without opt-in")
	}
	res := apply(view(t, body), shapeRule{KeepRecent: -1, ThinkTags: true, Shaping: shaping.Options{MaxChars: 80}})
	c := gjson.GetBytes(res.Body, "messages.1.content").String()
	if res.Shaped != 1 || !strings.HasPrefix(c, "<think>") || !strings.HasSuffix(c, "</think>\n\nThe answer.") || len(c) >= len(long) {
		t.Fatalf("content = %q", c)
	}
}

func TestRulesMatch(t *testing.T) {
	rs := rules{{Route: "openrouter", Shaping: shaping.Options{Op: shaping.OpKeep}}, {Model: "deepseek-*"}}
	if r, ok := rs.Match("openrouter", "deepseek-r1"); !ok || r.Shaping.Op != shaping.OpKeep {
		t.Error("first rule should win")
	}
	if _, ok := rs.Match("default", "deepseek-reasoner"); !ok {
		t.Error("model glob should match")
	}
	if _, ok := rs.Match("default", "gpt-4o"); ok {
		t.Error("no rule should match")
	}
	if err := (rules{{Model: "[bad"}}).Validate(); err == nil {
		t.Error("bad pattern accepted")
	}
}

func FuzzApply(f *testing.F) {
	f.Add(history(long, long+" x"), 40)
	f.Add([]byte(`{"messages":[{"role":"assistant","reasoning":"a. b. c. d so e.","content":"<think>x. y so z.</think>"}]}`), 3)
	f.Fuzz(func(t *testing.T, body []byte, max int) {
		v, err := conv.ParseRequest(body)
		if err != nil {
			return
		}
		res := apply(v, shapeRule{KeepRecent: -1, ThinkTags: true, Shaping: shaping.Options{MaxChars: max%300 + 1}})
		if json.Valid(body) && !json.Valid(res.Body) {
			t.Fatalf("valid body became invalid: %s", res.Body)
		}
		if res.Shaped == 0 && !bytes.Equal(res.Body, body) {
			t.Fatal("body changed with nothing shaped")
		}
		out, err := conv.ParseRequest(res.Body)
		if err != nil {
			t.Fatalf("shaped body no longer parses: %v", err)
		}
		if len(out.Messages) != len(v.Messages) {
			t.Fatal("message count changed")
		}
	})
}
