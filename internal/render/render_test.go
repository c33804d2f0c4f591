package render

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// demoDir holds the demo requests and the prompts render.py made of them
// (fixtures/templates/demo/out/<template>/<request>.txt).
var demoDir = filepath.Join("..", "..", "fixtures", "templates", "demo")

// goldenNow is the date render.py rendered the goldens on (gpt-oss prints
// it).
func goldenNow(t *testing.T, golden string) func() time.Time {
	_, after, ok := strings.Cut(golden, "Current date: ")
	if !ok {
		return nil
	}
	d, err := time.Parse("2006-01-02", after[:10])
	if err != nil {
		t.Fatal(err)
	}
	return func() time.Time { return d }
}

// TestDemoGoldens: every demo request renders, through every template and
// the V4 encoder, to exactly the prompt render.py (Python jinja2, the V4
// Python encoder) wrote, or fails where render.py's template raised.
func TestDemoGoldens(t *testing.T) {
	outs, err := os.ReadDir(filepath.Join(demoDir, "out"))
	if err != nil {
		t.Fatal(err)
	}
	checked := 0
	for _, dir := range outs {
		name := dir.Name()
		r, err := Named(name)
		if err != nil {
			t.Fatal(err)
		}
		files, _ := filepath.Glob(filepath.Join(demoDir, "out", name, "*.txt"))
		for _, f := range files {
			want, _ := os.ReadFile(f)
			req, err := os.ReadFile(filepath.Join(demoDir, strings.TrimSuffix(filepath.Base(f), ".txt")+".json"))
			if err != nil {
				t.Fatal(err)
			}
			got, err := r.Render(req, Options{Now: goldenNow(t, string(want))})
			checked++
			if raised := strings.HasPrefix(string(want), "TEMPLATE ERROR"); raised {
				if err == nil {
					t.Errorf("%s %s: rendered, render.py raised %s", name, filepath.Base(f), want)
				}
				continue
			}
			if err != nil {
				t.Errorf("%s %s: %v", name, filepath.Base(f), err)
				continue
			}
			if got != string(want) {
				k := commonPrefix(got, string(want))
				t.Errorf("%s %s: differs at %d:\n got …%q\nwant …%q", name, filepath.Base(f), k, excerpt(got, k), excerpt(string(want), k))
			}
		}
	}
	if checked < 100 {
		t.Fatalf("only %d goldens checked", checked)
	}
}

// TestV4GoldenVectors: the V4 encoder reproduces DeepSeek's own golden
// test vectors (fixtures/templates/deepseek-v4-tests): tools rendered into
// the system prompt, every reasoning kept when tools are present, earlier
// turns' reasoning dropped without tools, tool results as user turns.
func TestV4GoldenVectors(t *testing.T) {
	dir := filepath.Join("..", "..", "fixtures", "templates", "deepseek-v4-tests")
	for _, n := range []string{"1", "2"} {
		in, err := os.ReadFile(filepath.Join(dir, "test_input_"+n+".json"))
		if err != nil {
			t.Fatal(err)
		}
		want, _ := os.ReadFile(filepath.Join(dir, "test_output_"+n+".txt"))
		if strings.HasPrefix(strings.TrimSpace(string(in)), "[") { // a bare message list
			in = append(append([]byte(`{"messages":`), in...), '}')
		}
		got, err := v4Encoder{}.Render(in, Options{})
		if err != nil {
			t.Fatal(err)
		}
		if got != string(want) {
			k := commonPrefix(got, string(want))
			t.Errorf("vector %s differs at %d:\n got …%q\nwant …%q", n, k, excerpt(got, k), excerpt(string(want), k))
		}
	}
}

func commonPrefix(a, b string) int {
	n := min(len(a), len(b))
	for i := 0; i < n; i++ {
		if a[i] != b[i] {
			return i
		}
	}
	return n
}

func excerpt(s string, k int) string {
	return s[max(0, k-60):min(len(s), k+60)]
}
