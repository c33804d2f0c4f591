package deliberate

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/shaperproxy/shaperproxy/conv"
	"github.com/shaperproxy/shaperproxy/internal/review"
	"github.com/tidwall/gjson"
)

// history is a tool-loop conversation: system, user, then steps assistant
// (reasoning, a tool call) + tool result; the last step is answered.
func history(steps int) []byte {
	var b strings.Builder
	b.WriteString(`{"model":"deepseek-reasoner","stream":true,"tools":[{"type":"function","function":{"name":"read_file","parameters":{"type":"object"}}}],"messages":[`)
	b.WriteString(`{"role":"system","content":"You are a coding agent."},{"role":"user","content":"Fix the failing test."}`)
	for i := 1; i <= steps; i++ {
		fmt.Fprintf(&b, `,{"role":"assistant","content":"Step %d.","reasoning_content":"SECRET-REASONING-%d: I should read file %d.","tool_calls":[{"id":"call_%d","type":"function","function":{"name":"read_file","arguments":"{\"path\":\"f%d.go\"}"}}]}`, i, i, i, i, i)
		fmt.Fprintf(&b, `,{"role":"tool","tool_call_id":"call_%d","content":"contents of f%d.go"}`, i, i)
	}
	b.WriteString(`]}`)
	return []byte(b.String())
}

func parse(t *testing.T, body []byte) *conv.Request {
	t.Helper()
	r, err := conv.ParseRequest(body)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func TestToolJSON(t *testing.T) {
	for _, strong := range []bool{false, true} {
		tool := toolJSON(strong)
		if !json.Valid(tool) {
			t.Fatalf("tool is not json: %s", tool)
		}
		if !bytes.Equal(tool, toolJSON(strong)) {
			t.Fatal("tool bytes differ between calls")
		}
		f := gjson.GetBytes(tool, "function")
		if f.Get("name").Str != ToolName || !strings.Contains(f.Get("description").Str, "expensive") {
			t.Errorf("function = %s", f.Raw)
		}
		if got := f.Get("parameters.properties.branches.items.properties.strong").Exists(); got != strong {
			t.Errorf("strong flag present = %v, want %v", got, strong)
		}
	}
}

func TestParseArgs(t *testing.T) {
	tests := []struct {
		args, wantErr string
	}{
		{`{"goal":"g","branches":[{"role":"independent-alternative"}]}`, ""},
		{`{"goal":"g","incumbent":"plan","branches":[{"role":"trajectory-audit"},{"role":"masked-review","recentSteps":3}]}`, ""},
		{`not json`, "not a JSON object"},
		{`[1]`, "not a JSON object"},
		{`{"branches":[{"role":"independent-alternative"}]}`, `"goal" is required`},
		{`{"goal":"  ","branches":[{"role":"independent-alternative"}]}`, `"goal" must not be empty`},
		{`{"goal":"g","branches":[]}`, "1 to 3 branches"},
		{`{"goal":"g","branches":[{"role":"a"},{"role":"b"},{"role":"c"},{"role":"d"}]}`, "1 to 3 branches, not 4"},
		{`{"goal":"g","branches":[{"role":"judge"}]}`, `branch 1: "role" must be one of`},
		{`{"goal":"g","branches":[{"role":"masked-review"}]}`, `needs "recentSteps"`},
		{`{"goal":"g","branches":[{"role":"masked-review","recentSteps":9}]}`, `needs "recentSteps"`},
		{`{"goal":"g","branches":[{"role":"masked-review","recentSteps":1.5}]}`, `needs "recentSteps"`},
		{`{"goal":"g","branches":[{"role":"trajectory-audit","recentSteps":2}]}`, "for masked-review only"},
		{`{"goal":"g","branches":[{"role":"trajectory-audit"}]}`, `give it as "incumbent"`},
		{`{"goal":"g","branch":[{"role":"trajectory-audit"}]}`, `unknown key "branch"`},
		{`{"goal":"g","branches":[{"role":"masked-review","recent_steps":2}]}`, `unknown key "recent_steps"`},
		{`{"goal":"g","branches":[{"role":"independent-alternative","strong":true}]}`, `unknown key "strong"`},
		{`{"goal":7,"branches":[{"role":"independent-alternative"}]}`, `"goal" must be a string`},
	}
	for _, tt := range tests {
		_, err := parseArgs(tt.args, false)
		switch {
		case tt.wantErr == "" && err != nil:
			t.Errorf("%s: %v", tt.args, err)
		case tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)):
			t.Errorf("%s: err = %v, want %q", tt.args, err, tt.wantErr)
		}
	}
	a, err := parseArgs(`{"goal":"g","branches":[{"role":"masked-review","recentSteps":4,"strong":true}]}`, true)
	if err != nil || a.Branches[0] != (Branch{Role: RoleMasked, RecentSteps: 4, Strong: true}) {
		t.Errorf("strong branch = %+v, %v", a.Branches, err)
	}
}

