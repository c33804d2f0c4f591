package guard

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/shaperproxy/shaperproxy/conv"
	"github.com/tidwall/gjson"
)

func TestApplyPlacements(t *testing.T) {
	body := []byte(`{"model":"m",  "messages":[` +
		`{"role":"user","content":"go"},` +
		`{"role":"assistant","content":null,"tool_calls":[{"id":"a","type":"function","function":{"name":"ls","arguments":"{}"}},{"id":"b","type":"function","function":{"name":"ls","arguments":"{}"}},{"id":"c","type":"function","function":{"name":"ls","arguments":"{}"}},{"id":"d","type":"function","function":{"name":"ls","arguments":"{}"}},{"id":"e","type":"function","function":{"name":"ls","arguments":"{}"}}]},` +
		`{"role":"tool","tool_call_id":"a","content":"caf\u00e9 \"x\""},` +
		`{"role":"tool","tool_call_id":"b","content":[{"type":"text","text":"part"}]},` +
		`{"role":"tool","tool_call_id":"c","content":null},` +
		`{"role":"tool","tool_call_id":"d"},` +
		`{"role":"tool","tool_call_id":"e","content":""},` +
		`{"role":"tool","tool_call_id":"f","content":[]}` +
		`],"x":1}`)
	req := mustParse(t, body)
	orig := string(body)
	out, err := applyPlacements(req, []placement{
		{2, "one"}, {3, "two"}, {4, "three"}, {5, "four"}, {6, "five"}, {7, "six"}, {2, "again"},
	})
	if err != nil {
		t.Fatal(err)
	}
	if string(body) != orig {
		t.Fatal("ApplyPlacements changed req.Body")
	}
	got := mustParse(t, out)
	for i, want := range map[int]string{
		2: "café \"x\"\n\none\n\nagain", 3: "part\ntwo", 4: "three", 5: "four", 6: "five", 7: "six",
	} {
		if c := got.Messages[i].Content; c != want {
			t.Errorf("message %d content %q, want %q", i, c, want)
		}
	}
	s := string(out)
	for _, keep := range []string{`{"model":"m",  "messages":[`, `"content":"caf\u00e9 \"x\"\n\none\n\nagain"`, `],"x":1}`,
		`[{"type":"text","text":"part"},{"type":"text","text":"two"}]`, `[{"type":"text","text":"six"}]`} {
		if !strings.Contains(s, keep) {
			t.Errorf("edited body lacks %s:\n%s", keep, s)
		}
	}
	if len(got.Messages[1].ToolCalls) != 5 || got.Messages[0].Content != "go" {
		t.Error("other messages changed")
	}
	if out, err := applyPlacements(req, nil); err != nil || &out[0] != &body[0] {
		t.Error("no placements should return the body itself")
	}
}

func TestApplyPlacementsRefuses(t *testing.T) {
	req := mustParse(t, []byte(`{"messages":[{"role":"assistant","content":"x"},{"role":"tool","content":{"a":1}},{"role":"tool","content":"x","content":"y"}]}`))
	for _, i := range []int{0, 1, 2, 3, -1} {
		out, err := applyPlacements(req, []placement{{i, "n"}})
		if !errors.Is(err, errNotPlaceable) || string(out) != string(req.Body) {
			t.Errorf("message %d: %v", i, err)
		}
	}
}

