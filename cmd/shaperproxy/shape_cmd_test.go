package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/shaperproxy/shaperproxy/fixtures"
	"github.com/tidwall/sjson"
)

// TestShapeCommand runs `shape --stats --json` over a corpus mixing the
// three line forms and checks the counts it reports.
func TestShapeCommand(t *testing.T) {
	long := "Hmm, let me think. Wait, maybe not. " + strings.Repeat("The cache key includes the model name. ", 10) + "So the fix is to drop the model from the key."
	obj, _ := sjson.Set(`{}`, "reasoning", long)
	str, _ := json.Marshal(long + " Extra.")
	corpus := strings.Join([]string{string(str), obj, string(fixtures.AgentHistory(7, 600, 100)), ""}, "\n")
	path := filepath.Join(t.TempDir(), "corpus.jsonl")
	if err := os.WriteFile(path, []byte(corpus), 0o600); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if err := run(context.Background(), []string{"shape", "--stats", "--json", path}, &out, &out); err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	var st struct {
		Blocks              int     `json:"blocks"`
		Changed             int     `json:"changed"`
		IdempotenceFailures int     `json:"idempotence_failures"`
		CharsBefore         int     `json:"chars_before"`
		CharsAfter          int     `json:"chars_after"`
		Compression         float64 `json:"compression"`
	}
	if err := json.Unmarshal(out.Bytes(), &st); err != nil {
		t.Fatalf("%v: %s", err, out.String())
	}
	// 1 string + 1 object + 2 assistant steps of the 7-message history.
	if st.Blocks != 4 || st.Changed != 4 || st.IdempotenceFailures != 0 || st.CharsAfter >= st.CharsBefore || st.Compression <= 0.5 {
		t.Fatalf("stats = %+v", st)
	}
	out.Reset()
	if err := run(context.Background(), []string{"shape", path}, &out, &out); err != nil || !strings.Contains(out.String(), "compression") || !strings.Contains(out.String(), "#4") {
		t.Fatalf("text output: %v\n%s", err, out.String())
	}
	if err := os.WriteFile(path, []byte("{not json\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := run(context.Background(), []string{"shape", path}, &out, &out); err == nil || !strings.Contains(err.Error(), ":1:") {
		t.Fatalf("bad corpus: err = %v", err)
	}
}
