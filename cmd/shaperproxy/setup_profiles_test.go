package main

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/shaperproxy/shaperproxy/internal/config"
	"github.com/shaperproxy/shaperproxy/internal/demo"
	"github.com/shaperproxy/shaperproxy/internal/fakeupstream"
	"github.com/shaperproxy/shaperproxy/internal/profile"
	"github.com/shaperproxy/shaperproxy/internal/render"
	"github.com/shaperproxy/shaperproxy/internal/reqshape"
)

// The conversation of these tests: an agent with tools, user turns of
// tool steps and a final answer each (three turns of four steps for the
// benchmark, two of three elsewhere), every step with long
// reasoning (1.7k to 5.5k characters in the benchmark, mostly filler
// around a few decisive sentences) and tool results of 1.2k to 4.5k
// characters.
// script is the size of a conversation: turns of steps, reasoning of
// thought sentences (plus up to three times grow more).
type script struct{ turns, steps, thought, grow int }

var (
	benchScript = script{turns: 3, steps: 4, thought: 18, grow: 12}
	shortScript = script{turns: 2, steps: 3, thought: 12, grow: 10}
)

const convTools = `[{"type":"function","function":{"name":"read_file","description":"Read a file","parameters":{"type":"object","properties":{"path":{"type":"string"}},"required":["path"]}}},` +
	`{"type":"function","function":{"name":"run_tests","description":"Run the tests of a package","parameters":{"type":"object","properties":{"package":{"type":"string"}},"required":["package"]}}}]`

var fillers = []string{
	"Hmm, let me think about %s again from the start.",
	"Wait, maybe the problem is somewhere else entirely, in the caller of %s.",
	"Actually I am not sure yet; let me reconsider how %s flows through the code.",
	"Let me look at %s from another angle: the input, the parser and the output.",
	"Okay, nothing conclusive so far about %s, I should read more before deciding.",
	"Hmm, the test name mentions %s, but the failure could be a red herring.",
}

// thought is a long reasoning text about topic: n filler sentences with
// two decisive ones.
func thought(topic string, n int) string {
	var b strings.Builder
	for i := 0; i < n; i++ {
		fmt.Fprintf(&b, fillers[(i*7+len(topic))%len(fillers)]+" ", fmt.Sprintf("%s (%d)", topic, i))
		if i == n/2 {
			fmt.Fprintf(&b, "So the root cause is that %s parses the layout in the wrong order. ", topic)
		}
	}
	fmt.Fprintf(&b, "I'll read the next file about %s and then run the tests.", topic)
	return b.String()
}

// toolOutput is a tool result of about n lines.
func toolOutput(name, args string, n int) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s %s\n", name, args)
	for i := 0; i < n; i++ {
		fmt.Fprintf(&b, "%4d\tfunc step%d(x int) int { return x*%d + %d } // %s\n", i, i, i%7, i%11, args)
	}
	return b.String()
}

// push queues the upstream's replies for the whole script.
func (sc script) push(up *fakeupstream.Server) {
	for t := 0; t < sc.turns; t++ {
		for s := 0; s < sc.steps; s++ {
			topic := fmt.Sprintf("turn%d-step%d", t, s)
			name := []string{"read_file", "run_tests"}[s%2]
			up.Push(fakeupstream.Response{Reply: &fakeupstream.Reply{
				Reasoning: thought(topic, sc.thought+sc.grow*((t+s)%4)),
				ToolCalls: []fakeupstream.ToolCall{{Name: name, Arguments: fmt.Sprintf(`{"path":"pkg/%s.go"}`, topic)}},
			}})
		}
		up.Push(fakeupstream.Response{Reply: &fakeupstream.Reply{
			Reasoning: thought(fmt.Sprintf("turn%d-final", t), 24), Content: fmt.Sprintf("Turn %d is done: the layout is fixed and the tests pass.", t),
		}})
	}
}

// convRun is what one run of the script sent and was billed.
type convRun struct {
	primaries [][]byte // requests as the upstream received them
	sent      int      // their bytes
	usages    []fakeupstream.Usage
}

