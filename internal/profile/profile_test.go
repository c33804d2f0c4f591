package profile

import (
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/BurntSushi/toml"
	"github.com/shaperproxy/shaperproxy/conv"
	"github.com/shaperproxy/shaperproxy/internal/render"
)

func TestResolve(t *testing.T) {
	tab := NewTable(nil, map[string]string{
		"deepseek": "https://api.deepseek.com", "or": "https://openrouter.ai/api", "ali": "https://dashscope-intl.aliyuncs.com/compatible-mode",
		"zai": "https://api.z.ai/api/coding/paas/v4", "local": "http://127.0.0.1:8000",
	})
	tests := []struct{ route, model, want string }{
		{"deepseek", "deepseek-reasoner", "deepseek-v4"},
		{"deepseek", "anything-new", "deepseek-v4"},
		{"local", "deepseek-chat", "deepseek-v4"}, // a relay of the DeepSeek API
		{"local", "deepseek-ai/DeepSeek-V4-Flash", "deepseek-v4"},
		{"local", "deepseek-ai/DeepSeek-V3.2-Exp", "deepseek-v3.2"},
		{"local", "deepseek-ai/DeepSeek-V3.1-Terminus", "deepseek-v3.1"},
		{"local", "DeepSeek-V3-0324", "deepseek-v3"},
		{"local", "deepseek-ai/DeepSeek-R1-Distill-Qwen-32B", "deepseek-r1"},
		{"local", "Qwen/QwQ-32B", "qwq"},
		{"local", "Qwen/Qwen3-Coder-30B-A3B-Instruct", "qwen3-coder"},
		{"local", "Qwen/Qwen3-235B-A22B", "qwen3"},
		{"ali", "qwen3-max", "dashscope"},
		{"or", "deepseek/deepseek-v4-flash", "openrouter"}, // the host wins over the model
		{"local", "zai-org/GLM-4.6", "glm-4.6"},
		{"local", "GLM-4.5-Air", "glm-4.6"},
		{"local", "zai-org/GLM-4.7-Flash", "glm-4.7"},
		{"zai", "glm-4.6", "glm-4.7"}, // the Coding Plan endpoint preserves thinking
		{"local", "moonshotai/Kimi-K2-Thinking", "kimi-k2-thinking"},
		{"local", "moonshotai/Kimi-K2-Instruct-0905", "kimi-k2-instruct"},
		{"local", "MiniMaxAI/MiniMax-M2", "minimax-m2"},
		{"local", "openai/gpt-oss-120b", "gpt-oss"},
		{"local", "llama-3.3-70b", "unknown"},
		{"api.deepseek.com", "x", "deepseek-v4"}, // an intercepted host without a route
		{"example.com", "x", "unknown"},
	}
	for _, tt := range tests {
		if got := tab.ForRoute(tt.route, tt.model).Name; got != tt.want {
			t.Errorf("ForRoute(%q, %q) = %s, want %s", tt.route, tt.model, got, tt.want)
		}
	}
}

// TestBuiltinsComplete: every built-in has a source, a notice placement,
// a valid reasoning field and a template that exists when it names one.
func TestBuiltinsComplete(t *testing.T) {
	names := map[string]bool{}
	for _, n := range render.Names() {
		names[n] = true
	}
	for _, p := range append(builtins(), Unknown) {
		if p.Source == "" || p.Family == "" || len(p.Notice) == 0 || p.Field == "" {
			t.Errorf("%s: incomplete: %+v", p.Name, p)
		}
		if p.Template != "" && !names[p.Template] {
			t.Errorf("%s: template %q does not exist", p.Name, p.Template)
		}
		if p.Name != Unknown.Name && len(p.Match) == 0 {
			t.Errorf("%s matches nothing", p.Name)
		}
	}
}

// TestRenderedMatchesTemplates checks every profile that names a template
// against the template itself: for each demo request (and the same
// requests without tools), Rendered(i) is true exactly when message i's
// reasoning text appears in the rendered prompt.
func TestRenderedMatchesTemplates(t *testing.T) {
	dir := filepath.Join("..", "..", "fixtures", "templates", "demo")
	files, _ := filepath.Glob(filepath.Join(dir, "0*.json"))
	checked := 0
	for _, p := range builtins() {
		if p.Template == "" {
			continue
		}
		r, err := render.Named(p.Template)
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range files {
			body, _ := os.ReadFile(f)
			for _, b := range [][]byte{body, withoutTools(t, body)} {
				prompt, err := r.Render(b, render.Options{})
				if err != nil {
					continue // the template refuses this request (gpt-oss and a tool pair): nothing to compare
				}
				req, err := conv.ParseRequest(b)
				if err != nil {
					t.Fatal(err)
				}
				rd := p.Of(req)
				for i, m := range req.Messages {
					if m.Role != "assistant" || m.Reasoning == "" {
						continue
					}
					checked++
					if in := strings.Contains(prompt, m.Reasoning); in != rd.Rendered(i) {
						t.Errorf("%s, %s (tools %v), message %d: profile says rendered=%v, the template %v", p.Name, filepath.Base(f),
							HasTools(req), i, rd.Rendered(i), in)
					}
				}
			}
		}
	}
	if checked < 200 {
		t.Fatalf("only %d blocks checked", checked)
	}
}