func TestStepDown(t *testing.T) {
	for _, tc := range []struct {
		name, body string
		l          Lowering
		active     bool
		want       string // "" = unchanged
	}{
		{"deepseek max", `{"model":"deepseek-v4", "reasoning_effort" : "max","messages":[]}`, deepseek, true,
			`{"model":"deepseek-v4", "reasoning_effort" : "high","messages":[]}`},
		{"deepseek high stays", `{"reasoning_effort":"high","messages":[]}`, deepseek, true, ""},
		{"inactive", `{"reasoning_effort":"max","messages":[]}`, deepseek, false, ""},
		{"openai xhigh", `{"messages":[],"reasoning_effort":"xhigh","z":0}`, openai, true, `{"messages":[],"reasoning_effort":"high","z":0}`},
		{"openai medium", `{"reasoning_effort":"medium"}`, openai, true, `{"reasoning_effort":"low"}`},
		{"openai low stays", `{"reasoning_effort":"low"}`, openai, true, ""},
		{"absent", `{"messages":[]}`, openai, true, ""},
		{"not a string", `{"reasoning_effort":3}`, openai, true, ""},
		{"openrouter", `{"reasoning":{"exclude":false,"effort":"high"},"messages":[]}`, openrouter, true,
			`{"reasoning":{"exclude":false,"effort":"medium"},"messages":[]}`},
		{"openrouter max_tokens only", `{"reasoning":{"max_tokens":2000}}`, openrouter, true, `{"reasoning":{"max_tokens":1024}}`},
		{"openrouter max_tokens halved", `{"reasoning": {"max_tokens": 16000, "exclude": true}}`, openrouter, true,
			`{"reasoning": {"max_tokens": 8000, "exclude": true}}`},
		{"anthropic-style budget", `{"thinking":{"type":"enabled","budget_tokens":10000},"max_tokens":16000}`, deepseek, true,
			`{"thinking":{"type":"enabled","budget_tokens":5000},"max_tokens":16000}`},
		{"qwen thinking_budget and effort", `{"reasoning_effort":"max","thinking_budget":4097}`, deepseek, true,
			`{"reasoning_effort":"high","thinking_budget":2048}`},
		{"budget at the floor stays", `{"thinking":{"budget_tokens":1024}}`, openai, true, ""},
		{"budget not a whole number", `{"thinking":{"budget_tokens":2048.5}}`, openai, true, ""},
		{"budget in exponent form", `{"thinking":{"budget_tokens":2e4}}`, openai, true, ""},
		{"budget as a string", `{"thinking_budget":"8000"}`, openai, true, ""},
		{"budget too large", `{"thinking_budget":99999999999999999999}`, openai, true, ""},
		{"repeated budget key", `{"reasoning":{"max_tokens":8000,"max_tokens":8000}}`, openrouter, true, ""},
		{"inactive budget", `{"thinking_budget":8000}`, openai, false, ""},
		{"budgets off", `{"thinking_budget":8000}`, Lowering{Path: "reasoning_effort", Values: map[string]string{"max": "high"}, Budgets: []string{}}, true, ""},
		{"custom budget only", `{"extra":{"thinking_tokens":9000}}`, Lowering{Budgets: []string{"extra.thinking_tokens"}}, true,
			`{"extra":{"thinking_tokens":4500}}`},
		{"repeated key", `{"reasoning_effort":"max","reasoning_effort":"max"}`, deepseek, true, ""},
		{"repeated nested key", `{"reasoning":{"effort":"high","effort":"high"}}`, openrouter, true, ""},
		{"custom", `{"reasoning_effort":"max"}`, Lowering{Path: "reasoning_effort", Values: map[string]string{"max": "medium"}}, true,
			`{"reasoning_effort":"medium"}`},
	} {
		in := []byte(tc.body)
		out, changed := stepDown(in, tc.l, tc.active)
		want := tc.want
		if want == "" {
			want = tc.body
		}
		if string(out) != want || changed != (tc.want != "") || string(in) != tc.body {
			t.Errorf("%s: %s (changed %v), want %s", tc.name, out, changed, want)
		}
	}
}

// TestStepDownWindow runs StepDown on the decisions of an interrupt with
// step_down_requests = 2: lowered, lowered, the client's own value.
func TestStepDownWindow(t *testing.T) {
	g := mustGuard(t, func(c *Config) { c.StallAction = StallInterrupt; c.StepDownRequests = 2 })
	h := (&hist{}).user("go")
	stallStep(h, 20000)
	var st state
	var got []string
	for range 3 {
		req := h.req(t)
		var d decision
		d, st = g.Decide(st, req, g.Fold(req))
		out, _ := stepDown(req.Body, g.Lowering("deepseek", "https://api.deepseek.com"), d.StepDown)
		got = append(got, gjson.GetBytes(out, "reasoning_effort").Str)
		stallStep(h, 10)
	}
	if strings.Join(got, ",") != "high,high,max" {
		t.Fatalf("efforts %v", got)
	}
}

func TestEffort(t *testing.T) {
	for body, want := range map[string]string{
		`{"messages":[],"reasoning_effort":"max"}`:                            "max",
		`{"messages":[],"reasoning":{"effort":"low"}}`:                        "low",
		`{"messages":[],"reasoning":{"effort":"low"},"reasoning_effort":"x"}`: "x",
		`{"messages":[]}`: "",
		`{"messages":[{"role":"user","content":"hi"}],"reasoning_effort":"high"}`: "high",
		`{"reasoning_effort":"low","messages":[],"reasoning_effort":"high"}`:      "high", // the last, as before
		`{"messages":[],"reasoning_effort":5,"reasoning":{"effort":"medium"}}`:    "medium",
		`{"messages":[{"role":"user","content":"x","reasoning_effort":"max"}]}`:   "", // a message's, not the request's
		`{"reasoning":"high","messages":[]}`:                                      "",
	} {
		req, err := conv.ParseRequest([]byte(body))
		if err != nil {
			t.Fatalf("%s: %v", body, err)
		}
		if got := effort(req); got != want {
			t.Errorf("Effort(%s) = %q, want %q", body, got, want)
		}
	}
}

