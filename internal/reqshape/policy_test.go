package reqshape

import (
	"bytes"
	"context"
	"path/filepath"
	"strings"
	"testing"

	"github.com/shaperproxy/shaperproxy/internal/ledger"
	"github.com/shaperproxy/shaperproxy/internal/profile"
	"github.com/shaperproxy/shaperproxy/proxy"
	"github.com/shaperproxy/shaperproxy/shaping"
	"github.com/tidwall/gjson"
)

// longThought is a reasoning block of about n copies of long's filler,
// each with its own number, so no two blocks are alike.
func longThought(tag string, n int) string {
	var b strings.Builder
	for i := 0; i < n; i++ {
		b.WriteString("Hmm, let me think about " + tag + " once more, step " + string(rune('a'+i%26)) + ". Wait, maybe the file is elsewhere. ")
	}
	return b.String() + "So the plan is to read " + tag + " and fix it."
}

// tools marks a body as declaring tools.
func tools(body []byte) []byte {
	return bytes.Replace(body, []byte(`{"model"`), []byte(`{"tools":[{"type":"function","function":{"name":"ls"}}],"model"`), 1)
}

func cacheAwareRule() shapeRule {
	return shapeRule{Shaping: shaping.Options{MaxChars: 80}, Policy: PolicyCacheAware}
}

func prof(name string) *profile.Profile {
	for _, p := range profile.NewTable(nil, nil).Profiles() {
		if p.Name == name {
			return &p
		}
	}
	panic(name)
}

func reasons(res result) string {
	var out []string
	for _, b := range res.Blocks {
		out = append(out, b.Reason)
	}
	return strings.Join(out, " ")
}

// TestCacheAwareDecisions: what each profile's rendering and prices make
// of the same request: a loop of three steps after an earlier turn.
func TestCacheAwareDecisions(t *testing.T) {
	earlier := longThought("earlier", 20)
	short := long // within reach of max_chars: shaping gains little
	body := history(earlier)
	body = appendMsg(body, []byte(`{"role":"user","content":"next"}`))
	for _, r := range []string{longThought("one", 20), short, "Quick check."} {
		m := setStr([]byte(`{"role":"assistant","content":"","reasoning_content":"","tool_calls":[{"id":"c","type":"function","function":{"name":"ls","arguments":"{}"}}]}`), "reasoning_content", r)
		body = appendMsg(appendMsg(body, m), []byte(`{"role":"tool","tool_call_id":"c","content":"ok"}`))
	}
	tests := []struct {
		profile string
		tools   bool
		policy  Policy
		want    string
	}{
		// Qwen3 self-hosted: the earlier turn is free; rendered blocks have no price to pay with.
		{"qwen3", true, PolicyCacheAware, "free kept kept same"},
		// DeepSeek V4 with tools renders everything; at r = 0.02 only a long block pays.
		{"deepseek-v4", true, PolicyCacheAware, "pays pays kept same"},
		// Without tools V4 renders only the step after the last tool result: everything is free.
		{"deepseek-v4", false, PolicyCacheAware, "free free free same"},
		// Alibaba's r = 0.2 pays for shorter blocks too.
		{"dashscope", true, PolicyCacheAware, "free pays pays same"},
		{"dashscope", true, PolicyFreeOnly, "free kept kept same"},
		// Reasoning the provider wants back unmodified, and an unknown upstream: nothing.
		{"glm-4.7", true, PolicyCacheAware, "frozen frozen frozen frozen"},
		{"unknown", true, PolicyCacheAware, "kept kept kept same"},
	}
	for _, tt := range tests {
		b := body
		if tt.tools {
			b = tools(b)
		}
		rule := cacheAwareRule()
		rule.Policy = tt.policy
		res := shape(view(t, b), rule, nil, inputs{prof: prof(tt.profile)})
		if got := reasons(res); got != tt.want {
			t.Errorf("%s (tools %v, %s): %s, want %s", tt.profile, tt.tools, tt.policy, got, tt.want)
		}
		again := shape(view(t, b), rule, nil, inputs{prof: prof(tt.profile)})
		if !bytes.Equal(again.Body, res.Body) {
			t.Errorf("%s: not deterministic", tt.profile)
		}
	}
}

// TestPays checks the break-even of RENDERING.md §4.2's table: at
// r = 0.02 a 2000→200-token block shaped at its first re-send needs about
// five later requests; at r = 0.2 it pays at once.
func TestPays(t *testing.T) {
	raw, shaped := strings.Repeat("x", 8000), strings.Repeat("y", 800) // 2000 and 200 tokens
	p := profile.Profile{Prices: profile.Prices{Ratio: 0.02}}
	for f, want := range map[int]bool{4: false, 5: true} {
		p.Resends = f
		if got := pays(&p, raw, shaped, 0); got != want {
			t.Errorf("r=0.02, F=%d: pays = %v", f, got)
		}
	}
	p.Prices.Ratio, p.Resends = 0.2, 1
	if !pays(&p, raw, shaped, 0) {
		t.Error("r=0.2: S < r·R should pay at once")
	}
	if pays(&p, raw, shaped, 4000) {
		t.Error("4000 tokens after the block are re-billed: it should not pay")
	}
	p.Prices.Ratio = 0
	if pays(&p, raw, shaped, 0) {
		t.Error("no known ratio must never pay")
	}
}

