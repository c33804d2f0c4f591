package main

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/shaperproxy/shaperproxy/capture"
	"github.com/shaperproxy/shaperproxy/conv"
	"github.com/shaperproxy/shaperproxy/internal/config"
	"github.com/shaperproxy/shaperproxy/internal/demo"
	"github.com/shaperproxy/shaperproxy/internal/fakeupstream"
	"github.com/tidwall/gjson"
)

const (
	readFileTool   = `[{"type":"function","function":{"name":"read_file","description":"read a file","parameters":{"type":"object","properties":{"path":{"type":"string"}}}}}]`
	deliberateArgs = `{"goal":"make the date test pass","incumbent":"INCUMBENT-PLAN: change the layout in dates.go","context":"CONTEXT-NOTE: a Go 1.26 project",` +
		`"branches":[{"role":"independent-alternative"},{"role":"trajectory-audit"},{"role":"masked-review","recentSteps":2}]}`
	finalAnswer = "Done: the layout in dates.go is fixed and the test passes."
)

// branchTasks tell the children apart by the opening of their task.
var branchTasks = map[string]string{
	"independent-alternative": "Independent second opinion, requested by the proxy",
	"trajectory-audit":        "Trajectory audit, requested by the proxy",
	"masked-review":           "Masked review, requested by the proxy",
}

// deliberateRig is a rig with the deliberate tool on and an upstream that
// answers each branch by its role (answer(role) gives the packet, or
// "stall" / "garbage").
type deliberateRig struct {
	*rig
	mu       sync.Mutex
	children map[string]fakeupstream.Recorded
	reviews  int // automatic review children answered (no_update)
}

func newDeliberateRig(t *testing.T, answer func(role string) string, mod func(*config.Config)) *deliberateRig {
	r := &deliberateRig{children: map[string]fakeupstream.Recorded{}}
	r.rig = newRig(t, func(c *config.Config) {
		c.Deliberate.Routes = []string{"default"}
		if mod != nil {
			mod(c)
		}
	})
	r.up.Handle(func(req fakeupstream.Recorded) (fakeupstream.Response, bool) {
		if isChild(req.Body) {
			r.mu.Lock()
			r.reviews++
			r.mu.Unlock()
			return chatAnswer(packetNoUpdate), true
		}
		role := branchRole(req.Body)
		if role == "" {
			return fakeupstream.Response{}, false
		}
		r.mu.Lock()
		r.children[role] = req
		r.mu.Unlock()
		switch a := answer(role); a {
		case "stall":
			return fakeupstream.Response{Status: 200, Body: []byte("{}"), Stall: 30 * time.Second}, true
		case "garbage":
			return chatAnswer("I think the plan is fine."), true
		default:
			return chatAnswer(a), true
		}
	})
	return r
}

func branchRole(body []byte) string {
	last := lastMessage(body)
	for role, task := range branchTasks {
		if strings.HasPrefix(last, task) {
			return role
		}
	}
	return ""
}

func packetFor(role string) string {
	if role == "trajectory-audit" {
		return `{"role":"trajectory-audit","status":"update","items":[{"kind":"possible_error","certainty":"likely","content":"dates_test.go also checks time zones; the layout alone will not fix it."}]}`
	}
	return `{"role":"` + role + `","status":"no_update"}`
}

// agent is an agent that declares read_file and keeps the raw bytes it
// receives.
func (r *deliberateRig) agent(nonStream bool) *demo.Agent {
	a := &demo.Agent{BaseURL: r.url, Model: "deepseek-reasoner", Client: &http.Client{Timeout: 20 * time.Second},
		Tools: func(name, args string) string { return "contents of " + name }, ToolDefs: readFileTool,
		NonStream: nonStream, RawBodies: true}
	a.System("You are a coding agent.")
	return a
}

