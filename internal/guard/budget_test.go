package guard

import (
	"strings"
	"testing"

	"github.com/tidwall/gjson"
)

// TestStepDownWindowBudget is TestStepDownWindow for a client that sets a
// numeric budget instead of an effort (OpenRouter's reasoning.max_tokens,
// an Anthropic-style thinking.budget_tokens): the interrupt halves it for
// two requests, then the client's own value passes again.
func TestStepDownWindowBudget(t *testing.T) {
	g := mustGuard(t, func(c *Config) { c.StallAction = StallInterrupt; c.StepDownRequests = 2 })
	for _, tc := range []struct{ upstream, controls, path string }{
		{"https://openrouter.ai/api/v1", `"reasoning":{"max_tokens":16000}`, "reasoning.max_tokens"},
		{"https://api.example.com/v1", `"thinking":{"type":"enabled","budget_tokens":6000}`, "thinking.budget_tokens"},
	} {
		h := (&hist{}).user("go")
		stallStep(h, 20000)
		var st state
		var got []string
		for range 3 {
			body := strings.Replace(string(h.body()), `"reasoning_effort":"max"`, tc.controls, 1)
			req := mustParse(t, []byte(body))
			var d decision
			d, st = g.Decide(st, req, g.Fold(req))
			out, _ := stepDown(req.Body, g.Lowering("r", tc.upstream), d.StepDown)
			got = append(got, gjson.GetBytes(out, tc.path).Raw)
			stallStep(h, 10)
		}
		want := map[string]string{"reasoning.max_tokens": "8000,8000,16000", "thinking.budget_tokens": "3000,3000,6000"}[tc.path]
		if strings.Join(got, ",") != want {
			t.Errorf("%s: budgets %v, want %s", tc.path, got, want)
		}
	}
}
