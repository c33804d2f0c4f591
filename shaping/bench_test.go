package shaping

import (
	"testing"
	"unicode/utf8"
)

// seedCorpus is the size of the original design's real case: 631 messages,
// 855,989 characters of history, to be shaped in at most 5 ms on one core.
const (
	seedCorpusChars  = 856_000
	seedCorpusBlocks = 600
)

func runes(texts []string) (n int) {
	for _, t := range texts {
		n += utf8.RuneCountInString(t)
	}
	return n
}

func bytesOf(texts []string) (n int) {
	for _, t := range texts {
		n += len(t)
	}
	return n
}

// BenchmarkExtract measures one ~1,400-character block and the whole
// seed-sized corpus (one op = every block of it). Run with
// go test -run=^$ -bench=Extract -benchmem ./shaping/ and compare the
// corpus ns/op with the 5 ms (5,000,000 ns) target.
func BenchmarkExtract(b *testing.B) {
	r := rng(42)
	block := r.block(1_400)
	b.Run("block1400", func(b *testing.B) {
		b.SetBytes(int64(len(block)))
		b.ReportMetric(float64(utf8.RuneCountInString(block)), "runes")
		for b.Loop() {
			Extract(block, Options{})
		}
	})
	texts := corpus(1, seedCorpusChars, seedCorpusBlocks)
	b.Run("corpus856k", func(b *testing.B) {
		b.SetBytes(int64(bytesOf(texts)))
		b.ReportMetric(float64(len(texts)), "blocks")
		b.ReportMetric(float64(runes(texts)), "runes")
		for b.Loop() {
			for _, t := range texts {
				Extract(t, Options{})
			}
		}
	})
}

// BenchmarkShape measures Shape with the marker, the path a proxy takes.
func BenchmarkShape(b *testing.B) {
	texts := corpus(1, seedCorpusChars, seedCorpusBlocks)
	b.SetBytes(int64(bytesOf(texts)))
	for b.Loop() {
		for _, t := range texts {
			Shape(t, Options{Marker: true})
		}
	}
}

// BenchmarkSentences measures the splitter and classifier alone.
func BenchmarkSentences(b *testing.B) {
	r := rng(42)
	block := r.block(1_400)
	b.SetBytes(int64(len(block)))
	for b.Loop() {
		Sentences(block)
	}
}