// scriptDeliberation pushes two read_file steps, a step calling
// deliberate (alone, or beside read_file), and the final answer.
func (r *deliberateRig) scriptDeliberation(args string, beside bool) {
	for i, secret := range []string{"SECRET-STEP-ONE", "SECRET-STEP-TWO"} {
		r.up.Push(fakeupstream.Response{Reply: &fakeupstream.Reply{
			Reasoning: secret + ": read the next file.",
			ToolCalls: []fakeupstream.ToolCall{{Name: "read_file", Arguments: `{"path":"f` + string(rune('1'+i)) + `.go"}`}},
		}})
	}
	r.scriptStep3(args, beside)
}

// scriptStep3 pushes a step calling deliberate (alone, or beside
// read_file) and the final answer.
func (r *deliberateRig) scriptStep3(args string, beside bool) {
	calls := []fakeupstream.ToolCall{{ID: "call_delib", Name: "deliberate", Arguments: args}}
	if beside {
		calls = append([]fakeupstream.ToolCall{{ID: "call_read3", Name: "read_file", Arguments: `{"path":"f3.go"}`}}, calls...)
	}
	r.up.Push(fakeupstream.Response{Reply: &fakeupstream.Reply{Reasoning: "SECRET-STEP-THREE: ask for second opinions.", ToolCalls: calls}})
	r.up.Push(fakeupstream.Response{Reply: &fakeupstream.Reply{Reasoning: "The audit is right about time zones.", Content: finalAnswer}})
}

// primaries are the upstream's requests that are not branches.
func (r *deliberateRig) primaries() []fakeupstream.Recorded {
	var out []fakeupstream.Recorded
	for _, q := range r.up.Requests() {
		if branchRole(q.Body) == "" {
			out = append(out, q)
		}
	}
	return out
}

// messagesPrefix returns the raw messages array of body from "[" to the
// end of message n-1.
func messagesPrefix(t *testing.T, body []byte, n int) []byte {
	t.Helper()
	v := mustView(t, body)
	at := gjson.GetBytes(body, "messages").Index
	if n == 0 {
		return body[at : at+1]
	}
	return body[at:v.Messages[n-1].End]
}

// TestDeliberateAlone: the model calls deliberate alone; each branch sees
// the history its role prescribes; the client never sees the call and
// gets the continuation in the same response; the next request carries
// the call and its result restored, byte for byte.
func TestDeliberateAlone(t *testing.T) {
	for _, nonStream := range []bool{false, true} {
		r := newDeliberateRig(t, packetFor, nil)
		r.scriptDeliberation(deliberateArgs, false)
		a := r.agent(nonStream)
		got := collect(t, a, "fix the date test")
		if got.Content != finalAnswer || got.FinishReason != "stop" || len(got.ToolCalls) != 0 {
			t.Fatalf("nonStream=%v: client got %q (%s, %d calls)", nonStream, got.Content, got.FinishReason, len(got.ToolCalls))
		}
		for _, raw := range a.RawResponses {
			if bytes.Contains(raw, []byte("deliberate")) || bytes.Contains(raw, []byte("call_delib")) {
				t.Fatalf("nonStream=%v: the client saw the deliberate call: %s", nonStream, raw)
			}
		}
		prims := r.primaries()
		if len(prims) != 4 {
			t.Fatalf("upstream saw %d primary requests, want 4", len(prims))
		}
		primary, cont := prims[2].Body, prims[3].Body
		if !bytes.Contains(primary, []byte(`"name":"deliberate"`)) {
			t.Error("the tool was not added to the primary request")
		}
		checkBranches(t, r, primary)
		// The continuation is the primary, then the call and its result.
		pv, cv := mustView(t, primary), mustView(t, cont)
		n := len(pv.Messages)
		if !bytes.Equal(messagesPrefix(t, cont, n), messagesPrefix(t, primary, n)) || len(cv.Messages) != n+2 {
			t.Fatalf("continuation does not extend the primary")
		}
		call, result := cv.Messages[n], cv.Messages[n+1]
		if len(call.ToolCalls) != 1 || call.ToolCalls[0].Name != "deliberate" || result.ToolCallID != call.ToolCalls[0].ID {
			t.Fatalf("continuation's last messages: %+v / %+v", call, result)
		}
		res := gjson.Parse(result.Content)
		if res.Get("branches.#").Int() != 3 || res.Get(`branches.#(role=="trajectory-audit").status`).Str != "update" ||
			res.Get(`branches.#(role=="masked-review").projected_steps`).Int() != 2 {
			t.Errorf("tool result = %s", result.Content)
		}
		// The next turn: the hidden call and result are back, same bytes.
		r.up.Push(fakeupstream.Response{Reply: &fakeupstream.Reply{Content: "You're welcome."}})
		collect(t, a, "thanks")
		next := r.primaries()[4].Body
		hidden := cont[cv.Messages[n].Start:cv.Messages[n+1].End]
		if !bytes.Contains(next, hidden) {
			t.Errorf("nonStream=%v: the next request lacks the hidden call and result", nonStream)
		}
		nv := mustView(t, next)
		if m := nv.Messages[n+2]; m.Role != "assistant" || m.Content != finalAnswer {
			t.Errorf("restored continuation = %q", m.Content)
		}
	}
}

