package shaping

import (
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite testdata/*.golden from the current output")

// TestGolden shapes every testdata/*.txt with the default options and
// compares the result with testdata/*.golden.
func TestGolden(t *testing.T) {
	inputs, err := filepath.Glob(filepath.Join("testdata", "*.txt"))
	if err != nil {
		t.Fatal(err)
	}
	if len(inputs) < 6 {
		t.Fatalf("found %d golden inputs, want at least 6", len(inputs))
	}
	for _, in := range inputs {
		name := strings.TrimSuffix(filepath.Base(in), ".txt")
		t.Run(name, func(t *testing.T) {
			text := readFile(t, in)
			got, _ := Shape(text, Options{})
			golden := strings.TrimSuffix(in, ".txt") + ".golden"
			if *update {
				if err := os.WriteFile(golden, []byte(got), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			if want := readFile(t, golden); got != want {
				t.Errorf("Shape(%s) =\n%s\n--- want ---\n%s", in, got, want)
			}
			checkProperties(t, text, Options{})
		})
	}
}

func readFile(t testing.TB, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// goldenInputs returns the texts of testdata/*.txt.
func goldenInputs(t testing.TB) []string {
	t.Helper()
	paths, err := filepath.Glob(filepath.Join("testdata", "*.txt"))
	if err != nil {
		t.Fatal(err)
	}
	texts := make([]string, len(paths))
	for i, p := range paths {
		texts[i] = readFile(t, p)
	}
	return texts
}