// call returns a proxy.Call for body on route and conversation.
func call(t *testing.T, body []byte, conversation string) *proxy.Call {
	return &proxy.Call{Route: "ds", Model: "deepseek-v4-flash", View: view(t, body), Conversation: conversation}
}

// TestBreakShapesOnce: a block a rendered-everything upstream keeps (too
// short to pay at its first re-send) goes out raw until a request whose
// prompt breaks before it anyway (here the system prompt changed); then it
// is shaped in that request and in every later one, also after a restart
// (the ledger keeps it).
func TestBreakShapesOnce(t *testing.T) {
	led, err := ledger.Open(filepath.Join(t.TempDir(), "state.db"), ledger.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = led.Close() }()
	cfg := DefaultConfig()
	cfg.MaxChars = 80
	newShaper := func() *Shaper {
		return NewShaper(cfg, Options{State: led, Profiles: profile.NewTable(nil, map[string]string{"ds": "https://api.deepseek.com"})})
	}
	s := newShaper()
	step := long + " Then compare the two."
	base := tools(history(step))
	send := func(s *Shaper, body []byte) []byte {
		out, err := s.TransformRequest(context.Background(), call(t, body, "c1"), body)
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	sent := func(out []byte) string { return gjson.GetBytes(out, "messages.1.reasoning_content").String() }
	if out := send(s, base); sent(out) != step {
		t.Fatalf("first re-send shaped a block that does not pay: %q", sent(out))
	}
	next := appendMsg(base, []byte(`{"role":"user","content":"and now?"}`))
	if out := send(s, next); sent(out) != step {
		t.Fatal("shaped without a break")
	}
	broken := bytes.Replace(next, []byte(`"content":"go"`), []byte(`"content":"go, carefully"`), 1)
	out := send(s, broken)
	if sent(out) == step || len(sent(out)) >= len(step) {
		t.Fatalf("the block after the break went out as %q", sent(out))
	}
	shaped := sent(out)
	later := appendMsg(broken, []byte(`{"role":"assistant","content":"ok","reasoning_content":"fine"}`))
	if got := sent(send(s, later)); got != shaped {
		t.Fatalf("the batched block changed again: %q", got)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	// A restart: the ledger closed (writing what it holds) and opened again.
	if err := led.Close(); err != nil {
		t.Fatal(err)
	}
	if led, err = ledger.Open(led.Path(), ledger.Options{}); err != nil {
		t.Fatal(err)
	}
	restarted := newShaper()
	defer restarted.Close()
	if got := sent(send(restarted, later)); got != shaped {
		t.Fatalf("after a restart the block went out as %q, want the shaped %q", got, shaped)
	}
	other := newShaper()
	defer other.Close()
	if out, _ := other.TransformRequest(context.Background(), call(t, later, "c2"), later); sent(out) != step {
		t.Fatal("another conversation inherited the batch")
	}
}

// TestBreakAt: a request that extends the previous one has no break; a
// changed message or head breaks at it.
func TestBreakAt(t *testing.T) {
	p := prof("deepseek-v4")
	fp := func(body []byte) prints {
		v := view(t, body)
		return fingerprint(v, candsOf(v, cacheAwareRule(), nil), p.Of(v), nil, nil, 0, false)
	}
	a := tools(history(long, long+" x"))
	b := appendMsg(a, []byte(`{"role":"user","content":"more"}`))
	if got := breakAt(fp(a), fp(b)); got != -1 {
		t.Errorf("append-only: break at %d", got)
	}
	if got := breakAt(prints{}, fp(a)); got != -1 {
		t.Errorf("no previous request: break at %d", got)
	}
	c := bytes.Replace(b, []byte(`"ok b"`), []byte(`"ok B"`), 1)
	if got := breakAt(fp(b), fp(c)); got != 4 {
		t.Errorf("changed tool result 4: break at %d", got)
	}
	d := bytes.Replace(b, []byte(`"model":"deepseek-reasoner"`), []byte(`"model":"deepseek-chat"`), 1)
	if got := breakAt(fp(b), fp(d)); got != 0 {
		t.Errorf("changed model: break at %d", got)
	}
	// Re-serialized JSON (key order, spaces) renders the same: no break.
	e := bytes.Replace(b, []byte(`{"role":"tool","tool_call_id":"c","content":"ok a"}`), []byte(`{ "tool_call_id": "c", "role": "tool", "content": "ok a" }`), 1)
	if bytes.Equal(e, b) {
		t.Fatal("test body not changed")
	}
	if got := breakAt(fp(b), fp(e)); got != -1 {
		t.Errorf("re-serialized message: break at %d", got)
	}
}

// TestConfigPolicy: the default is cache-aware; a rule without a policy
// takes the default rule's; an unknown policy is an error naming its key.
func TestConfigPolicy(t *testing.T) {
	c := DefaultConfig()
	if c.Policy != PolicyCacheAware {
		t.Fatalf("default policy %q", c.Policy)
	}
	c.Rules = []RuleConfig{{Route: "a"}, {Route: "b", Policy: PolicyKeepRecent}}
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	rs := c.RuleSet()
	if rs[0].Policy != PolicyCacheAware || rs[1].Policy != PolicyKeepRecent || rs[2].Policy != PolicyCacheAware {
		t.Errorf("policies %q %q %q", rs[0].Policy, rs[1].Policy, rs[2].Policy)
	}
	c.Rules[0].Policy = "thrifty"
	if err := c.Validate(); err == nil || !strings.Contains(err.Error(), "rule[0].policy") {
		t.Errorf("err = %v", err)
	}
}
