package reqshape

import (
	"context"
	"testing"

	"github.com/shaperproxy/shaperproxy/fixtures"
	"github.com/shaperproxy/shaperproxy/internal/profile"
	"github.com/shaperproxy/shaperproxy/proxy"
	"github.com/shaperproxy/shaperproxy/shaping"
)

// TestUnshapedCounts: a request the shaper lets go as it came (shaping
// off, a route no rule matches, a retry, the breaker paused) goes out as
// that very slice, and its blocks are counted, in the metrics and on the
// call, as deciding each of them under keep-recent with keeping as the
// operation counts them: raw, each for the reason keep-recent gives it.
// On a frozen profile that reason is "frozen", elsewhere "same".
func TestUnshapedCounts(t *testing.T) {
	signed := `{"role":"assistant","content":"","reasoning_content":"signed step","reasoning_details":[{"type":"reasoning.encrypted","data":"abc"}],"tool_calls":[{"id":"x_s","type":"function","function":{"name":"bash","arguments":"{}"}}]}`
	bodies := map[string][]byte{
		"agent history": fixtures.AgentHistory(40, 700, 200),
		"the seed":      seedCase(),
		"signed, then a prefill": []byte(`{"model":"m","messages":[{"role":"user","content":"q","reasoning_content":"a user's field, not a block"},` +
			`{"role":"assistant","reasoning_content":"Okay, first I look at the spec. It says 42.","content":"42"},` + signed + `,` +
			`{"role":"tool","tool_call_id":"x_s","content":"ok"},{"role":"assistant","reasoning_content":"a prefill","content":"pre"}]}`),
		"no reasoning": []byte(`{"model":"m","messages":[{"role":"user","content":"q"},{"role":"assistant","content":"a"},{"role":"user","content":"b"}]}`),
	}
	profiles := profile.NewTable(nil, map[string]string{"ds": "https://api.deepseek.com", "or": "https://openrouter.ai/api/v1"})
	type way struct {
		name  string
		cfg   func(*Config)
		retry bool
		pause bool
	}
	ways := []way{
		{name: "shaping off", cfg: func(c *Config) { c.Enabled = false }},
		{name: "no rule", cfg: func(c *Config) { c.Route = "elsewhere" }},
		{name: "a retry", retry: true},
		{name: "the breaker paused", pause: true},
	}
	for _, w := range ways {
		for _, route := range []string{"ds", "or"} {
			for name, body := range bodies {
				cfg := DefaultConfig()
				if w.cfg != nil {
					w.cfg(&cfg)
				}
				if err := cfg.Validate(); err != nil {
					t.Fatal(err)
				}
				s := NewShaper(cfg, Options{Profiles: profiles})
				if w.pause {
					s.breaker.trip(route)
				}
				// What deciding every block under keep-recent, keeping
				// each, counts: the reference.
				want := map[string]float64{}
				keep := shapeRule{Shaping: shaping.Options{Op: shaping.OpKeep}, Policy: PolicyKeepRecent}
				ref := shapeLater(view(t, body), keep, nil, inputs{prof: s.profile(route, "deepseek-v4-flash")})
				for _, b := range ref.Blocks {
					want[b.Reason]++
				}
				if ref.Shaped != 0 {
					t.Fatalf("%s: the reference shaped %d blocks", name, ref.Shaped)
				}

				c := &proxy.Call{Route: route, Model: "deepseek-v4-flash", View: view(t, body), Conversation: "c", Retry: w.retry}
				out, err := s.TransformRequest(context.Background(), c, c.View.Body)
				if err != nil {
					t.Fatal(err)
				}
				c.RunBeside()
				c.RunAfter()
				at := w.name + ", " + route + ", " + name
				if len(out) == 0 || &out[0] != &c.View.Body[0] {
					t.Fatalf("%s: the request did not go out as it came", at)
				}
				if c.Reasoning.Shaped != 0 || c.Reasoning.Raw != len(ref.Blocks) {
					t.Fatalf("%s: the call counts %+v, want %d raw", at, c.Reasoning, len(ref.Blocks))
				}
				blocks := seriesOf(s.blocks)
				if blocks[[2]string{route, "shaped"}] != 0 || blocks[[2]string{route, "raw"}] != float64(len(ref.Blocks)) {
					t.Fatalf("%s: blocks counted %v, want %d raw", at, blocks, len(ref.Blocks))
				}
				got := map[string]float64{}
				for k, v := range seriesOf(s.decisions) { // labels by name: reason, route
					if k[1] != route {
						t.Fatalf("%s: a decision counted on route %q", at, k[1])
					}
					got[k[0]] = v
				}
				if len(got) != len(want) {
					t.Fatalf("%s: decisions %v, want %v", at, got, want)
				}
				for k, v := range want {
					if got[k] != v {
						t.Fatalf("%s: decisions %v, want %v", at, got, want)
					}
				}
				if name != "no reasoning" && len(want) == 0 {
					t.Fatalf("%s: the reference counted nothing: the test checks nothing", at)
				}
				if s.carries.get("c", 0) != nil {
					t.Fatalf("%s: a carry was made for a request that went out as it came", at)
				}
			}
		}
	}
}
