package shaping

import (
	"math"
	"path/filepath"
	"reflect"
	"testing"
)

func TestCorpusStats(t *testing.T) {
	texts := corpus(1, seedCorpusChars, seedCorpusBlocks)
	s := CorpusStats(texts, Options{})
	t.Logf("generated corpus: %d blocks, %d -> %d runes, compression %.2f%%, changed %d, idempotence failures %d, collisions %d (max fanout %d)",
		s.Blocks, s.CharsBefore, s.CharsAfter, 100*s.Compression, s.Changed, s.IdempotenceFailures, s.Collisions, s.MaxFanout)
	if s.CharsBefore < seedCorpusChars || s.Blocks < 500 || s.Blocks > 700 {
		t.Errorf("corpus is %d blocks of %d runes, want ~600 blocks of ~856k", s.Blocks, s.CharsBefore)
	}
	if s.IdempotenceFailures != 0 || s.OverBudget != 0 || s.EmptyResults != 0 {
		t.Errorf("stats %+v", s)
	}
	if s.Compression < 0.75 {
		t.Errorf("compression %.4f, want at least 0.75 on ~1,400-rune blocks at 240", s.Compression)
	}
	if s.Collisions != 0 {
		t.Errorf("%d collisions on the generated corpus", s.Collisions)
	}

	var golden []string
	paths, _ := filepath.Glob(filepath.Join("testdata", "*.txt"))
	for _, p := range paths {
		golden = append(golden, readFile(t, p))
	}
	g := CorpusStats(golden, Options{})
	t.Logf("golden inputs: %d blocks, %d -> %d runes, compression %.2f%%", g.Blocks, g.CharsBefore, g.CharsAfter, 100*g.Compression)
	gm := CorpusStats(golden, Options{Marker: true})
	t.Logf("golden inputs with marker: %d -> %d runes, compression %.2f%%", gm.CharsBefore, gm.CharsAfter, 100*gm.Compression)
}

func TestCorpusStatsSmall(t *testing.T) {
	// 82 runes; at 30 only the lead "So I'll warm it first." (22) fits.
	x := "Hmm. The cache is cold. So I'll warm it first. Wait, wait, wait, wait, wait, wait."
	s := CorpusStats([]string{x, x, "short", ""}, Options{MaxChars: 30})
	want := Stats{Blocks: 4, Changed: 2, CharsBefore: 2*82 + 5, CharsAfter: 2*22 + 5,
		DistinctInputs: 3, DistinctOutputs: 3, MaxFanout: 1}
	want.Compression = 1 - float64(want.CharsAfter)/float64(want.CharsBefore)
	if math.Abs(s.Compression-want.Compression) > 1e-12 {
		t.Errorf("compression %v, want %v", s.Compression, want.Compression)
	}
	s.Compression = want.Compression
	got := s.Bands
	s.Bands = nil
	if !reflect.DeepEqual(s, want) {
		t.Errorf("CorpusStats =\n%+v\nwant\n%+v", s, want)
	}
	if len(got) != len(bands) || got[0].Blocks != 4 || got[0].Changed != 2 || got[1].Blocks != 0 {
		t.Errorf("bands %+v", got)
	}
	if d := CorpusStats([]string{x}, Options{Op: OpDrop}); d.EmptyResults != 1 || d.CharsAfter != 0 {
		t.Errorf("drop stats %+v", d)
	}
	if e := CorpusStats(nil, Options{}); e.Compression != 0 || e.Blocks != 0 {
		t.Errorf("empty stats %+v", e)
	}
}
