package guard

import (
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"

	"github.com/shaperproxy/shaperproxy/conv"
)

// conversation drives a Guard through the requests of one conversation
// the way the wiring does, restoring the State from bytes each time.
type conversation struct {
	t     *testing.T
	g     *Guard
	p     *projection
	state []byte
}

func newConversation(t *testing.T, g *Guard) *conversation {
	return &conversation{t: t, g: g, p: g.NewProjection()}
}

func (c *conversation) load() state {
	var st state
	if c.state != nil {
		if err := st.UnmarshalBinary(c.state); err != nil {
			c.t.Fatal(err)
		}
	}
	return st
}

func (c *conversation) save(st state) {
	b, err := st.MarshalBinary()
	if err != nil {
		c.t.Fatal(err)
	}
	c.state = b
}

// send runs one request and returns the decision and the body sent.
func (c *conversation) send(h *hist) (decision, signals, []byte) {
	c.t.Helper()
	req := h.req(c.t)
	sig, _ := c.p.Update(req)
	d, st := c.g.Decide(c.load(), req, sig)
	c.save(st)
	out, err := applyPlacements(req, d.Placements)
	if err != nil {
		c.t.Fatal(err)
	}
	if _, err := conv.ParseRequest(out); err != nil {
		c.t.Fatalf("edited body is not a chat request: %v", err)
	}
	return d, sig, out
}

func kinds(evs []event) []kind {
	var ks []kind
	for _, e := range evs {
		ks = append(ks, e.Kind)
	}
	return ks
}

func TestEchoNoticeOnce(t *testing.T) {
	g := mustGuard(t, nil)
	c := newConversation(t, g)
	h := failingLoop(2)
	if d, _, _ := c.send(h); len(d.Placements)+len(d.Events) != 0 {
		t.Fatalf("two failures: %+v", d)
	}
	h.assistant("", tc{"call_2", "read_file", `{"path":"main.go"}`}).tool("call_2", failOut)
	d, _, out := c.send(h)
	if !reflect.DeepEqual(kinds(d.Events), []kind{echoNotice}) || d.Events[0].Count != 3 || d.Events[0].Tool != "read_file" {
		t.Fatalf("third failure: %+v", d)
	}
	last := len(h.msgs) - 1
	want := []placement{{last, echoText("read_file", 3)}}
	if !reflect.DeepEqual(d.Placements, want) {
		t.Fatalf("placements %+v, want %+v", d.Placements, want)
	}
	sent := mustParse(t, out).Messages[last]
	if sent.Role != "tool" || sent.Content != failOut+"\n\n"+want[0].Text {
		t.Fatalf("sent tool result %q", sent.Content)
	}

	// The same history again (a retry): no new notice, the old one is
	// placed again at the same message.
	d, _, out2 := c.send(h)
	if len(d.Events) != 0 || !reflect.DeepEqual(d.Placements, want) || string(out2) != string(out) {
		t.Fatalf("retry: %+v", d)
	}
	// The model answers, a fourth and fifth failure: still no notice.
	for i := 3; i < 5; i++ {
		id := fmt.Sprintf("call_%d", i)
		h.assistant("", tc{id, "read_file", `{"path":"main.go"}`}).tool(id, failOut)
		if d, _, _ := c.send(h); len(d.Events) != 0 || len(d.Placements) != 1 {
			t.Fatalf("failure %d after the notice: %+v", i+1, d)
		}
	}
	// The third new failure after the notice: a new notice.
	h.assistant("", tc{"call_5", "read_file", `{"path":"main.go"}`}).tool("call_5", failOut)
	d, _, _ = c.send(h)
	if !reflect.DeepEqual(kinds(d.Events), []kind{echoNotice}) || d.Events[0].Count != 3 {
		t.Fatalf("three new failures: %+v", d)
	}
	if len(d.Placements) != 2 || d.Placements[1].Message != len(h.msgs)-1 || c.load().AckCallID != "call_5" {
		t.Fatalf("second notice placements %+v state %+v", d.Placements, c.load())
	}
}

