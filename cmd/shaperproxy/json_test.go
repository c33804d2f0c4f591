package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

var (
	snakeCase  = regexp.MustCompile(`^[a-z][a-z0-9]*(_[a-z0-9]+)*$`)
	looksTime  = regexp.MustCompile(`^\d{4}-\d\d-\d\dT`)
	jsonTimeRE = regexp.MustCompile(`^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$`)
)

// verbatim keys hold JSON as the upstream or a hook wrote it, and map
// keys hold objects keyed by data: their own keys are not documented.
var (
	verbatimKeys = []string{"usage", "notes", "error"}
	mapKeys      = []string{"roles", "by_kind", "outcomes"}
)

// TestJSONShapes runs every read command with --json and holds it to the
// README's "JSON output": one object per line, snake_case keys at every
// depth, times in UTC with milliseconds and a Z, the same keys on every
// line of a command, and every key named in the command's row of the
// README's table.
func TestJSONShapes(t *testing.T) {
	capDir := filepath.Dir(captureFixture(t))
	origDir := originalsFixture(t)
	corpus := filepath.Join(t.TempDir(), "corpus.jsonl")
	long := `"Hmm, let me think about the cache. Wait, maybe not. ` + strings.Repeat("The cache key includes the model name. ", 10) + `So the fix is to drop the model from the key."`
	if err := os.WriteFile(corpus, []byte(long+"\n"+long+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	rows := jsonTable(t)
	tests := []struct {
		row   string // the command as the README's table names it
		args  []string
		lines int // at least
		times bool
	}{
		{"`capture tail`", []string{"capture", "tail", "-n", "100", "--data-dir", capDir}, 20, true},
		{"`capture read`", []string{"capture", "read", "--from", "0", "--limit", "5", "--data-dir", capDir}, 5, true},
		{"`capture show`", []string{"capture", "show", "call-b", "--data-dir", capDir}, 1, true},
		{"`capture show --chunks`", []string{"capture", "show", "call-b", "--chunks", "--data-dir", capDir}, 1, true},
		{"`capture find`", []string{"capture", "find", "--text", "fixes", "--data-dir", capDir}, 2, true},
		{"`capture stats`", []string{"capture", "stats", "--data-dir", capDir}, 1, true},
		{"`capture cost`", []string{"capture", "cost", "--data-dir", capDir}, 1, true},
		{"`capture cost`", []string{"capture", "cost", "--policy", "keep-recent", "--data-dir", capDir}, 1, true},
		{"`originals stats`", []string{"originals", "stats", "--data-dir", origDir}, 1, false},
		{"`originals list`", []string{"originals", "list", "--data-dir", origDir}, 3, true},
		{"`originals lookup`", []string{"originals", "lookup", "decided: call tool", "--data-dir", origDir}, 1, true},
		{"`shape`", []string{"shape", corpus}, 2, false},
		{"`shape --stats`", []string{"shape", "--stats", corpus}, 1, false},
	}
	for _, tt := range tests {
		t.Run(strings.Trim(tt.row, "`"), func(t *testing.T) {
			row, ok := rows[tt.row]
			if !ok {
				t.Fatalf("the README's JSON table has no row for %s", tt.row)
			}
			var out bytes.Buffer
			if err := run(context.Background(), append(tt.args, "--json"), &out, io.Discard); err != nil {
				t.Fatalf("%v: %v", tt.args, err)
			}
			lines := strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n")
			if len(lines) < tt.lines {
				t.Fatalf("%d lines, want at least %d:\n%s", len(lines), tt.lines, out.String())
			}
			c := &shapeCheck{t: t, row: row}
			var first []string
			for i, line := range lines {
				obj := oneObject(t, line)
				keys := sortedKeys(obj)
				if i == 0 {
					first = keys
				} else if !slices.Equal(keys, first) {
					t.Errorf("line %d has keys %v, line 1 %v: not one shape", i+1, keys, first)
				}
				c.walk(obj, "", true)
			}
			if tt.times && c.times == 0 {
				t.Errorf("no time in the output")
			}
		})
	}
}

// oneObject parses line as exactly one JSON object.
func oneObject(t *testing.T, line string) map[string]any {
	t.Helper()
	dec := json.NewDecoder(strings.NewReader(line))
	var obj map[string]any
	if err := dec.Decode(&obj); err != nil || obj == nil {
		t.Fatalf("not a JSON object: %v\n%s", err, line)
	}
	if dec.More() {
		t.Fatalf("more than one value on a line:\n%s", line)
	}
	return obj
}

func sortedKeys(m map[string]any) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// shapeCheck walks a command's output.
type shapeCheck struct {
	t     *testing.T
	row   string
	times int
}

// walk checks v at path: keys snake_case (everywhere) and documented
// (outside verbatim and map values), times in the one format.
func (c *shapeCheck) walk(v any, path string, documented bool) {
	switch v := v.(type) {
	case map[string]any:
		for k, x := range v {
			p := path + "." + k
			if !snakeCase.MatchString(k) {
				c.t.Errorf("%s: key %q is not snake_case", path, k)
			}
			if documented && !strings.Contains(c.row, "`"+k+"`") {
				c.t.Errorf("%s: key %q is not in the README's row", path, k)
			}
			c.walk(x, p, documented && !slices.Contains(verbatimKeys, k) && !slices.Contains(mapKeys, k))
		}
	case []any:
		for _, x := range v {
			c.walk(x, path+"[]", documented)
		}
	case string:
		if looksTime.MatchString(v) {
			c.times++
			if !jsonTimeRE.MatchString(v) {
				c.t.Errorf("%s: time %q is not UTC RFC 3339 with milliseconds and Z", path, v)
			}
		}
	}
}

// jsonTable returns the rows of the README's JSON table by their first
// cell's command names: "`capture tail`" → the row.
func jsonTable(t *testing.T) map[string]string {
	t.Helper()
	doc, err := os.ReadFile(filepath.Join("..", "..", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, section, _ := strings.Cut(string(doc), "### JSON output")
	section, _, _ = strings.Cut(section, "\n## ")
	rows := map[string]string{}
	name := regexp.MustCompile("`[^`]+`")
	for _, line := range strings.Split(section, "\n") {
		cells := strings.Split(line, "|")
		if len(cells) < 4 || !strings.HasPrefix(strings.TrimSpace(cells[1]), "`") {
			continue
		}
		for _, n := range name.FindAllString(cells[1], -1) {
			rows[n] = line
		}
	}
	// A row that says "as `other command`" shares that row's keys.
	out := map[string]string{}
	for n, row := range rows {
		out[n] = row
		for _, ref := range regexp.MustCompile("as (?:in )?(`[^`]+`)").FindAllStringSubmatch(row, -1) {
			if ref[1] != n {
				out[n] += "\n" + rows[ref[1]]
			}
		}
	}
	return out
}
