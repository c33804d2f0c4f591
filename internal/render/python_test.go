package render

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// renderPy is ../shared/tools/render.py, the reference renderer (Python
// jinja2), present beside a checkout of the project but not in CI.
var renderPy = filepath.Join("..", "..", "..", "shared", "tools", "render.py")

// crossRequests are requests the demo does not cover: non-ASCII text,
// floats, nested and multiple tool calls, the "reasoning" field, an empty
// reasoning, a user turn inside a tool loop. (Content given as an array
// of parts is left out: several templates concatenate it as a string,
// which Python's jinja2 refuses with a TypeError while this package's
// engine renders it; the proxy never sends such a request to them.)
var crossRequests = []string{
	`{"model":"m","tools":[{"type":"function","function":{"name":"calc","description":"Rechnen – 计算","parameters":{"type":"object","properties":{"x":{"type":"number"},"opts":{"type":"object"}}}}}],` +
		`"messages":[{"role":"system","content":"Sé breve. 简短回答。"},{"role":"user","content":"2.50 × 4 = ? 🙂"},` +
		`{"role":"assistant","content":"","reasoning_content":"Multiply: 2.5×4 = 10. 所以答案是十。","tool_calls":[{"id":"a1","type":"function","function":{"name":"calc","arguments":"{\"x\": 2.50, \"opts\": {\"round\": true, \"digits\": [1, 2]}, \"note\": \"tab\\there\"}"}},{"id":"a2","type":"function","function":{"name":"calc","arguments":"{}"}}]},` +
		`{"role":"tool","tool_call_id":"a1","content":"10.0"},{"role":"tool","tool_call_id":"a2","content":"\"quoted\" \\ backslash"},` +
		`{"role":"user","content":"and in words?"},` +
		`{"role":"assistant","content":"ten","reasoning":"Spell it out: ten."},{"role":"user","content":"thanks"},{"role":"assistant","content":"ok","reasoning_content":""},{"role":"user","content":"bye"}]}`,
}

// TestAgainstRenderPy renders crossRequests and the demo requests with
// every template through render.py and through this package and compares
// the prompts byte for byte. It needs python3 with jinja2 (Debian:
// python3-jinja2) and ../shared; it is skipped without them.
func TestAgainstRenderPy(t *testing.T) {
	if _, err := os.Stat(renderPy); err != nil {
		t.Skip("no ../shared/tools/render.py")
	}
	if err := exec.Command("python3", "-c", "import jinja2").Run(); err != nil {
		t.Skip("no python3 with jinja2")
	}
	tmpl, _ := filepath.Abs(filepath.Join("..", "..", "fixtures", "templates"))
	demos, _ := filepath.Glob(filepath.Join(demoDir, "0*.json"))
	var reqs [][]byte
	for _, r := range crossRequests {
		reqs = append(reqs, []byte(r))
	}
	for _, d := range demos {
		b, _ := os.ReadFile(d)
		reqs = append(reqs, b)
	}
	var names []string
	for _, n := range Names() {
		if n != V4 { // render.py needs DeepSeek's Python encoder, not kept; see TestV4GoldenVectors
			names = append(names, n)
		}
	}
	all := pyRender(t, names, tmpl, reqs)
	compared := 0
	for _, name := range names {
		r, err := Named(name)
		if err != nil {
			t.Fatal(err)
		}
		wants := all[name]
		for i, req := range reqs {
			got, err := r.Render(req, Options{})
			want := wants[i]
			if raised, ok := strings.CutPrefix(want, "ERROR "); ok {
				if err == nil {
					t.Errorf("%s, request %d: render.py raised (%s), Go rendered", name, i, raised)
				}
				continue
			}
			compared++
			if err != nil {
				t.Errorf("%s, request %d: %v", name, i, err)
			} else if got != want {
				k := commonPrefix(got, want)
				t.Errorf("%s, request %d differs at %d:\n got …%q\nwant …%q", name, i, k, excerpt(got, k), excerpt(want, k))
			}
		}
	}
	t.Logf("%d prompts compared with render.py", compared)
	if compared < 100 {
		t.Fatalf("only %d prompts compared", compared)
	}
}

// pyDriver renders every request of a JSON list through every template
// named on the command line with render.py's render(), in one Python
// process, and prints {template: [prompt, …]} ("ERROR …" for a template
// that raised).
const pyDriver = `
import json, os, sys
sys.dont_write_bytecode = True
sys.path.insert(0, os.path.dirname(sys.argv[1]))
import render
reqs = json.load(sys.stdin)
out = {}
for name in sys.argv[2:]:
    out[name] = []
    for req in reqs:
        try:
            out[name].append(render.render(name, req)[0])
        except Exception as e:
            out[name].append("ERROR %s: %s" % (type(e).__name__, e))
json.dump(out, sys.stdout, ensure_ascii=False)
`

// pyRender renders reqs through the named templates with render.py.
func pyRender(t *testing.T, names []string, templates string, reqs [][]byte) map[string][]string {
	t.Helper()
	in := append([]byte{'['}, bytes.Join(reqs, []byte{','})...)
	cmd := exec.Command("python3", append([]string{"-c", pyDriver, renderPy}, names...)...)
	cmd.Env = append(os.Environ(), "RENDER_TEMPLATES="+templates)
	cmd.Stdin = bytes.NewReader(append(in, ']'))
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("render.py: %v", err)
	}
	var prompts map[string][]string
	if err := json.Unmarshal(out, &prompts); err != nil || len(prompts) != len(names) {
		t.Fatalf("render.py: %v (%d templates)", err, len(prompts))
	}
	return prompts
}
