package shaping

import "unicode/utf8"

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
}

// CorpusStats shapes every text with o and measures the result.
func CorpusStats(texts []string, o Options) Stats {
	o = o.effective()
	var s Stats
	for _, t := range texts {
		out, changed := Shape(t, o)
		s.Blocks++
		s.CharsBefore += utf8.RuneCountInString(t)
		s.CharsAfter += utf8.RuneCountInString(out)
		if changed {
			s.Changed++
			if utf8.RuneCountInString(out) > o.MaxChars {
				s.OverBudget++
			}
		}
		if again, _ := Shape(out, o); again != out {
			s.IdempotenceFailures++
		}
		if t != "" && out == "" {
			s.EmptyResults++
		}
	}
	if s.CharsBefore > 0 {
		s.Compression = 1 - float64(s.CharsAfter)/float64(s.CharsBefore)
	}
	s.DistinctInputs, s.DistinctOutputs, s.MaxFanout = Collisions(texts, o)
	s.Collisions = s.DistinctInputs - s.DistinctOutputs
	return s
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
