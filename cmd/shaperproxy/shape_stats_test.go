package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestShapeStatsBands: shape --stats reports compression, the four fault
// rates and the markers per length band, over 1k and overall, in JSON and
// text; each block lands in the band of its length.
func TestShapeStatsBands(t *testing.T) {
	sentence := "The cache key includes the model name, so two models share nothing. "
	block := func(n int, marker bool) string {
		s := "Hmm, let me look at the cache. "
		if marker {
			s += "[reasoning extract: 242 chars omitted] "
		}
		for len(s) < n {
			s += sentence
		}
		b, _ := json.Marshal(s + "So the fix is to drop the model from the key.")
		return string(b)
	}
	lines := []string{block(100, false), block(300, true), block(700, false), block(1500, false), block(3000, true), block(12000, false)}
	path := filepath.Join(t.TempDir(), "corpus.jsonl")
	if err := os.WriteFile(path, []byte(strings.Join(lines, "\n")+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	var st struct {
		Blocks       int `json:"blocks"`
		MarkersFound int `json:"markers_found"`
		Bands        []struct {
			Band        string             `json:"band"`
			Blocks      int                `json:"blocks"`
			Changed     int                `json:"changed"`
			Compression float64            `json:"compression"`
			Faults      map[string]int     `json:"faults"`
			FaultRates  map[string]float64 `json:"fault_rates"`
			Markers     int                `json:"markers_found"`
		} `json:"bands"`
		Over1k struct {
			Blocks      int     `json:"blocks"`
			Compression float64 `json:"compression"`
		} `json:"over_1k"`
		All struct {
			Blocks  int `json:"blocks"`
			Changed int `json:"changed"`
			Markers int `json:"markers_found"`
		} `json:"all"`
	}
	out := cli(t, "shape", "--stats", "--json", path)
	if err := json.Unmarshal(out, &st); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	wantBands := []struct {
		name            string
		blocks, markers int
	}{{"≤240", 1, 0}, {"240–500", 1, 1}, {"500–1k", 1, 0}, {"1k–2k", 1, 0}, {"2k–5k", 1, 1}, {"5k–10k", 0, 0}, {">10k", 1, 0}}
	if len(st.Bands) != len(wantBands) {
		t.Fatalf("%d bands: %s", len(st.Bands), out)
	}
	for i, w := range wantBands {
		b := st.Bands[i]
		if b.Band != w.name || b.Blocks != w.blocks || b.Markers != w.markers || len(b.Faults) != 4 || len(b.FaultRates) != 4 {
			t.Errorf("band %d: %+v, want %+v", i, b, w)
		}
		if w.name != "≤240" && w.blocks > 0 && (b.Changed != 1 || b.Compression <= 0) {
			t.Errorf("band %s: changed %d, compression %v", b.Band, b.Changed, b.Compression)
		}
	}
	if st.Blocks != 6 || st.All.Blocks != 6 || st.All.Changed != 5 || st.MarkersFound != 2 || st.All.Markers != 2 ||
		st.Over1k.Blocks != 3 || st.Over1k.Compression < 0.85 {
		t.Errorf("totals: %s", out)
	}
	text := string(cli(t, "shape", "--stats", path))
	for _, s := range []string{"per length band", "dangling ':'", "lines <= 3 chars", "bare filler", "dangling anaphora", "markers found          2", "2k–5k", ">1000", "all"} {
		if !strings.Contains(text, s) {
			t.Errorf("text lacks %q:\n%s", s, text)
		}
	}
}