func withoutTools(t *testing.T, body []byte) []byte {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(body, &m); err != nil {
		t.Fatal(err)
	}
	delete(m, "tools")
	out, _ := json.Marshal(m)
	return out
}

func TestPrices(t *testing.T) {
	ds := NewTable(nil, nil).Resolve("", "https://api.deepseek.com", "deepseek-chat").Prices
	if r, ok := ds.HitRatio(); !ok || math.Abs(r-0.02) > 1e-9 {
		t.Errorf("DeepSeek ratio = %v %v", r, ok)
	}
	usd, ok := ds.Cost(1_000_000, 1_000_000, 0)
	if !ok || math.Abs(usd-0.153) > 1e-9 {
		t.Errorf("cost = %v %v", usd, ok)
	}
	ali := NewTable(nil, nil).Resolve("", "dashscope.aliyuncs.com", "qwen-plus").Prices
	if _, ok := ali.Cost(1, 1, 1); ok {
		t.Error("DashScope's absolute prices are unknown, Cost must say so")
	}
	if rel, ok := ali.Relative(1000, 100); !ok || math.Abs(rel-300) > 1e-9 {
		t.Errorf("relative = %v %v", rel, ok)
	}
	if _, ok := Unknown.Prices.HitRatio(); ok {
		t.Error("unknown has a ratio")
	}
}

func parse(t *testing.T, text string) Config {
	t.Helper()
	var c struct {
		Profile Config `toml:"profile"`
	}
	if _, err := toml.Decode(text, &c); err != nil {
		t.Fatal(err)
	}
	return c.Profile
}

// TestOverrides: an entry naming a built-in changes it wherever it
// applies; an entry with selectors starts from its base and is tried
// first; unset fields keep the base's values.
func TestOverrides(t *testing.T) {
	c := parse(t, `
[[profile]]
name = "deepseek-v4"
hit_per_m = 0.0028
miss_per_m = 0.14

[[profile]]
name = "gpu-box"
base = "qwen3"
upstream = "10.0.0.7"
ratio = 0.1
notice = ["tool-pair"]

[[profile]]
name = "unknown"
earlier = "dropped"
`)
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	tab := NewTable(c, map[string]string{"gpu": "http://10.0.0.7:8000/v1", "ds": "https://api.deepseek.com"})
	ds := tab.ForRoute("ds", "deepseek-reasoner")
	if ds.Prices.HitPerM != 0.0028 || ds.Prices.MissPerM != 0.14 || ds.Earlier != EarlierKeptWithTools {
		t.Errorf("deepseek override: %+v", ds)
	}
	gpu := tab.ForRoute("gpu", "anything")
	if gpu.Name != "gpu-box" || gpu.Template != "qwen3" || gpu.ReviewNotice() != PlaceToolPair || gpu.Earlier != EarlierDropped {
		t.Errorf("gpu-box: %+v", gpu)
	}
	if r, _ := gpu.Prices.HitRatio(); r != 0.1 {
		t.Errorf("gpu-box ratio %v", r)
	}
	if u := tab.ForRoute("elsewhere.example", "x"); u.Name != "unknown" || u.Earlier != EarlierDropped {
		t.Errorf("unknown override: %+v", u)
	}
	if u := NewTable(nil, nil).ForRoute("elsewhere.example", "x"); u.Earlier != EarlierKept {
		t.Error("an override leaked into another table")
	}
}

func TestValidateNamesTheKey(t *testing.T) {
	tests := []struct{ text, key string }{
		{"[[profile]]\nname = \"mine\"", "profile[0].name"},
		{"[[profile]]\nname = \"qwen3\"\nmodel = \"x\"", "profile[0].name"},
		{"[[profile]]\nname = \"a\"\nmodel = \"x\"\nbase = \"nope\"", "profile[0].base"},
		{"[[profile]]\nname = \"qwen3\"\nearlier = \"sometimes\"", "profile[0].earlier"},
		{"[[profile]]\nname = \"qwen3\"\nfield = \"thoughts\"", "profile[0].field"},
		{"[[profile]]\nname = \"qwen3\"\nnotice = [\"email\"]", "profile[0].notice[0]"},
		{"[[profile]]\nname = \"qwen3\"\nratio = -1.0", "profile[0].ratio"},
		{"[[profile]]\nname = \"qwen3\"\nboundary = \"x\"", "profile[0].boundary"},
		{"[[profile]]\nname = \"a\"\nmodel = \"x\"\n[[profile]]\nname = \"a\"\nmodel = \"y\"", "profile[1].name"},
	}
	for _, tt := range tests {
		err := parse(t, tt.text).Validate()
		if err == nil || !strings.Contains(err.Error(), tt.key) {
			t.Errorf("%q: err = %v, want one naming %s", tt.text, err, tt.key)
		}
	}
}

