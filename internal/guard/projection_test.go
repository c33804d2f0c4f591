package guard

import (
	"fmt"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/shaperproxy/shaperproxy/conv"
)

// agentHistory returns a history of n messages: a system prompt, a user
// task, then steps of an assistant call and its result (some failing).
func agentHistory(n int, reasoning, output int) *hist {
	h := (&hist{}).system(strings.Repeat("You are a coding agent. ", 400)).user("fix the failing test")
	files := []string{"main.go", "go.mod", "guard/fold.go", "README.md", "conv/turns.go"}
	for i := 0; len(h.msgs) < n; i++ {
		id := fmt.Sprintf("call_%05d", i)
		args := fmt.Sprintf(`{"path":%q,"offset":%d}`, files[i%len(files)], i%7)
		h.assistant(strings.Repeat("Let me look at the file. ", reasoning/25), tc{id, "read_file", args})
		if len(h.msgs) == n {
			break
		}
		out := strings.Repeat("func f() { return nil }\n", output/24)
		if i%9 == 4 {
			out = "Exit code: 1\n" + out
		}
		h.tool(id, out)
	}
	return h
}

func TestProjectionIncremental40000(t *testing.T) {
	g := mustGuard(t, nil)
	h := agentHistory(40000, 50, 50)
	p := g.NewProjection()
	check := func(req *conv.Request, processed int, refold, full bool) {
		t.Helper()
		sig, st := p.Update(req)
		if st.Processed != processed || st.Refold != refold || st.Messages != len(req.Messages) {
			t.Fatalf("stats %+v, want processed %d refold %v", st, processed, refold)
		}
		if !full {
			return
		}
		if want := g.Fold(req); !reflect.DeepEqual(sig, want) {
			t.Fatalf("incremental %+v != full %+v", sig, want)
		}
	}
	req := h.req(t)
	check(req, 40000, false, true)
	check(req, 0, false, false) // the same request again
	h.tool(fmt.Sprintf("call_%05d", 19998), "Error: boom")
	check(h.req(t), 1, false, false)
	body := h.body()
	i := strings.Index(string(body), "fix the failing test")
	body[i] = 'F' // one byte of an early message
	check(mustParse(t, body), 40001, true, true)
}

func TestProjectionStats(t *testing.T) {
	g := mustGuard(t, nil)
	p := g.NewProjection()
	h := failingLoop(2)
	for _, step := range []struct {
		edit      func()
		processed int
		refold    bool
	}{
		{func() {}, 6, false},
		{func() {}, 0, false},
		{func() { h.user("more") }, 1, false},
		{func() { h.msgs = h.msgs[:len(h.msgs)-2] }, 5, true},                    // shortened
		{func() { h.msgs[2], h.msgs[3] = h.msgs[3], h.msgs[2] }, 5, true},        // reordered
		{func() { h.msgs[0] = `{"role":"system", "content":"agent"}` }, 5, true}, // whitespace only
		{func() { h.msgs = nil }, 0, true},
		{func() { h.user("new") }, 1, false},
	} {
		step.edit()
		_, st := p.Update(h.req(t))
		if st.Processed != step.processed || st.Refold != step.refold {
			t.Fatalf("after %d messages: %+v, want processed %d refold %v", len(h.msgs), st, step.processed, step.refold)
		}
	}
}

// randomMessage returns a message built from small pools, so that ids,
// signatures, failures, turns and duplicates collide often.
func randomMessage(r *rand.Rand) string {
	ids := []string{"a", "b", "c", "d", "e", ""}
	args := []string{`{"p":1}`, `{"p":1.0}`, `{"p":"1"}`, `{"p":`, `{"q":[1,2]}`, ``}
	switch r.IntN(10) {
	case 0:
		return `{"role":"user","content":"u` + fmt.Sprint(r.IntN(3)) + `"}`
	case 1, 2, 3:
		var calls []string
		for range r.IntN(3) {
			calls = append(calls, `{"id":`+q(ids[r.IntN(len(ids))])+`,"type":"function","function":{"name":`+
				q([]string{"ls", "cat"}[r.IntN(2)])+`,"arguments":`+q(args[r.IntN(len(args))])+`}}`)
		}
		n := r.IntN(300)
		if r.IntN(8) == 0 {
			n = 11000 + r.IntN(3000) // around the step threshold
		}
		m := `{"role":"assistant","content":"","reasoning_content":` + q(strings.Repeat("é", n))
		if len(calls) > 0 {
			m += `,"tool_calls":[` + strings.Join(calls, ",") + `]`
		}
		return m + `}`
	case 4:
		return `{"role":"system","content":"s"}`
	default:
		out := []string{okOut, failOut, "exit status 1", `{"error":"x"}`, "fine"}[r.IntN(5)]
		return `{"role":"tool","tool_call_id":` + q(ids[r.IntN(len(ids))]) + `,"content":` + q(out) + `}`
	}
}

