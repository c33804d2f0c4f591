package shaping

import (
	"path/filepath"
	"testing"
)

// FuzzShape checks every property of Shape (see checkProperties) and the
// Sentences invariants on arbitrary text and options. Crashers found so far
// are kept in testdata/fuzz/FuzzShape.
func FuzzShape(f *testing.F) {
	for _, s := range edgeTexts {
		f.Add(s, uint16(240), false, uint8(0))
	}
	golden, _ := filepath.Glob(filepath.Join("testdata", "*.txt"))
	for i, g := range golden {
		f.Add(readFile(f, g), uint16(20+40*i), i%3 == 0, uint8(0))
	}
	f.Add("Hmm. So I'll do it.", uint16(8), true, uint8(1))
	f.Add("Wait.", uint16(1), false, uint8(2))
	f.Fuzz(func(t *testing.T, text string, maxChars uint16, marker bool, op uint8) {
		o := Options{MaxChars: int(maxChars % 700), Marker: marker}
		switch op % 8 {
		case 1:
			o.Op = OpKeep
		case 2:
			o.Op = OpDrop
		}
		checkProperties(t, text, o)
		checkSentenceOffsets(t, text, Sentences(text))
	})
}
