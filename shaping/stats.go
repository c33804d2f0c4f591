package shaping

import (
	"strconv"
	"unicode/utf8"
)

// Stats describes what Shape does to a corpus of reasoning texts. Character
// counts are in runes.
type Stats struct {
	Blocks      int     // texts shaped
	Changed     int     // texts Shape changed
	CharsBefore int     // runes in
	CharsAfter  int     // runes out
	Compression float64 // 1 - CharsAfter/CharsBefore; 0 for an empty corpus
	// IdempotenceFailures counts texts where Shape(Shape(x)) != Shape(x).
	IdempotenceFailures int
	// OverBudget counts changed results longer than MaxChars.
	OverBudget int
	// EmptyResults counts non-empty texts shaped to "" (expected for OpDrop).
	EmptyResults int
	// DistinctInputs, DistinctOutputs, Collisions (their difference) and
	// MaxFanout are as in Collisions.
	DistinctInputs, DistinctOutputs, Collisions, MaxFanout int
	// SharedOutputs counts the results shared by several distinct texts,
	// SharingInputs the distinct texts that share one.
	SharedOutputs, SharingInputs int
	// MarkersFound counts the shaping markers in the texts (see
	// CountMarkers): pollution that extraction removes.
	MarkersFound int
	// Faults counts the changed texts with each reading fault (see Inspect).
	Faults Faults
	// Bands splits Blocks to MarkersFound by the length of the text in
	// runes: ≤240, 240–500, 500–1k, 1k–2k, 2k–5k, 5k–10k and >10k, in
	// that order.
	Bands []BandStats
}

// Band is a range of text lengths in runes: Min < length ≤ Max, no upper
// bound when Max is 0; a band with Min 0 also holds the empty text.
type Band struct {
	Name     string
	Min, Max int
}

// bands are the length bands of Stats: the texts a 240-character budget
// leaves alone, then 240–500, 500–1k, 1k–2k, 2k–5k, 5k–10k and over 10k
// characters.
var bands = []Band{
	{"≤240", 0, 240}, {"240–500", 240, 500}, {"500–1k", 500, 1000}, {"1k–2k", 1000, 2000},
	{"2k–5k", 2000, 5000}, {"5k–10k", 5000, 10000}, {">10k", 10000, 0},
}

// holds reports whether a text of n runes is in the band.
func (b Band) holds(n int) bool {
	return (n > b.Min || n == 0 && b.Min == 0) && (b.Max == 0 || n <= b.Max)
}

// BandStats is what Shape does to the texts of one length band. Rates of
// faults are taken over Changed: see Rate.
type BandStats struct {
	Band
	Blocks, Changed         int
	CharsBefore, CharsAfter int
	Compression             float64 // 1 - CharsAfter/CharsBefore
	Faults                  Faults  // changed texts with each fault
	MarkersFound            int
}

// Rate returns n (a count of Faults) as a share of the changed texts, 0
// when none changed.
func (b BandStats) Rate(n int) float64 {
	if b.Changed == 0 {
		return 0
	}
	return float64(n) / float64(b.Changed)
}

// Over merges the bands of texts longer than runes (bands starting at or
// above it) into one, named ">N".
func (s Stats) Over(runes int) BandStats {
	m := BandStats{Band: Band{Name: ">" + strconv.Itoa(runes), Min: runes}}
	for _, b := range s.Bands {
		if b.Min >= runes {
			m.merge(b)
		}
	}
	return m
}

// All returns the counts of every band merged, as one BandStats named
// "all".
func (s Stats) All() BandStats {
	m := BandStats{Band: Band{Name: "all"}}
	for _, b := range s.Bands {
		m.merge(b)
	}
	return m
}

func (m *BandStats) merge(b BandStats) {
	m.Blocks += b.Blocks
	m.Changed += b.Changed
	m.CharsBefore += b.CharsBefore
	m.CharsAfter += b.CharsAfter
	m.Faults.add(b.Faults)
	m.MarkersFound += b.MarkersFound
	m.Compression = compression(m.CharsBefore, m.CharsAfter)
}

func compression(before, after int) float64 {
	if before == 0 {
		return 0
	}
	return 1 - float64(after)/float64(before)
}

// CorpusStats shapes every text with o and measures the result.
func CorpusStats(texts []string, o Options) Stats {
	o = o.effective()
	outs := make([]string, len(texts))
	changed := make([]bool, len(texts))
	for i, t := range texts {
		outs[i], changed[i] = Shape(t, o)
	}
	s := resultStats(texts, outs, changed, o)
	for _, out := range outs {
		if again, _ := Shape(out, o); again != out {
			s.IdempotenceFailures++
		}
	}
	return s
}

// resultStats measures results already computed: outs[i] and changed[i]
// are what shaping texts[i] with o gave (by this package or another
// shaper, to compare). It does not shape again, so IdempotenceFailures is
// 0; faults are counted only for o.Op extract.
func resultStats(texts, outs []string, changed []bool, o Options) Stats {
	o = o.effective()
	var s Stats
	s.Bands = make([]BandStats, len(bands))
	for i, b := range bands {
		s.Bands[i].Band = b
	}
	for i, t := range texts {
		out := outs[i]
		n, m := utf8.RuneCountInString(t), utf8.RuneCountInString(out)
		b := BandStats{Blocks: 1, CharsBefore: n, CharsAfter: m, MarkersFound: CountMarkers(t)}
		if changed[i] {
			b.Changed = 1
			if m > o.MaxChars {
				s.OverBudget++
			}
			if o.Op == OpExtract {
				b.Faults = Inspect(t, out).blocks()
			}
		}
		if t != "" && out == "" {
			s.EmptyResults++
		}
		for k := range s.Bands {
			if s.Bands[k].holds(n) {
				s.Bands[k].merge(b)
			}
		}
	}
	all := s.All()
	s.Blocks, s.Changed, s.CharsBefore, s.CharsAfter = all.Blocks, all.Changed, all.CharsBefore, all.CharsAfter
	s.Compression, s.Faults, s.MarkersFound = all.Compression, all.Faults, all.MarkersFound
	s.collisions(texts, outs)
	return s
}

// collisions sets the collision fields of s from texts and their results.
func (s *Stats) collisions(texts, outs []string) {
	seen := make(map[string]bool, len(texts))
	fan := make(map[string]int, len(texts))
	for i, t := range texts {
		if seen[t] {
			continue
		}
		seen[t] = true
		fan[outs[i]]++
		s.MaxFanout = max(s.MaxFanout, fan[outs[i]])
	}
	s.DistinctInputs, s.DistinctOutputs = len(seen), len(fan)
	s.Collisions = s.DistinctInputs - s.DistinctOutputs
	for _, n := range fan {
		if n > 1 {
			s.SharedOutputs++
			s.SharingInputs += n
		}
	}
}

// Collisions shapes the distinct texts with o and counts them and their
// distinct results. A collision is two different texts shaped to the same
// result; maxFanout is the largest number of distinct texts sharing one
// result (1 when there is no collision, 0 for no texts). A side table keyed
// by the shaped text must expect maxFanout > 1 in general: shaping drops
// filler, so texts that differ only in filler collide by design.
func Collisions(texts []string, o Options) (distinctInputs, distinctOutputs, maxFanout int) {
	seen := make(map[string]bool, len(texts))
	fan := make(map[string]int, len(texts))
	for _, t := range texts {
		if seen[t] {
			continue
		}
		seen[t] = true
		out, _ := Shape(t, o)
		fan[out]++
		maxFanout = max(maxFanout, fan[out])
	}
	return len(seen), len(fan), maxFanout
}