// checkBranches: fresh has no conversation message; fork's prefix is the
// primary's byte for byte; mid-fork's seed is the primary's up to the
// first masked step and its snapshot holds none of the masked reasoning.
func checkBranches(t *testing.T, r *deliberateRig, primary []byte) {
	t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.children) != 3 {
		t.Fatalf("%d branches ran, want 3", len(r.children))
	}
	pv := mustView(t, primary)
	fresh := mustView(t, r.children["independent-alternative"].Body)
	if len(fresh.Messages) != 1 || strings.Contains(string(fresh.Body), "INCUMBENT-PLAN") || !strings.Contains(fresh.Messages[0].Content, "CONTEXT-NOTE") {
		t.Errorf("fresh branch: %d messages", len(fresh.Messages))
	}
	fork := r.children["trajectory-audit"].Body
	n := len(pv.Messages)
	if !bytes.Equal(messagesPrefix(t, fork, n), messagesPrefix(t, primary, n)) || !bytes.Contains(fork, []byte("INCUMBENT-PLAN")) {
		t.Error("fork branch's prefix is not the primary's")
	}
	masked := r.children["masked-review"].Body
	// The last 2 complete steps start at message 2 (system, user, step 1…).
	if !bytes.Equal(messagesPrefix(t, masked, 2), messagesPrefix(t, primary, 2)) || len(mustView(t, masked).Messages) != 3 {
		t.Error("mid-fork seed is not the primary's up to the first masked step")
	}
	for _, secret := range []string{"SECRET-STEP-ONE", "SECRET-STEP-TWO", "INCUMBENT-PLAN"} {
		if bytes.Contains(masked, []byte(secret)) {
			t.Errorf("mid-fork branch holds %s", secret)
		}
	}
	for role, c := range r.children {
		if gjson.GetBytes(c.Body, "tools").Exists() || bytes.Contains(c.Body, []byte(`"name":"deliberate"`)) {
			t.Errorf("%s branch sees tools", role)
		}
	}
}

// TestDeliberateBesideClientCall: the client gets its own call (index 0,
// no deliberate), the branches run meanwhile, and its next request goes
// upstream with the model's whole message and the deliberate result.
func TestDeliberateBesideClientCall(t *testing.T) {
	for _, nonStream := range []bool{false, true} {
		deliberateBeside(t, nonStream)
	}
}

func deliberateBeside(t *testing.T, nonStream bool) {
	r := newDeliberateRig(t, packetFor, nil)
	r.scriptDeliberation(deliberateArgs, true)
	a := r.agent(nonStream)
	got := collect(t, a, "fix the date test")
	if got.Content != finalAnswer {
		t.Fatalf("nonStream=%v: client got %q", nonStream, got.Content)
	}
	for _, raw := range a.RawResponses {
		if bytes.Contains(raw, []byte("deliberate")) {
			t.Fatalf("nonStream=%v: the client saw the deliberate call: %s", nonStream, raw)
		}
	}
	prims := r.primaries()
	if len(prims) != 4 {
		t.Fatalf("upstream saw %d primary requests, want 4", len(prims))
	}
	after := mustView(t, prims[3].Body)
	var model, result *conv.Message
	for i, m := range after.Messages {
		if m.Role == "assistant" && len(m.ToolCalls) == 2 {
			model, result = &after.Messages[i], &after.Messages[i+1]
		}
	}
	if model == nil || model.ToolCalls[1].Name != "deliberate" || result.ToolCallID != "call_delib" ||
		!gjson.Get(result.Content, "branches").IsArray() {
		t.Fatalf("the request after the client's tool result lacks the model's message and the deliberate result")
	}
	if len(r.children) != 3 {
		t.Errorf("%d branches ran", len(r.children))
	}
}