func TestEchoAckWithoutState(t *testing.T) {
	// Without the persisted State (a lost store) the same run would be
	// reported again: that is why the wiring must keep it.
	g := mustGuard(t, nil)
	req := failingLoop(3).req(t)
	sig := g.Fold(req)
	d1, st := g.Decide(state{}, req, sig)
	d2, _ := g.Decide(state{}, req, sig)
	d3, _ := g.Decide(st, req, sig)
	if len(d1.Events) != 1 || len(d2.Events) != 1 || len(d3.Events) != 0 {
		t.Fatalf("events %v %v %v", d1.Events, d2.Events, d3.Events)
	}
}

func TestEchoThresholdConfigurable(t *testing.T) {
	g := mustGuard(t, func(c *Config) { c.EchoThreshold = 5 })
	req := failingLoop(4).req(t)
	if d, _ := g.Decide(state{}, req, g.Fold(req)); len(d.Events) != 0 {
		t.Fatal("4 failures with threshold 5")
	}
	req = failingLoop(5).req(t)
	if d, _ := g.Decide(state{}, req, g.Fold(req)); len(d.Events) != 1 {
		t.Fatal("5 failures with threshold 5")
	}
}

func TestNoticeNotReappliedWhenMessageChanged(t *testing.T) {
	g := mustGuard(t, nil)
	req := failingLoop(3).req(t)
	_, st := g.Decide(state{}, req, g.Fold(req))
	h := failingLoop(3)
	h.msgs[len(h.msgs)-1] = `{"role":"tool","tool_call_id":"call_2","content":"Error: other"}`
	req = h.req(t)
	d, _ := g.Decide(st, req, g.Fold(req))
	if len(d.Placements) != 0 {
		t.Fatalf("notice placed on a changed message: %+v", d.Placements)
	}
}

func TestStateRoundTrip(t *testing.T) {
	st := state{
		AckCallID: "call_ü", StallReported: true, StallPending: true,
		Pending: stallCounts{13000, 41000, 7}, StepDownLeft: 2,
		Notices: []notice{{echoNotice, 12, 0xdeadbeefcafe, echoText("bash", 3)}, {stallInterrupted, 40, 1, "x"}},
	}
	b, err := st.MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	var got state
	if err := got.UnmarshalBinary(b); err != nil || !reflect.DeepEqual(got, st) {
		t.Fatalf("round trip: %+v, %v", got, err)
	}
	var zero state
	b, _ = zero.MarshalBinary()
	if err := got.UnmarshalBinary(b); err != nil || !reflect.DeepEqual(got, zero) {
		t.Fatalf("zero round trip: %+v, %v", got, err)
	}
	for _, bad := range [][]byte{nil, {9}, b[:len(b)-1], append(b, 0)} {
		keep := st
		if err := keep.UnmarshalBinary(bad); !errors.Is(err, errBadState) || !reflect.DeepEqual(keep, st) {
			t.Errorf("UnmarshalBinary(%v) = %v, state %+v", bad, err, keep)
		}
	}
	st.Notices = make([]notice, maxNotices+1)
	if _, err := st.MarshalBinary(); err == nil {
		t.Error("too many notices marshalled")
	}
}

func TestMaxNotices(t *testing.T) {
	g := mustGuard(t, nil)
	st := state{}
	h := failingLoop(0)
	for i := range 3 * (maxNotices + 2) {
		id := fmt.Sprintf("call_%d", i)
		h.assistant("", tc{id, "read_file", `{"path":"main.go"}`}).tool(id, failOut)
		req := h.req(t)
		_, st = g.Decide(st, req, g.Fold(req))
	}
	if len(st.Notices) != maxNotices {
		t.Fatalf("%d notices kept", len(st.Notices))
	}
	if _, err := st.MarshalBinary(); err != nil {
		t.Fatal(err)
	}
}

