package guard

import (
	"strings"
	"testing"

	"github.com/shaperproxy/shaperproxy/internal/testenv"
)

// TestDeepJSONInHistory: tool-call arguments and tool results nested
// millions of levels deep (strings inside a shallow, valid request) are
// unknown arguments and plain text: the fold neither crashes nor counts
// them, and a result that is JSON within the depth limit still counts.
func TestDeepJSONInHistory(t *testing.T) {
	g := mustGuard(t, nil)
	// 300,000 levels: gjson's recursion needed some 30 MB of stack for
	// them, past testenv.DeepStack.
	deepArgs := strings.Repeat("[", 300_000)
	deepResult := `{"error":` + strings.Repeat(`{"a":[`, 150_000)
	h := (&hist{}).user("go")
	for _, id := range []string{"a", "b", "c"} {
		h.assistant("", tc{id, "bash", deepArgs}).tool(id, deepResult)
	}
	testenv.WithStack(t, testenv.DeepStack, func() {
		if _, ok := signature("bash", deepArgs); ok {
			t.Error("deep arguments have a signature")
		}
		if _, ok := canonical(deepArgs); ok {
			t.Error("deep arguments have a canonical form")
		}
		if g.rules.errorObject(deepResult) {
			t.Error("an unclosed deep object is an error object")
		}
		if n := g.Fold(h.req(t)).Echo.Count(""); n != 0 {
			t.Errorf("deep arguments counted %d times", n)
		}
	})
	nested := strings.Repeat(`{"x":`, 5000) + "1" + strings.Repeat("}", 5000)
	if !g.rules.errorObject(`{"error":` + nested + `}`) {
		t.Error("an error object nested 5000 levels deep is not a failure")
	}
}