// runConversation drives the script through a proxy built from the
// default configuration changed by mod, with model, on a fake upstream
// whose prompt cache renders with tmpl ("": no prompt cache).
func runConversation(t *testing.T, sc script, model, tmpl string, mod func(*config.Config)) convRun {
	t.Helper()
	r := newRig(t, func(c *config.Config) {
		c.Capture.Enabled = false // not looked at here, and the slowest part under -race
		if mod != nil {
			mod(c)
		}
	})
	var cache *fakeupstream.PromptCache
	if tmpl != "" {
		rd, err := render.Named(tmpl)
		if err != nil {
			t.Fatal(err)
		}
		cache = fakeupstream.NewPromptCache(rd, 0)
		r.up.SetPromptCache(cache)
	}
	sc.push(r.up)
	a := &demo.Agent{BaseURL: r.url, Model: model, Client: &http.Client{Timeout: 30 * time.Second}, ToolDefs: convTools,
		Tools: func(name, args string) string { return toolOutput(name, args, 16+len(args)%4*16) }}
	a.System("You are a coding agent. Use the tools; be brief.")
	for i := 0; i < sc.turns; i++ {
		if err := a.Turn(context.Background(), fmt.Sprintf("User turn %d: fix the next failing test.", i), func(demo.StepReport) {}); err != nil {
			t.Fatal(err)
		}
	}
	var run convRun
	for _, rq := range r.up.Requests() {
		run.primaries = append(run.primaries, rq.Body)
		run.sent += len(rq.Body)
	}
	if cache != nil {
		run.usages = cache.Usages()
	}
	return run
}

func noShaping(c *config.Config) { c.Shaping.Enabled = false }

// prompts renders every request through the template.
func prompts(t *testing.T, tmpl string, bodies [][]byte) []string {
	t.Helper()
	rd, err := render.Named(tmpl)
	if err != nil {
		t.Fatal(err)
	}
	out := make([]string, len(bodies))
	for i, b := range bodies {
		if out[i], err = rd.Render(b, render.Options{}); err != nil {
			t.Fatalf("request %d: %v", i, err)
		}
	}
	return out
}

// families are the model names the tests send, the profile each resolves
// to on a loopback upstream, and its template.
var families = []struct{ model, profile, template string }{
	{"Qwen/Qwen3-32B", "qwen3", "qwen3"},
	{"zai-org/GLM-4.6", "glm-4.6", "glm-4.6"},
	{"moonshotai/Kimi-K2-Thinking", "kimi-k2-thinking", "kimi-k2-thinking"},
	{"deepseek-ai/DeepSeek-V3.1", "deepseek-v3.1", "deepseek-v3.1"},
	{"MiniMaxAI/MiniMax-M2", "minimax-m2", "minimax-m2"},
	{"deepseek-v4-flash", "deepseek-v4", render.V4},
}