// TestEffortReadsNoHistory: the effort comes from its own members. With
// the history's bytes overwritten after the parse (unclosed brackets), a
// walk of the whole body would stop in the history and miss the effort
// after it.
func TestEffortReadsNoHistory(t *testing.T) {
	body := []byte(`{"messages":[{"role":"user","content":"hi"},{"role":"assistant","content":"hello"}],"reasoning_effort":"high"}`)
	req, err := conv.ParseRequest(body)
	if err != nil {
		t.Fatal(err)
	}
	f, _ := req.Field("messages")
	for i := f.Start + 1; i < f.End-1; i++ {
		body[i] = '['
	}
	if got := effort(req); got != "high" {
		t.Fatalf("effort = %q, want high: the history was read", got)
	}
}

// The default lowerings, as the tests use them.
var (
	deepseek   = defaultLowering("https://api.deepseek.com")
	openrouter = defaultLowering("https://openrouter.ai/api/v1")
	openai     = defaultLowering("https://api.openai.com/v1")
)

func TestDefaultLowering(t *testing.T) {
	for up, want := range map[string]string{
		"https://api.deepseek.com":     `reasoning_effort map[max:high]`,
		"https://openrouter.ai/api/v1": `reasoning.effort map[high:medium medium:low xhigh:high]`,
		"https://api.openai.com":       `reasoning_effort map[high:medium medium:low xhigh:high]`,
		"http://127.0.0.1:8000/v1":     `reasoning_effort map[high:medium medium:low xhigh:high]`,
	} {
		if got := fmt.Sprint(defaultLowering(up).Path, " ", defaultLowering(up).Values); got != want {
			t.Errorf("DefaultLowering(%s) = %s, want %s", up, got, want)
		}
	}
	l := defaultLowering("https://api.deepseek.com")
	l.Values["max"] = "changed"
	if defaultLowering("https://api.deepseek.com").Values["max"] != "high" {
		t.Error("DefaultLowering hands out a shared map")
	}
	g := mustGuard(t, func(c *Config) {
		c.StepDownMap = map[string]Lowering{"ds": {Path: "reasoning_effort", Values: map[string]string{"max": "high"}}}
	})
	if l := g.Lowering("ds", "https://openrouter.ai"); l.Path != "reasoning_effort" {
		t.Errorf("configured lowering not used: %+v", l)
	}
}

// TestAnchorRemembered: a message's anchor is the FNV of its bytes (what
// the stored state keeps across restarts), remembered by the message's
// raw key whatever request carries it; another message gets its own.
func TestAnchorRemembered(t *testing.T) {
	parse := func(body string) *conv.Request {
		t.Helper()
		r, err := conv.ParseRequest([]byte(body))
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	tool := `{"role":"tool","tool_call_id":"a","content":"` + strings.Repeat("output ", 100) + `"}`
	a := parse(`{"messages":[{"role":"user","content":"go"},` + tool + `]}`)
	b := parse(`{"model":"m","messages":[{"role":"user","content":"go on"},` + tool + `,{"role":"user","content":"next"}]}`)
	g, err := New(DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range []*conv.Request{a, a, b} {
		if got, want := g.anchor(r, 1), messageHash(r, 1); got != want {
			t.Fatalf("anchor %x, FNV %x", got, want)
		}
	}
	if n := g.hashes.Len(); n != 1 {
		t.Fatalf("%d anchors remembered for one message, want 1", n)
	}
	if g.anchor(b, 2) != messageHash(b, 2) || g.hashes.Len() != 2 {
		t.Fatalf("another message: %d anchors remembered, want 2", g.hashes.Len())
	}
}

// TestPlaceableByKind: whether a notice can go on a message is read from
// the kind of its content value, with the content not decoded.
func TestPlaceableByKind(t *testing.T) {
	for content, want := range map[string]bool{
		`"text"`: true, `""`: true, `[{"type":"text","text":"p"}]`: true, `[]`: true, `null`: true, ``: true,
		`{"a":1}`: false, `12`: false, `true`: false,
	} {
		m := `{"role":"tool","tool_call_id":"a"`
		if content != "" {
			m += `,"content":` + content
		}
		r, err := conv.ParseRequest([]byte(`{"messages":[{"role":"user","content":"go"},` + m + `}]}`))
		if err != nil {
			t.Fatal(err)
		}
		if got := placeable(r, 1); got != want {
			t.Errorf("content %s: placeable %v, want %v", content, got, want)
		}
	}
}
