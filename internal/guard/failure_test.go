package guard

import (
	"strings"
	"testing"
)

func TestFailureRules(t *testing.T) {
	g := mustGuard(t, nil)
	long := strings.Repeat("line of output\n", 20)
	for _, tc := range []struct {
		name    string
		raw     string // the tool message; content is read from it
		content string
		want    bool
	}{
		{"plain output", "", okOut, false},
		{"empty", "", "", false},
		{"error prefix", "", "Error: file not found", true},
		{"error prefix after blank", "", "\n  Error: boom", true},
		{"ERROR prefix", "", "ERROR: boom", true},
		{"lower error prefix", "", "error: boom", true},
		{"claude tool_use_error", "", "<tool_use_error>File does not exist.</tool_use_error>", true},
		{"error word inside", "", "compiled with 0 errors\nError: is a word here", false},
		{"error without colon", "", "Error reading config is logged", false},
		{"is_error flag", `{"role":"tool","tool_call_id":"x","is_error":true,"content":"whatever"}`, "whatever", true},
		{"is_error false", `{"role":"tool","tool_call_id":"x","is_error":false,"content":"whatever"}`, "whatever", false},
		{"is_error string", `{"role":"tool","tool_call_id":"x","is_error":"true","content":"whatever"}`, "whatever", false},
		{"error object", "", `{"error":"permission denied"}`, true},
		{"error object nested value", "", ` {"error":{"code":13,"message":"x"},"id":1}`, true},
		{"error null", "", `{"error":null,"result":5}`, false},
		{"error false", "", `{"error":false}`, false},
		{"error empty", "", `{"error":""}`, false},
		{"error key nested", "", `{"result":{"error":"x"}}`, false},
		{"error array", "", `[{"error":"x"}]`, false},
		{"invalid json with error", "", `{"error": "x"`, false},
		{"exit code 1", "", "Exit code: 1\nWall time: 0.2s\nOutput:\nFAIL", true},
		{"exit code 0", "", "Exit code: 0\nWall time: 0.2s\nOutput:\nok", false},
		{"Exit code 2 last line", "", long + "Exit code 2", true},
		{"exit status 1", "", "go: build failed\nexit status 1\n", true},
		{"exit_code=127", "", "exit_code=127", true},
		{"process exited", "", "lots\nProcess exited with code 1", true},
		{"negative exit", "", "exit code: -1", true},
		{"exit code inside a line", "", "the exit code: 1 was printed", false},
		{"exit code in the middle", "", long + "exit code: 1\n" + long, false},
		{"exit code within window", "", "a\nb\nc\nd\nexit status 3\n" + long, true},
		{"exit code beyond window", "", "a\nb\nc\nd\ne\nexit status 3\n" + long, false},
		{"exit code not a number", "", "exit code: x", false},
	} {
		raw := tc.raw
		if raw == "" {
			raw = `{"role":"tool","tool_call_id":"x","content":` + q(tc.content) + `}`
		}
		if got := g.rules.failed([]byte(raw), tc.content); got != tc.want {
			t.Errorf("%s: failed = %v, want %v", tc.name, got, tc.want)
		}
	}
}

func TestFailureRulesConfigurable(t *testing.T) {
	g := mustGuard(t, func(c *Config) {
		c.FailurePrefixes = []string{"FAILED"}
		c.FailureLines = []string{`BUILD FAILURE`}
		c.ErrorFlags = []string{"failed"}
		c.ErrorKeys = nil
	})
	for content, want := range map[string]bool{
		"FAILED to open":                    true,
		"Error: now just text":              false,
		"[INFO] x\nBUILD FAILURE\n[INFO] y": true,
		`{"error":"x"}`:                     false,
		"exit code: 1":                      false,
	} {
		raw := `{"role":"tool","content":` + q(content) + `}`
		if got := g.rules.failed([]byte(raw), content); got != want {
			t.Errorf("%q: failed = %v, want %v", content, got, want)
		}
	}
	if !g.rules.failed([]byte(`{"role":"tool","failed":true}`), "") {
		t.Error(`custom error flag "failed" not honoured`)
	}
}