// TestRenderedPromptsExtend renders every request the proxy sent through
// the family's real template (or V4's encoder): under the default policy
// each request's prompt extends the previous one's wherever the unshaped
// conversation's does (the template itself breaks the prefix at a new
// user turn when it drops the last turn's reasoning, shaped or not), the
// bytes sent are fewer, and where the profile knows no prices (self-hosted
// families) the prompts are exactly the unshaped ones. The keep-recent
// policy, run on Qwen3, breaks the prefix where the unshaped conversation
// does not: the cost the default avoids.
func TestRenderedPromptsExtend(t *testing.T) {
	for _, f := range families {
		t.Run(f.profile, func(t *testing.T) {
			t.Parallel()
			if p := profile.NewTable(nil, nil).Resolve("default", "http://127.0.0.1:1", f.model); p.Name != f.profile {
				t.Fatalf("%s resolves to %s", f.model, p.Name)
			}
			raw := runConversation(t, shortScript, f.model, "", noShaping)
			def := runConversation(t, shortScript, f.model, "", nil)
			pr, pd := prompts(t, f.template, raw.primaries), prompts(t, f.template, def.primaries)
			if len(pr) != shortScript.turns*(shortScript.steps+1) || len(pd) != len(pr) {
				t.Fatalf("%d and %d requests", len(pr), len(pd))
			}
			for n := 0; n+1 < len(pr); n++ {
				if strings.HasPrefix(pr[n+1], pr[n]) && !strings.HasPrefix(pd[n+1], pd[n]) {
					t.Errorf("request %d does not extend request %d's prompt (at %d)", n+1, n, commonPrefixLen(pd[n], pd[n+1]))
				}
			}
			if def.sent >= raw.sent {
				t.Errorf("default sent %d bytes, no shaping %d", def.sent, raw.sent)
			}
			changesOnce(t, raw.primaries, def.primaries)
			if _, priced := profile.NewTable(nil, nil).Resolve("", "127.0.0.1", f.model).Prices.HitRatio(); !priced {
				for n := range pr {
					if pd[n] != pr[n] {
						t.Errorf("request %d: the prompt changed, though only unrendered blocks may be shaped", n)
					}
				}
			}
			t.Logf("%s: bytes sent %d → %d (%.0f%%)", f.profile, raw.sent, def.sent, 100*float64(def.sent)/float64(raw.sent))
		})
	}
	t.Run("keep-recent breaks", func(t *testing.T) {
		t.Parallel()
		f := families[0]
		raw := runConversation(t, shortScript, f.model, "", noShaping)
		old := runConversation(t, shortScript, f.model, "", func(c *config.Config) { c.Shaping.Policy = reqshape.PolicyKeepRecent })
		pr, po := prompts(t, f.template, raw.primaries), prompts(t, f.template, old.primaries)
		breaks := 0
		for n := 0; n+1 < len(pr); n++ {
			if strings.HasPrefix(pr[n+1], pr[n]) && !strings.HasPrefix(po[n+1], po[n]) {
				breaks++
			}
		}
		if breaks == 0 {
			t.Fatal("keep-recent never broke the prefix: the prefix check proves nothing")
		}
		t.Logf("keep-recent broke the prompt prefix in %d of %d requests", breaks, len(pr)-1)
	})
}

// changesOnce checks that every reasoning block goes out, request after
// request, raw until it is shaped and then as the same shaped bytes: it
// changes at most once. raw and shaped are the requests of the same
// conversation without and with shaping.
func changesOnce(t *testing.T, raw, shaped [][]byte) {
	t.Helper()
	type state struct {
		sent    string
		changed bool
	}
	blocks := map[int]*state{}
	for n := range shaped {
		rv, sv := mustView(t, raw[n]), mustView(t, shaped[n])
		for i, m := range sv.Messages {
			if m.Role != "assistant" || m.Reasoning == "" {
				continue
			}
			orig := rv.Messages[i].Reasoning
			st, seen := blocks[i]
			switch {
			case !seen:
				blocks[i] = &state{sent: m.Reasoning, changed: m.Reasoning != orig}
			case st.sent == m.Reasoning:
			case !st.changed && m.Reasoning != orig:
				st.sent, st.changed = m.Reasoning, true
			default:
				t.Errorf("request %d: the block of message %d changed again (%q → %q)", n, i, excerpt(st.sent), excerpt(m.Reasoning))
				st.sent = m.Reasoning
			}
		}
	}
}

func excerpt(s string) string { return s[:min(len(s), 60)] }

func commonPrefixLen(a, b string) int {
	n := min(len(a), len(b))
	for i := 0; i < n; i++ {
		if a[i] != b[i] {
			return i
		}
	}
	return n
}

// noticeMarkers is, per template, what the prompt shows right before the
// notice text: its role (or the tool-result frame of a tool pair).
var noticeMarkers = map[string]string{
	"qwen3":            "<|im_start|>system\n",
	"glm-4.6":          "<|system|>\n",
	"kimi-k2-thinking": "<|im_system|>tool<|im_middle|>## Return of call_masked_review_",
	"deepseek-v3.1":    "<｜User｜>",
	"minimax-m2":       "<response>",
	render.V4:          "<｜User｜>",
}

