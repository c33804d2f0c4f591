package guard

import (
	"fmt"
	"testing"
)

// permutations returns every order of 0..n-1.
func permutations(n int) [][]int {
	if n == 0 {
		return [][]int{{}}
	}
	var out [][]int
	for _, p := range permutations(n - 1) {
		for i := 0; i <= len(p); i++ {
			q := append(append(append([]int{}, p[:i]...), n-1), p[i:]...)
			out = append(out, q)
		}
	}
	return out
}

// expectedTail counts, independently of the package, the failures at the
// tail in call order: from the newest call backwards while calls fail.
func expectedTail(fail [4]bool) int {
	n := 0
	for i := 3; i >= 0 && fail[i]; i-- {
		n++
	}
	return n
}

// causalHistory builds 4 calls with the same signature whose results
// arrive in the given order, in one of three layouts:
//
//	parallel:    one assistant message with the 4 calls, then the results;
//	sequential:  4 assistant messages with one call each, then the results;
//	interleaved: each call is made as late as possible, just before its
//	             result is due (results arrive in order, calls in order).
func causalHistory(layout string, fail [4]bool, order []int) (*hist, map[int]int) {
	h := (&hist{}).system("agent").user("go")
	id := func(i int) string { return fmt.Sprintf("call_%d", i) }
	call := func(i int) tc { return tc{id(i), "bash", `{"cmd":"make test"}`} }
	resultAt := map[int]int{} // call -> message index of its result
	result := func(i int) {
		out := okOut
		if fail[i] {
			out = "Exit code: 2\nFAIL"
		}
		resultAt[i] = len(h.msgs)
		h.tool(id(i), out)
	}
	switch layout {
	case "parallel":
		h.assistant("", call(0), call(1), call(2), call(3))
		for _, i := range order {
			result(i)
		}
	case "sequential":
		for i := range 4 {
			h.assistant("", call(i))
		}
		for _, i := range order {
			result(i)
		}
	case "interleaved":
		made := 0
		for _, i := range order {
			for ; made <= i; made++ {
				h.assistant("", call(made))
			}
			result(i)
		}
	}
	return h, resultAt
}

// TestCausalOrderTable is the causal-order table of the original design:
// 4 calls with one signature × 16 success/failure patterns × 24 orders in
// which their results arrive, in three layouts.
func TestCausalOrderTable(t *testing.T) {
	g := mustGuard(t, nil)
	orders := permutations(4)
	if len(orders) != 24 {
		t.Fatalf("%d permutations", len(orders))
	}
	cases := 0
	for _, layout := range []string{"parallel", "sequential", "interleaved"} {
		for pattern := range 16 {
			var fail [4]bool
			for i := range 4 {
				fail[i] = pattern&(1<<i) != 0
			}
			want := expectedTail(fail)
			for _, order := range orders {
				cases++
				h, resultAt := causalHistory(layout, fail, order)
				req := h.req(t)
				sig := g.Fold(req)
				name := fmt.Sprintf("%s fail=%v order=%v", layout, fail, order)
				if got := sig.Echo.Count(""); got != want {
					t.Fatalf("%s: tail count %d, want %d", name, got, want)
				}
				for k, c := range sig.Echo.Chain {
					if wantID := fmt.Sprintf("call_%d", 4-want+k); c.ID != wantID || c.Result != resultAt[4-want+k] {
						t.Fatalf("%s: chain[%d] = %+v, want %s at message %d", name, k, c, wantID, resultAt[4-want+k])
					}
				}
				d, st := g.Decide(state{}, req, sig)
				if fired := len(d.Placements) == 1; fired != (want >= 3) {
					t.Fatalf("%s: notice %v with tail %d", name, d.Placements, want)
				}
				if want >= 3 && (d.Placements[0].Message != resultAt[3] || st.AckCallID != "call_3") {
					t.Fatalf("%s: placed at %d ack %q, want the result of call_3 (%d)", name, d.Placements[0].Message, st.AckCallID, resultAt[3])
				}
			}
		}
	}
	if cases != 3*384 {
		t.Fatalf("%d cases", cases)
	}
}

// TestCausalOrderNamedCases spells out the two cases the rule is for.
func TestCausalOrderNamedCases(t *testing.T) {
	g := mustGuard(t, nil)
	// An old call's success arrives last; the three newer calls failed.
	h, _ := causalHistory("parallel", [4]bool{false, true, true, true}, []int{1, 2, 3, 0})
	if n := g.Fold(h.req(t)).Echo.Count(""); n != 3 {
		t.Errorf("late success of the oldest call erased newer failures: %d", n)
	}
	// An old failure arrives last after a newer success: no run.
	h, _ = causalHistory("parallel", [4]bool{true, true, true, false}, []int{3, 1, 2, 0})
	if n := g.Fold(h.req(t)).Echo.Count(""); n != 0 {
		t.Errorf("old failures jumped over a newer success: %d", n)
	}
}