func TestInjectTool(t *testing.T) {
	tool := toolJSON(false)
	req := parse(t, history(1))
	out, ok := injectTool(req, tool)
	if !ok || !json.Valid(out) {
		t.Fatalf("injected = %v, valid = %v", ok, json.Valid(out))
	}
	tools := gjson.GetBytes(out, "tools").Array()
	if len(tools) != 2 || tools[0].Get("function.name").Str != "read_file" || tools[1].Raw != string(tool) {
		t.Fatalf("tools = %s", gjson.GetBytes(out, "tools").Raw)
	}
	// Every byte but the added tool is the client's.
	if at := bytes.Index(out, tool); !bytes.Equal(append(bytes.Clone(out[:at-1]), out[at+len(tool):]...), req.Body) {
		t.Error("bytes outside the added tool changed")
	}
	// Idempotent: a request that already has it (a client echoing it, or
	// the same bytes again) is left alone, as is one without tools.
	if _, ok := injectTool(parse(t, out), tool); ok {
		t.Error("injected twice")
	}
	for _, body := range []string{`{"model":"m","messages":[{"role":"user","content":"hi"}]}`, `{"model":"m","tools":[],"messages":[{"role":"user","content":"hi"}]}`} {
		if _, ok := injectTool(parse(t, []byte(body)), tool); ok {
			t.Errorf("injected into %s", body)
		}
	}
}

func TestWithoutCall(t *testing.T) {
	tests := []struct{ in, want string }{
		// the deliberate call (index 1) removed, the next renumbered
		{`{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"a","function":{"name":"read_file","arguments":""}},{"index":1,"id":"d","function":{"name":"deliberate","arguments":""}},{"index":2,"id":"b","function":{"name":"grep","arguments":""}}]}}]}`,
			`{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"a","function":{"name":"read_file","arguments":""}},{"index":1,"id":"b","function":{"name":"grep","arguments":""}}]}}]}`},
		// a fragment of the deliberate call only: the key goes
		{`{"choices":[{"index":0,"delta":{"tool_calls":[{"index":1,"function":{"arguments":"{\"goal\""}}]}}]}`,
			`{"choices":[{"index":0,"delta":{}}]}`},
		// a later call's fragment is renumbered
		{`{"choices":[{"index":0,"delta":{"tool_calls":[{"index":2,"function":{"arguments":"x"}}]}}]}`,
			`{"choices":[{"index":0,"delta":{"tool_calls":[{"index":1,"function":{"arguments":"x"}}]}}]}`},
		// no tool calls: unchanged
		{`{"choices":[{"index":0,"delta":{"content":"hi"}}]}`, `{"choices":[{"index":0,"delta":{"content":"hi"}}]}`},
	}
	for _, tt := range tests {
		got, err := withoutCall([]byte(tt.in), 1)
		if err != nil || string(got) != tt.want {
			t.Errorf("withoutCall(%s)\n got %s, %v\nwant %s", tt.in, got, err, tt.want)
		}
	}
	if i, ok := startsCall([]byte(`{"choices":[{"index":0,"delta":{"tool_calls":[{"index":1,"id":"d","type":"function","function":{"name":"deliberate","arguments":""}}]}}]}`)); !ok || i != 1 {
		t.Errorf("startsCall = %d, %v", i, ok)
	}
	if _, ok := startsCall([]byte(`{"choices":[{"index":0,"delta":{"content":"I will call deliberate"}}]}`)); ok {
		t.Error("startsCall matched text")
	}
}