// TestDeliberateFailures: a branch that times out and one that answers
// no packet give diagnostics while the third still returns; invalid
// arguments come back to the model as a tool result, and no branch runs.
func TestDeliberateFailures(t *testing.T) {
	answer := func(role string) string {
		switch role {
		case "independent-alternative":
			return "stall"
		case "masked-review":
			return "garbage"
		}
		return packetFor(role)
	}
	r := newDeliberateRig(t, answer, func(c *config.Config) { c.Deliberate.BranchTimeout = 300 * time.Millisecond })
	r.scriptDeliberation(deliberateArgs, false)
	if got := collect(t, r.agent(false), "fix it"); got.Content != finalAnswer {
		t.Fatalf("client got %q", got.Content)
	}
	cont := mustView(t, r.primaries()[3].Body)
	res := gjson.Parse(cont.Messages[len(cont.Messages)-1].Content)
	if res.Get(`branches.#(role=="independent-alternative").error`).Str != "the branch timed out" ||
		res.Get(`branches.#(role=="masked-review").error`).Str != "the branch did not answer with a valid packet" ||
		res.Get(`branches.#(role=="trajectory-audit").status`).Str != "update" {
		t.Errorf("tool result = %s", res.Raw)
	}

	bad := newDeliberateRig(t, packetFor, nil)
	bad.scriptDeliberation(`{"goal":"g","branches":[{"role":"masked-review"}]}`, false)
	if got := collect(t, bad.agent(false), "fix it"); got.Content != finalAnswer {
		t.Fatalf("client got %q", got.Content)
	}
	cont = mustView(t, bad.primaries()[3].Body)
	if msg := cont.Messages[len(cont.Messages)-1].Content; !strings.Contains(msg, `needs \"recentSteps\"`) && !strings.Contains(msg, `needs "recentSteps"`) {
		t.Errorf("invalid arguments result = %s", msg)
	}
	if len(bad.children) != 0 {
		t.Errorf("%d branches ran for invalid arguments", len(bad.children))
	}
}

// TestDeliberateClientLeaves: a client that goes away while the branches
// run cancels them (the captured children do not complete).
func TestDeliberateClientLeaves(t *testing.T) {
	r := newDeliberateRig(t, func(string) string { return "stall" }, nil)
	r.scriptDeliberation(deliberateArgs, false)
	a := r.agent(false)
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		deadline := time.Now().Add(10 * time.Second)
		for time.Now().Before(deadline) {
			r.mu.Lock()
			n := len(r.children)
			r.mu.Unlock()
			if n == 3 {
				break
			}
			time.Sleep(10 * time.Millisecond)
		}
		cancel()
	}()
	_ = a.Turn(ctx, "fix it", func(demo.StepReport) {})
	if err := r.app.Flush(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		ends := childEnds(t, r.dataDir)
		if len(ends) == 3 {
			for _, o := range ends {
				if o == "complete" {
					t.Fatalf("a branch completed after the client left: %v", ends)
				}
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("captured %d branch ends, want 3", len(ends))
		}
		time.Sleep(50 * time.Millisecond)
		_ = r.app.Flush()
	}
}