// TestProjectionEqualsFold: over random appends, edits, reorderings and
// truncations, Update always returns what a full fold returns, and folds
// only the new messages when the prefix is unchanged.
func TestProjectionEqualsFold(t *testing.T) {
	g := mustGuard(t, nil)
	r := rand.New(rand.NewPCG(1, 2))
	for run := range 12 {
		p := g.NewProjection()
		h := &hist{}
		for op := range 150 {
			before := len(h.msgs)
			wantProcessed, wantRefold := -1, false
			switch k := r.IntN(10); {
			case k < 5 || before == 0: // append
				n := 1 + r.IntN(4)
				for range n {
					h.raw(randomMessage(r))
				}
				wantProcessed = n
			case k == 5: // same request
				wantProcessed = 0
			case k == 6: // truncate
				h.msgs = h.msgs[:r.IntN(before)]
				wantProcessed, wantRefold = len(h.msgs), true
			case k == 7: // edit one message
				i := r.IntN(before)
				if m := randomMessage(r); m != h.msgs[i] {
					h.msgs[i] = m
					wantProcessed, wantRefold = len(h.msgs), true
				}
			case k == 8: // swap two messages
				i, j := r.IntN(before), r.IntN(before)
				h.msgs[i], h.msgs[j] = h.msgs[j], h.msgs[i]
			default: // replace the tail
				if before > 1 {
					h.msgs = append(h.msgs[:before-1], randomMessage(r))
				}
			}
			req := h.req(t)
			sig, st := p.Update(req)
			want := g.Fold(req)
			if !reflect.DeepEqual(sig, want) {
				t.Fatalf("run %d op %d: incremental %+v != full %+v", run, op, sig, want)
			}
			if wantProcessed >= 0 && (st.Processed != wantProcessed || st.Refold != wantRefold) && !(wantRefold && before == 0) {
				t.Fatalf("run %d op %d: stats %+v, want processed %d refold %v", run, op, st, wantProcessed, wantRefold)
			}
			checkOpenTurn(t, req, want.Stall)
		}
	}
}

// checkOpenTurn compares the fold's turn measure with conv's own turns.
func checkOpenTurn(t *testing.T, req *conv.Request, s stall) {
	t.Helper()
	turn, ok := req.OpenTurn()
	if !ok {
		if s.Known || s.Steps != 0 {
			t.Fatalf("no turn but %+v", s)
		}
		return
	}
	chars, last := 0, 0
	for _, st := range turn.Steps {
		last = utf8.RuneCountInString(req.Messages[st.Assistant].Reasoning)
		chars += last
	}
	if steps := turnSteps(req); len(steps) != len(turn.Steps) || (len(steps) > 0 && steps[len(steps)-1] != last) {
		t.Fatalf("TurnSteps %v", steps)
	}
	if s.Steps != len(turn.Steps) || s.TurnChars != chars || s.StepChars != last {
		t.Fatalf("fold %+v, conv turn %d steps %d chars (last %d)", s, len(turn.Steps), chars, last)
	}
	if req.StartsNewTurn() != (s.Steps == 0) {
		t.Fatalf("StartsNewTurn %v, steps %d", req.StartsNewTurn(), s.Steps)
	}
}