// TestReviewNoticeInPlace runs a reviewed turn for each family and
// renders the continuation request (primary, draft, notice) through the
// family's template: the primary's prompt is a prefix of the
// continuation's, the notice comes after the draft with its role, every
// reasoning block of the open turn the primary rendered is still
// rendered, and the next request (history restored) renders too.
func TestReviewNoticeInPlace(t *testing.T) {
	for _, f := range families {
		t.Run(f.profile, func(t *testing.T) {
			r := newReviewRig(t, packetUpdate, &fakeupstream.Reply{Reasoning: "The reviewer is right; checking.", Content: revised}, nil)
			r.up.Push(fakeupstream.Response{Reply: &fakeupstream.Reply{
				Reasoning: "STEP-REASONING: read the file first.",
				ToolCalls: []fakeupstream.ToolCall{{Name: "read_file", Arguments: `{"path":"dates.go"}`}},
			}})
			r.up.Push(fakeupstream.Response{Reply: &fakeupstream.Reply{Reasoning: "DRAFT-REASONING: the layout is wrong, fixed.", Content: "Fixed the layout."}})
			a := &demo.Agent{BaseURL: r.url, Model: f.model, Client: &http.Client{Timeout: 20 * time.Second}, ToolDefs: convTools,
				Tools: func(name, args string) string { return "package dates // " + name }}
			a.System("sys")
			collect(t, a, "fix ParseDate")
			r.up.Push(fakeupstream.Response{Reply: &fakeupstream.Reply{Content: "ok"}})
			collect(t, a, "thanks")
			var primary, cont, next []byte
			for _, rq := range r.up.Requests() {
				switch {
				case isContinuation(rq.Body):
					cont = rq.Body
				case isChild(rq.Body):
				case cont == nil:
					primary = rq.Body
				default:
					next = rq.Body
				}
			}
			if cont == nil || next == nil {
				t.Fatalf("no continuation (%d children, %d continuations)", r.children.Load(), r.continuations.Load())
			}
			ps := prompts(t, f.template, [][]byte{primary, cont, next})
			pp, pc := ps[0], ps[1]
			if !strings.HasPrefix(pc, pp) {
				t.Errorf("the continuation does not extend the primary's prompt (at %d)", commonPrefixLen(pp, pc))
			}
			at := strings.Index(pc, "Automatic masked review by the proxy")
			draft := strings.LastIndex(pc, "Fixed the layout.")
			marker := noticeMarkers[f.template]
			if at < 0 || draft < 0 || draft > at || !strings.HasSuffix(pc[:at], marker) && !strings.Contains(pc[max(0, at-len(marker)-24):at], marker) {
				t.Errorf("notice not in place after the draft with its role %q (notice at %d, draft at %d):\n…%s", marker, at, draft, pc[max(0, len(pc)-400):])
			}
			// The open turn's earlier step is rendered where the primary
			// rendered it (the continuation extends the primary), and the
			// draft keeps its reasoning after it.
			rendersTurn := profile.NewTable(nil, nil).Resolve("", "127.0.0.1", f.model).TurnRendered
			if rendersTurn && (!strings.Contains(pp, "STEP-REASONING") || at < 0 || !strings.Contains(pc[len(pp):max(len(pp), at)], "DRAFT-REASONING")) {
				t.Errorf("the turn's reasoning is not rendered with the notice:\n%s", pc[len(pp):])
			}
			if !rendersTurn && strings.Contains(pc, "REASONING") {
				t.Errorf("%s renders reasoning its profile says it drops", f.profile)
			}
		})
	}
}

// benchCase is one upstream of the benchmark: a model, the profile it
// resolves to, its template and the configuration that gets it there.
type benchCase struct {
	name, model, template string
	mod                   func(*config.Config)
}