// childEnds returns the outcomes of the internal calls in the capture.
func childEnds(t *testing.T, dataDir string) []string {
	t.Helper()
	rd, err := capture.OpenReader(dataDir + "/" + capture.Dir)
	if err != nil {
		t.Fatal(err)
	}
	defer rd.Close()
	recs, err := rd.Tail(1000, capture.Filter{Kinds: []capture.Kind{capture.KindEnd}})
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, l := range recs {
		if l.Record.Internal && l.Record.Parent != "" {
			out = append(out, l.Record.Outcome)
		}
	}
	return out
}

// TestDeliberateCaptured: the branches are internal calls linked to their
// parent, whose capture note lists them with outcome, timing and packet.
func TestDeliberateCaptured(t *testing.T) {
	r := newDeliberateRig(t, packetFor, nil)
	r.scriptDeliberation(deliberateArgs, false)
	collect(t, r.agent(false), "fix it")
	if err := r.app.Flush(); err != nil {
		t.Fatal(err)
	}
	rd, err := capture.OpenReader(r.dataDir + "/" + capture.Dir)
	if err != nil {
		t.Fatal(err)
	}
	defer rd.Close()
	notes, err := rd.Tail(100, capture.Filter{Kinds: []capture.Kind{capture.KindNote}})
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range notes {
		if l.Record.Where != "deliberate" {
			continue
		}
		var n struct {
			Deliberate string `json:"deliberate"`
			Branches   []struct {
				Role, Child, Status string
				Packet              json.RawMessage
			} `json:"branches"`
		}
		if err := json.Unmarshal(l.Record.Data, &n); err != nil {
			t.Fatal(err)
		}
		if n.Deliberate != "alone" || len(n.Branches) != 3 {
			t.Fatalf("note = %s", l.Record.Data)
		}
		view, err := capture.Show(rd, n.Branches[0].Child)
		if err != nil || !view.Internal || view.Parent != l.Record.Call {
			t.Fatalf("branch %s is not an internal call of %s: %+v, %v", n.Branches[0].Child, l.Record.Call, view, err)
		}
		return
	}
	t.Fatal("no deliberate note in the capture")
}

// TestDeliberateMaskedReviewSkipsAutoReview: a turn in which the model ran
// a masked-review branch is not reviewed again at its end (seed 003 §7);
// a turn with only the other roles still is.
func TestDeliberateMaskedReviewSkipsAutoReview(t *testing.T) {
	for _, masked := range []bool{true, false} {
		args := `{"goal":"g","incumbent":"plan","branches":[{"role":"trajectory-audit"}]}`
		if masked {
			args = `{"goal":"g","branches":[{"role":"masked-review","recentSteps":1}]}`
		}
		r := newDeliberateRig(t, packetFor, func(c *config.Config) { c.Review.Routes = []string{"default"} })
		r.scriptDeliberation(args, true) // beside read_file: the turn goes on and ends with a plain stop
		if got := collect(t, r.agent(false), "fix the date test"); got.Content != finalAnswer {
			t.Fatalf("masked=%v: client got %q", masked, got.Content)
		}
		if want := map[bool]int{true: 0, false: 1}[masked]; r.reviews != want {
			t.Errorf("masked=%v: %d automatic reviews, want %d", masked, r.reviews, want)
		}
	}
}

// TestDeliberateClampsK: a masked-review branch asking for more steps than
// there are gets the steps there are, and both numbers are reported.
func TestDeliberateClampsK(t *testing.T) {
	r := newDeliberateRig(t, packetFor, nil)
	r.scriptDeliberation(`{"goal":"g","branches":[{"role":"masked-review","recentSteps":8}]}`, false)
	collect(t, r.agent(false), "fix it")
	cont := mustView(t, r.primaries()[3].Body)
	res := gjson.Parse(cont.Messages[len(cont.Messages)-1].Content)
	if res.Get("branches.0.requested_steps").Int() != 8 || res.Get("branches.0.projected_steps").Int() != 2 || res.Get("branches.0.status").Str != "no_update" {
		t.Errorf("tool result = %s", res.Raw)
	}
	if seed := mustView(t, r.children["masked-review"].Body); len(seed.Messages) != 3 {
		t.Errorf("mid-fork child has %d messages, want the 2 before the first step and the snapshot", len(seed.Messages))
	}
}
