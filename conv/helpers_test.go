package conv

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// readTestdata returns the contents of testdata/name.
func readTestdata(t testing.TB, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// testdataLines returns the non-empty lines of testdata/name.
func testdataLines(t testing.TB, name string) [][]byte {
	t.Helper()
	var out [][]byte
	for _, l := range bytes.Split(readTestdata(t, name), []byte("\n")) {
		if len(bytes.TrimSpace(l)) > 0 {
			out = append(out, l)
		}
	}
	return out
}

// mustParse parses body as a request or fails the test.
func mustParse(t testing.TB, body string) *Request {
	t.Helper()
	r, err := ParseRequest([]byte(body))
	if err != nil {
		t.Fatalf("ParseRequest(%.80q): %v", body, err)
	}
	return r
}

// decodeAny decodes JSON with encoding/json (numbers kept as json.Number).
func decodeAny(t testing.TB, b []byte) any {
	t.Helper()
	d := json.NewDecoder(bytes.NewReader(b))
	d.UseNumber()
	var v any
	if err := d.Decode(&v); err != nil {
		t.Fatalf("decode %.80q: %v", b, err)
	}
	return v
}

// chat builds a request body from short message specs, one per message:
//
//	"system" "developer" "user"   a message of that role with content "<role> <i>"
//	"assistant+c1+c2"             an assistant with tool calls c1 and c2
//	"tool=c1"                     a tool result for call c1 ("tool" alone: no id)
func chat(t testing.TB, specs ...string) *Request {
	t.Helper()
	var msgs []map[string]any
	for i, s := range specs {
		msgs = append(msgs, specMessage(i, s))
	}
	b, err := json.Marshal(map[string]any{"model": "m", "messages": msgs})
	if err != nil {
		t.Fatal(err)
	}
	return mustParse(t, string(b))
}

// specMessage builds one message for chat.
func specMessage(i int, spec string) map[string]any {
	role, rest, _ := strings.Cut(spec, "=")
	parts := strings.Split(role, "+")
	m := map[string]any{"role": parts[0], "content": parts[0] + " " + string(rune('0'+i))}
	var calls []any
	for _, id := range parts[1:] {
		calls = append(calls, map[string]any{
			"id": id, "type": "function",
			"function": map[string]any{"name": "f", "arguments": "{}"},
		})
	}
	if calls != nil {
		m["tool_calls"] = calls
	}
	if rest != "" {
		m["tool_call_id"] = rest
	}
	return m
}

// parseReusing is parseKeyed without keys: every byte prev's messages
// repeat is compared.
func parseReusing(body []byte, prev *Request) (*Request, error) { return parseKeyed(body, nil, prev) }