// TestCacheBenchmark runs the conversation on the fake upstream, whose
// prompt cache bills it as DeepSeek does (prefix matching over the
// prompts its template renders), with no shaping, the keep-recent policy
// and the default cache-aware policy, at DeepSeek's prices (r = 0.02,
// the V4 encoder) and at Alibaba's ratio (r = 0.2, the Qwen3 template),
// and prints the table (go test -run TestCacheBenchmark -v
// ./cmd/shaperproxy). The default must never cost more than no shaping
// and must send fewer bytes.
func TestCacheBenchmark(t *testing.T) {
	cases := []benchCase{
		{"DeepSeek V4 API (r=0.02)", "deepseek-v4-flash", render.V4, nil},
		{"Alibaba DashScope, Qwen3 (r=0.2)", "qwen3-max", "qwen3", func(c *config.Config) {
			c.Profiles = append(c.Profiles, profile.Override{Name: "bench-dashscope", Base: "dashscope", Upstream: "127.0.0.1"})
		}},
	}
	policies := []struct {
		name string
		mod  func(*config.Config)
	}{
		{"no shaping", noShaping},
		{"keep-recent (old default)", func(c *config.Config) { c.Shaping.Policy = reqshape.PolicyKeepRecent }},
		{"cache-aware (new default)", nil},
	}
	type result struct {
		rel  float64
		sent int
		row  string
	}
	results := make([][]result, len(cases))
	t.Run("runs", func(t *testing.T) {
		for i, bc := range cases {
			results[i] = make([]result, len(policies))
			for j, pol := range policies {
				t.Run(fmt.Sprintf("%d-%d", i, j), func(t *testing.T) {
					t.Parallel()
					results[i][j] = benchRun(t, bc, pol.name, pol.mod)
				})
			}
		}
	})
	var table strings.Builder
	fmt.Fprintf(&table, "\n| upstream | policy | bytes sent | prompt tokens | cache hit | cache miss | output | cost (miss-token equivalents) | cost USD |\n|---|---|---:|---:|---:|---:|---:|---:|---:|\n")
	for i, bc := range cases {
		rs := results[i]
		for _, r := range rs {
			table.WriteString(r.row)
		}
		if rs[2].rel > rs[0].rel {
			t.Errorf("%s: the default policy costs %.0f, no shaping %.0f", bc.name, rs[2].rel, rs[0].rel)
		}
		if rs[2].sent >= rs[0].sent {
			t.Errorf("%s: the default policy sent %d bytes, no shaping %d", bc.name, rs[2].sent, rs[0].sent)
		}
	}
	t.Log(table.String())
}

// benchRun runs the benchmark conversation of bc under a policy and
// returns its cost relative to a miss token, its bytes and its table row.
func benchRun(t *testing.T, bc benchCase, policy string, mod func(*config.Config)) (res struct {
	rel  float64
	sent int
	row  string
}) {
	run := runConversation(t, benchScript, bc.model, bc.template, func(c *config.Config) {
		for _, m := range []func(*config.Config){bc.mod, mod} {
			if m != nil {
				m(c)
			}
		}
	})
	p := profile.NewTable(benchProfiles(bc), nil).Resolve("default", "http://127.0.0.1:1", bc.model)
	var hit, miss, prompt, out int64
	for _, u := range run.usages {
		hit += int64(u.CacheHitTokens)
		miss += int64(u.PromptTokens - u.CacheHitTokens)
		prompt += int64(u.PromptTokens)
		out += int64(u.CompletionTokens)
	}
	rel, ok := p.Prices.Relative(hit, miss)
	if !ok {
		t.Fatalf("%s: profile %s has no price ratio", bc.name, p.Name)
	}
	usd := "–"
	if v, ok := p.Prices.Cost(hit, miss, 0); ok {
		usd = fmt.Sprintf("%.5f", v)
	}
	res.rel, res.sent = rel, run.sent
	res.row = fmt.Sprintf("| %s | %s | %d | %d | %d | %d | %d | %.0f | %s |\n", bc.name, policy, run.sent, prompt, hit, miss, out, rel, usd)
	return res
}

// benchProfiles is the [[profile]] configuration of a bench case.
func benchProfiles(bc benchCase) profile.Config {
	c := config.Default()
	if bc.mod != nil {
		bc.mod(&c)
	}
	return c.Profiles
}