// TestChildHistories: each role's child sees exactly its history.
func TestChildHistories(t *testing.T) {
	primary := parse(t, history(3))
	a := Args{Goal: "make the test pass", Incumbent: "INCUMBENT-PLAN: patch f3.go", Context: "CONTEXT: Go 1.26"}
	arr := func(b []byte) gjson.Result { return gjson.GetBytes(b, "messages") }

	fresh, err := buildChild(primary, a, Branch{Role: RoleAlternative}, "", 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	if msgs := arr(fresh.Body).Array(); len(msgs) != 1 || msgs[0].Get("role").Str != "user" ||
		!strings.Contains(msgs[0].Get("content").Str, "CONTEXT: Go 1.26") || strings.Contains(fresh.Body2(), "INCUMBENT-PLAN") ||
		strings.Contains(fresh.Body2(), "Fix the failing test") {
		t.Errorf("fresh child has conversation messages or the incumbent: %s", fresh.Body)
	}

	fork, err := buildChild(primary, a, Branch{Role: RoleAudit}, "", 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	last := primary.Messages[len(primary.Messages)-1]
	prefix := primary.Body[arr(primary.Body).Index:last.End]
	if !bytes.Contains(fork.Body, prefix) || !strings.Contains(fork.Body2(), "INCUMBENT-PLAN") {
		t.Errorf("fork child's prefix is not the primary's, or lacks the incumbent")
	}
	if n := len(arr(fork.Body).Array()); n != len(primary.Messages)+1 {
		t.Errorf("fork has %d messages, want %d", n, len(primary.Messages)+1)
	}

	masked, err := buildChild(primary, a, Branch{Role: RoleMasked, RecentSteps: 2}, "", 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	// Step 2's assistant message (index 4) is the earliest of the last 2.
	if masked.Seed != 4 || masked.Requested != 2 || masked.Projected != 2 {
		t.Fatalf("masked seed %d, K %d→%d", masked.Seed, masked.Requested, masked.Projected)
	}
	if seed := primary.Body[arr(primary.Body).Index:primary.Messages[3].End]; !bytes.Contains(masked.Body, seed) {
		t.Error("masked seed is not byte-identical to the primary's")
	}
	body := masked.Body2()
	for _, hidden := range []string{"SECRET-REASONING-2", "SECRET-REASONING-3", "INCUMBENT-PLAN"} {
		if strings.Contains(body, hidden) {
			t.Errorf("masked child holds %q", hidden)
		}
	}
	for _, shown := range []string{"SECRET-REASONING-1", "Step 2.", "f3.go", "contents of f3.go"} {
		if !strings.Contains(body, shown) {
			t.Errorf("masked child lacks %q", shown)
		}
	}
	// K is clamped to the complete steps there are.
	clamped, err := buildChild(primary, a, Branch{Role: RoleMasked, RecentSteps: 8}, "", 1<<20)
	if err != nil || clamped.Requested != 8 || clamped.Projected != 3 || clamped.Seed != 2 {
		t.Errorf("clamped: K %d→%d, seed %d, %v", clamped.Requested, clamped.Projected, clamped.Seed, err)
	}
	for _, c := range []child{fresh, fork, masked} {
		if gjson.GetBytes(c.Body, "tools").Exists() || gjson.GetBytes(c.Body, "stream").Raw != "false" {
			t.Errorf("%s child has tools or streams", c.Branch.Role)
		}
	}
	// No complete step: the branch fails with a reason, nothing is sent.
	if _, err := buildChild(parse(t, history(0)), a, Branch{Role: RoleMasked, RecentSteps: 1}, "", 1<<20); err == nil {
		t.Error("masked-review without a complete step built a child")
	}
	if _, err := buildChild(primary, a, Branch{Role: RoleMasked, RecentSteps: 3}, "", 100); err == nil {
		t.Error("an oversize snapshot built a child")
	}
}

func TestResultJSON(t *testing.T) {
	p := review.Packet{Role: string(RoleAudit), Status: "update", Items: []review.Item{{Kind: "possible_error", Certainty: "likely", Content: "f3.go is not the file that fails."}}}
	out := resultJSON([]outcome{
		{Branch: Branch{Role: RoleAudit}, Packet: &p},
		{Branch: Branch{Role: RoleMasked, RecentSteps: 8}, Requested: 8, Projected: 3, Err: "the branch timed out"},
	})
	if !json.Valid(out) {
		t.Fatalf("not json: %s", out)
	}
	bs := gjson.GetBytes(out, "branches").Array()
	if len(bs) != 2 || bs[0].Get("status").Str != "update" || bs[0].Get("items.0.kind").Str != "possible_error" ||
		bs[1].Get("error").Str != "the branch timed out" || bs[1].Get("requested_steps").Int() != 8 || bs[1].Get("projected_steps").Int() != 3 ||
		bs[0].Get("requested_steps").Exists() {
		t.Errorf("result = %s", out)
	}
}

// Body2 is the child's body as a string, for substring checks.
func (c child) Body2() string { return string(c.Body) }
