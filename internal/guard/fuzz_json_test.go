package guard

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"unicode/utf8"
)

// errorObjectReference is errorObject written with encoding/json: the
// content, trimmed, is a JSON object (nested at most conv.MaxDepth deep)
// with a top-level key of keys whose value is not null, false or "".
// Every occurrence of a repeated key is looked at.
func errorObjectReference(keys []string, content string) bool {
	s := strings.TrimSpace(content)
	if !strings.HasPrefix(s, "{") || !json.Valid([]byte(s)) {
		return false
	}
	d := json.NewDecoder(strings.NewReader(s))
	if _, err := d.Token(); err != nil {
		return false
	}
	for d.More() {
		k, err := d.Token()
		var v json.RawMessage
		if err != nil || d.Decode(&v) != nil {
			return false
		}
		name, _ := k.(string)
		if contains(keys, name) && !bytes.Equal(v, []byte("null")) && !bytes.Equal(v, []byte("false")) && !bytes.Equal(v, []byte(`""`)) {
			return true
		}
	}
	return false
}

// FuzzFailureRules checks the guard's reading of tool results against
// encoding/json: a JSON error object is a failure exactly when the
// reference says so, whatever its nesting (no recursion), and no content
// makes the rules panic.
func FuzzFailureRules(f *testing.F) {
	for _, s := range []string{
		`{"error":"boom"}`, `{"error":null}`, `{"error":false}`, `{"error":""}`, `{"error":0}`, ` {"ok":1,"error":{"code":2}} `,
		`{"error":"\u0000"}`, `{"error":null,"error":"x"}`, `{"a":{"error":"nested"}}`, `[{"error":"x"}]`, `{"error":`,
		"Error: no such file", "build log\nexit status 2", `{"error":` + strings.Repeat("[", 12_000),
		`{"error":` + strings.Repeat(`{"a":`, 5000) + `1` + strings.Repeat("}", 5000) + `}`,
	} {
		f.Add(s)
	}
	g := mustGuard(f, nil)
	f.Fuzz(func(t *testing.T, content string) {
		if !utf8.ValidString(content) {
			return // the guard reads conv's decoded strings, always valid UTF-8
		}
		if got, want := g.rules.errorObject(content), errorObjectReference(g.cfg.ErrorKeys, content); got != want {
			t.Fatalf("errorObject(%q) = %v, encoding/json says %v", content, got, want)
		}
		raw, _ := json.Marshal(map[string]any{"role": "tool", "is_error": strings.HasPrefix(content, "E"), "content": content})
		g.rules.failed(raw, content)
	})
}