// stallStep adds a step with n characters of reasoning and a tool call
// with its (successful) result.
func stallStep(h *hist, n int) *hist {
	id := fmt.Sprintf("s%d", len(h.msgs))
	return h.assistant(strings.Repeat("x", n), tc{id, "grep", `{"q":"` + id + `"}`}).tool(id, okOut)
}

func TestStallObserveOncePerStall(t *testing.T) {
	g := mustGuard(t, func(c *Config) { c.StallTurnChars = 0 })
	c := newConversation(t, g)
	h := (&hist{}).system("agent").user("go")
	steps := []struct {
		chars int
		want  []kind
	}{
		{100, nil},
		{13000, []kind{stallObserved}}, // stalled: recorded
		{12500, nil},                   // continuing: not again
		{200, nil},                     // cleared
		{12000, []kind{stallObserved}}, // stalled again: recorded again
	}
	for i, s := range steps {
		stallStep(h, s.chars)
		d, sig, out := c.send(h)
		if !reflect.DeepEqual(kinds(d.Events), s.want) {
			t.Fatalf("step %d (%d chars): events %v, want %v", i, s.chars, kinds(d.Events), s.want)
		}
		if len(d.Placements) != 0 || d.StepDown || string(out) != string(h.body()) {
			t.Fatalf("observe changed the request: %+v", d)
		}
		if s.want != nil {
			e := d.Events[0]
			if e.Stall.StepChars != s.chars || !e.Stall.OverStep || e.Effort != "max" || sig.Stall.Steps != i+1 {
				t.Fatalf("event %+v", e)
			}
		}
	}
}

func TestStallTurnThreshold(t *testing.T) {
	g := mustGuard(t, nil)
	h := (&hist{}).user("go")
	for range 4 {
		stallStep(h, 9000)
	}
	s := g.Fold(h.req(t)).Stall
	if s.Stalled || s.TurnChars != 36000 || s.Steps != 4 {
		t.Fatalf("%+v", s)
	}
	stallStep(h, 9000)
	s = g.Fold(h.req(t)).Stall
	if !s.Stalled || !s.OverTurn || s.OverStep {
		t.Fatalf("%+v", s)
	}
	// A new turn starts from zero.
	h.assistant("done").user("next")
	s = g.Fold(h.req(t)).Stall
	if s.Stalled || !s.Known || s.TurnChars != 0 || s.Steps != 0 {
		t.Fatalf("new turn: %+v", s)
	}
}

func TestStallUnknownWithoutReasoning(t *testing.T) {
	g := mustGuard(t, nil)
	st := state{StallReported: true}
	h := (&hist{}).user("go")
	h.raw(`{"role":"assistant","content":null,"tool_calls":[{"id":"a","type":"function","function":{"name":"ls","arguments":"{}"}}]}`).tool("a", okOut)
	req := h.req(t)
	sig := g.Fold(req)
	if sig.Stall.Known {
		t.Fatalf("a step without reasoning is known: %+v", sig.Stall)
	}
	if _, next := g.Decide(st, req, sig); !next.StallReported {
		t.Fatal("an unknown measure cleared the report")
	}
}

func TestStallThinkTags(t *testing.T) {
	g := mustGuard(t, nil)
	h := (&hist{}).user("go")
	h.raw(`{"role":"assistant","content":"<think>` + strings.Repeat("é", 12000) + `</think>answer"}`)
	s := g.Fold(h.req(t)).Stall
	if !s.Known || s.StepChars != 12000 || !s.Stalled {
		t.Fatalf("%+v", s)
	}
	if n := stepChars(conv.Choice{Content: "<think>abc</think>x"}); n != 3 {
		t.Fatalf("StepChars think = %d", n)
	}
	if n := stepChars(conv.Choice{Reasoning: "日本語", Content: "x"}); n != 3 {
		t.Fatalf("StepChars = %d", n)
	}
}