// reparsing returns a parse, by rp, of h's body as it is when called.
func reparsing(t *testing.T, rp *conv.Reparser, h *hist) func() *conv.Request {
	return func() *conv.Request {
		t.Helper()
		r, err := rp.Parse(h.body())
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
}

// TestProjectionRepeated: requests the proxy's Reparser read against the
// view folded last are continued without hashing their prefix; the
// signals are the full fold's, and the hash carried on still matches a
// request parsed on its own (which the prefix check hashes) and still
// catches an edited history.
func TestProjectionRepeated(t *testing.T) {
	g := mustGuard(t, nil)
	p := g.NewProjection()
	rp := conv.NewReparser(64 << 20)
	h := agentHistory(200, 300, 300)
	parse := reparsing(t, rp, h)
	step := func(name string, req *conv.Request, processed int, refold, repeated bool) {
		t.Helper()
		sig, st := p.Update(req)
		if st.Processed != processed || st.Refold != refold || st.Repeated != repeated {
			t.Fatalf("%s: stats %+v, want processed %d, refold %v, repeated %v", name, st, processed, refold, repeated)
		}
		if want := g.Fold(req); !reflect.DeepEqual(sig, want) {
			t.Fatalf("%s: incremental %+v != full %+v", name, sig, want)
		}
	}
	step("first", parse(), 200, false, false)
	h.assistant("Let me run the tests.", tc{"call_a", "run_tests", `{}`}).tool("call_a", "Exit code: 1\nFAIL")
	step("next, read against the first", parse(), 2, false, true)
	step("the same again", parse(), 0, false, true)
	h.user("go on")
	step("parsed on its own: the carried hash checks it", h.req(t), 1, false, false)
	h.user("and again")
	step("the Reparser's again, its base not the view folded: hashed", parse(), 1, false, false)
	h.user("more")
	step("then read against it", parse(), 1, false, true)
	h.msgs[1] = `{"role":"user","content":"fix the failing tests"}`
	step("an early message edited", parse(), 205, true, false)
	h.user("last")
	step("read against the edited one", parse(), 1, false, true)
}

// TestProjectionTwoBack: a request the Reparser read against the view
// folded before the last one (a conversation's request sent twice at
// once has each later one read so) hashes for the prefix check only the
// messages after that view's, from its hash (Back); the signals are the
// full fold's; and a last request whose history differed from that view's
// before its end is still caught (folded again).
func TestProjectionTwoBack(t *testing.T) {
	g := mustGuard(t, nil)
	p := g.NewProjection()
	rp := conv.NewReparser(64 << 20)
	h := agentHistory(200, 300, 300)
	step := func(name string, req *conv.Request, processed int, refold, back bool) {
		t.Helper()
		sig, st := p.Update(req)
		if st.Processed != processed || st.Refold != refold || st.Back != back || st.Repeated && back {
			t.Fatalf("%s: stats %+v, want processed %d, refold %v, back %v", name, st, processed, refold, back)
		}
		if want := g.Fold(req); !reflect.DeepEqual(sig, want) {
			t.Fatalf("%s: incremental %+v != full %+v", name, sig, want)
		}
	}
	parse := reparsing(t, rp, h)
	a := parse() // kept by the Reparser
	step("first", a, 200, false, false)
	h.user("go on")
	step("parsed on its own", h.req(t), 1, false, false) // not the Reparser's: the next is read against a
	h.assistant("Let me run the tests.", tc{"call_a", "run_tests", `{}`}).tool("call_a", "Exit code: 1\nFAIL")
	c := parse()
	if _, base, _ := c.Lineage(); base != a.ID() {
		t.Fatalf("the third request was read against view %d, not the first's %d: the test checks nothing", base, a.ID())
	}
	step("read against the view two back", c, 2, false, true)

	// The last request differed from the view two back before its end: the
	// hash from that view's state does not match the last's, and all is
	// folded again.
	d := parse() // kept; read against c
	step("read against the last", d, 0, false, false)
	saved := h.msgs[1]
	h.msgs[1] = `{"role":"user","content":"fix the failing tests"}`
	step("an early message edited, parsed on its own", h.req(t), len(h.msgs), true, false)
	h.msgs[1] = saved
	h.user("back to the history before")
	step("read against the view two back, the last differed", parse(), len(h.msgs), true, true)
}