func TestGlob(t *testing.T) {
	tests := []struct {
		p, s string
		want bool
	}{
		{"", "x", true}, {"*qwen3*", "Qwen/Qwen3-8B", true}, {"qwen3", "qwen3-8b", false},
		{"dashscope*.aliyuncs.com", "dashscope-intl.aliyuncs.com", true}, {"a?c", "abc", true}, {"a?c", "ac", false},
	}
	for _, tt := range tests {
		if got := Glob(tt.p, tt.s); got != tt.want {
			t.Errorf("Glob(%q, %q) = %v", tt.p, tt.s, got)
		}
	}
}

// TestV4GoldenVectors checks the deepseek-v4 profile against DeepSeek's
// own golden encoder outputs (fixtures/templates/deepseek-v4-tests): a
// block the profile calls rendered is in the golden prompt, any other is
// not (with tools every turn's reasoning; without, only the last turn's).
func TestV4GoldenVectors(t *testing.T) {
	p := NewTable(nil, nil).Resolve("", "https://api.deepseek.com", "deepseek-v4-flash")
	dir := filepath.Join("..", "..", "fixtures", "templates", "deepseek-v4-tests")
	checked, dropped := 0, 0
	for _, n := range []string{"1", "2"} {
		in, err := os.ReadFile(filepath.Join(dir, "test_input_"+n+".json"))
		if err != nil {
			t.Fatal(err)
		}
		if strings.HasPrefix(strings.TrimSpace(string(in)), "[") {
			in = append(append([]byte(`{"messages":`), in...), '}')
		}
		golden, _ := os.ReadFile(filepath.Join(dir, "test_output_"+n+".txt"))
		req, err := conv.ParseRequest(in)
		if err != nil {
			t.Fatal(err)
		}
		rd := p.Of(req)
		for i, m := range req.Messages {
			if m.Role != "assistant" || m.Reasoning == "" {
				continue
			}
			checked++
			in := strings.Contains(string(golden), m.Reasoning)
			if !in {
				dropped++
			}
			if in != rd.Rendered(i) {
				t.Errorf("vector %s, message %d: profile says rendered=%v, the golden output %v", n, i, rd.Rendered(i), in)
			}
		}
	}
	if checked != 4 || dropped != 1 {
		t.Fatalf("%d blocks checked, %d dropped: the vectors changed", checked, dropped)
	}
}

// TestAgreeBefore: two renderings of one profile agree on a message
// exactly when Rendered says the same of it in both, and AgreeBefore
// returns the first message (below k) on which they do not — checked
// against Rendered itself, message by message, for every builtin profile
// and requests whose boundaries (the last user message; the last final
// answer) and tools differ.
func TestAgreeBefore(t *testing.T) {
	reqs := []*conv.Request{}
	for _, body := range []string{
		`{"messages":[{"role":"system","content":"s"},{"role":"user","content":"a"},{"role":"assistant","content":"b"},{"role":"user","content":"c"},{"role":"assistant","content":"","tool_calls":[{"id":"1","type":"function","function":{"name":"f","arguments":"{}"}}]},{"role":"tool","tool_call_id":"1","content":"r"},{"role":"assistant","content":"d"}]}`,
		`{"messages":[{"role":"system","content":"s"},{"role":"user","content":"a"},{"role":"assistant","content":"b"},{"role":"user","content":"c"},{"role":"assistant","content":"","tool_calls":[{"id":"1","type":"function","function":{"name":"f","arguments":"{}"}}]},{"role":"tool","tool_call_id":"1","content":"r"},{"role":"assistant","content":"d"},{"role":"user","content":"e"}]}`,
		`{"tools":[{"type":"function","function":{"name":"f"}}],"messages":[{"role":"system","content":"s"},{"role":"user","content":"a"},{"role":"assistant","content":"b"},{"role":"user","content":"c"},{"role":"assistant","content":"d"}]}`,
		`{"messages":[{"role":"assistant","content":"b"},{"role":"assistant","content":"c"}]}`,
	} {
		r, err := conv.ParseRequest([]byte(body))
		if err != nil {
			t.Fatal(err)
		}
		reqs = append(reqs, r)
	}
	differ := 0
	for _, p := range NewTable(nil, nil).Profiles() {
		for _, a := range reqs {
			for _, b := range reqs {
				ra, rb := p.Of(a), p.Of(b)
				for k := range 9 {
					want := k
					for i := range k {
						if ra.Rendered(i) != rb.Rendered(i) {
							want = i
							break
						}
					}
					if got := ra.AgreeBefore(rb, k); got != want {
						t.Fatalf("%s: AgreeBefore(…, %d) = %d, Rendered first differs at %d", p.Name, k, got, want)
					}
					if want < k {
						differ++
					}
				}
			}
		}
	}
	if differ == 0 {
		t.Fatal("no two renderings differed: the test checks nothing")
	}
}