// TestObserveDoesNotHideEcho: the third failure and a stall in one
// request; observing the stall leaves the ECHO notice as it is.
func TestObserveDoesNotHideEcho(t *testing.T) {
	for _, action := range []string{StallObserve, StallInterrupt} {
		g := mustGuard(t, func(c *Config) { c.StallAction = action })
		h := failingLoop(2)
		h.assistant(strings.Repeat("x", 20000), tc{"call_2", "read_file", `{"path":"main.go"}`}).tool("call_2", failOut)
		req := h.req(t)
		d, st := g.Decide(state{}, req, g.Fold(req))
		var want []kind
		if action == StallObserve {
			want = []kind{echoNotice, stallObserved}
		} else {
			want = []kind{echoNotice, stallInterrupted}
		}
		if !reflect.DeepEqual(kinds(d.Events), want) || st.AckCallID != "call_2" {
			t.Fatalf("%s: events %v, state %+v", action, kinds(d.Events), st)
		}
		if len(d.Placements) != len(want)-1+boolInt(action == StallInterrupt) {
			t.Fatalf("%s: placements %+v", action, d.Placements)
		}
		out, err := applyPlacements(req, d.Placements)
		if err != nil {
			t.Fatal(err)
		}
		got := mustParse(t, out).Messages[len(h.msgs)-1].Content
		if !strings.Contains(got, echoText("read_file", 3)) {
			t.Fatalf("%s: %q", action, got)
		}
	}
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// TestInterruptStepDown is the state machine of stall_action =
// "interrupt" with step_down_requests = 2: the request that carries the
// notice and the next are lowered, the third is not.
func TestInterruptStepDown(t *testing.T) {
	g := mustGuard(t, func(c *Config) { c.StallAction = StallInterrupt; c.StepDownRequests = 2 })
	c := newConversation(t, g)
	h := (&hist{}).system("agent").user("go")
	stallStep(h, 100)
	if d, _, _ := c.send(h); d.StepDown || len(d.Events) != 0 {
		t.Fatalf("before: %+v", d)
	}
	stallStep(h, 15000)
	d, _, out := c.send(h)
	if !reflect.DeepEqual(kinds(d.Events), []kind{stallInterrupted}) || !d.StepDown {
		t.Fatalf("interrupt: %+v", d)
	}
	last := len(h.msgs) - 1
	if len(d.Placements) != 1 || d.Placements[0].Message != last ||
		!strings.HasSuffix(mustParse(t, out).Messages[last].Content, "\n\n"+stallText(15000, 15100)) {
		t.Fatalf("interrupt placement %+v", d.Placements)
	}
	stallStep(h, 14000) // still stalled: no second interrupt
	if d, _, _ := c.send(h); !d.StepDown || len(d.Events) != 0 || len(d.Placements) != 1 {
		t.Fatalf("second request: %+v", d)
	}
	stallStep(h, 100)
	if d, _, _ := c.send(h); d.StepDown {
		t.Fatalf("third request still lowered: %+v", d)
	}
	if st := c.load(); st.StepDownLeft != 0 || st.StallPending || st.StallReported {
		t.Fatalf("state %+v", st)
	}
	body := h.body()
	if got, changed := stepDown(body, deepseek, true); !changed || !strings.Contains(string(got), `"reasoning_effort":"high"`) {
		t.Fatalf("lowered body %s", got)
	}
}

func TestInterruptFromResponse(t *testing.T) {
	g := mustGuard(t, func(c *Config) { c.StallAction = StallInterrupt; c.StepDownRequests = 1 })
	h := (&hist{}).user("go")
	stallStep(h, 10)
	req := h.req(t)
	sig := g.Fold(req)
	d, st := g.Decide(state{}, req, sig)
	if len(d.Events) != 0 {
		t.Fatal(d)
	}
	resp := conv.Choice{Reasoning: strings.Repeat("r", 12345), ToolCalls: []conv.ToolCall{{ID: "z", Name: "ls", Arguments: "{}"}}}
	evs, st := g.ObserveResponse(st, req, sig, resp)
	if len(evs) != 0 || !st.StallPending || st.Pending.StepChars != 12345 || st.Pending.TurnChars != 12355 {
		t.Fatalf("response: %v %+v", evs, st)
	}
	// The next request carries the response as history: it is placed
	// there, once.
	h.raw(`{"role":"assistant","content":null,"reasoning_content":`+q(resp.Reasoning)+
		`,"tool_calls":[{"id":"z","type":"function","function":{"name":"ls","arguments":"{}"}}]}`).tool("z", okOut)
	req = h.req(t)
	d, st = g.Decide(st, req, g.Fold(req))
	if !reflect.DeepEqual(kinds(d.Events), []kind{stallInterrupted}) || !d.StepDown || len(d.Placements) != 1 ||
		d.Placements[0].Text != stallText(12345, 12355) {
		t.Fatalf("next request: %+v", d)
	}
	if d, _ = g.Decide(st, req, g.Fold(req)); len(d.Events) != 0 || d.StepDown {
		t.Fatalf("after the window: %+v", d)
	}
}

func TestInterruptPendingRules(t *testing.T) {
	g := mustGuard(t, func(c *Config) { c.StallAction = StallInterrupt; c.StepDownRequests = 3 })
	pending := state{StallReported: true, StallPending: true, Pending: stallCounts{13000, 13000, 1}}

	// A request that starts a new turn drops it.
	h := (&hist{}).user("go").assistant("x").user("next question")
	req := h.req(t)
	d, st := g.Decide(pending, req, g.Fold(req))
	if len(d.Placements) != 0 || d.StepDown || st.StallPending {
		t.Fatalf("new turn: %+v %+v", d, st)
	}
	// A request ending with an assistant message waits.
	h = (&hist{}).user("go").assistant("x", tc{"a", "ls", "{}"}).tool("a", okOut).assistant("prefill")
	req = h.req(t)
	d, st = g.Decide(pending, req, g.Fold(req))
	if len(d.Placements) != 0 || d.StepDown || !st.StallPending {
		t.Fatalf("assistant last: %+v %+v", d, st)
	}
	// A user message inside the tool loop takes it (appended, not a new
	// message).
	h = (&hist{}).user("go").assistant("x", tc{"a", "ls", "{}"}).tool("a", okOut).user("also check tests")
	req = h.req(t)
	d, st = g.Decide(pending, req, g.Fold(req))
	if len(d.Placements) != 1 || d.Placements[0].Message != 3 || !d.StepDown || st.StepDownLeft != 2 {
		t.Fatalf("user in loop: %+v %+v", d, st)
	}
}

func TestStepDownZeroNeverLowers(t *testing.T) {
	g := mustGuard(t, func(c *Config) { c.StallAction = StallInterrupt })
	h := (&hist{}).user("go")
	stallStep(h, 50000)
	req := h.req(t)
	d, st := g.Decide(state{}, req, g.Fold(req))
	if len(d.Events) != 1 || d.StepDown || st.StepDownLeft != 0 {
		t.Fatalf("%+v %+v", d, st)
	}
}

func TestDisabled(t *testing.T) {
	g, err := New(Config{StallAction: "bogus"})
	if err != nil || g.Enabled() {
		t.Fatalf("disabled config: %v", err)
	}
	req := failingLoop(5).req(t)
	sig, stats := g.NewProjection().Update(req)
	d, st := g.Decide(state{}, req, sig)
	if !reflect.DeepEqual(sig, signals{}) || stats.Processed != 0 || len(d.Placements)+len(d.Events) != 0 || !reflect.DeepEqual(st, state{}) {
		t.Fatalf("disabled guard acted: %+v %+v %+v", sig, d, st)
	}
}
