package originals

import (
	"testing"
	"time"
)

// FuzzDecodeEntry: a record written by encodeValue reads back the same, and
// arbitrary bytes never panic the decoder.
func FuzzDecodeEntry(f *testing.F) {
	f.Add("decided: read config", "Hmm, the config.", 3, []byte{0, 1, 2})
	f.Add("", "", 0, []byte{})
	f.Fuzz(func(t *testing.T, shaped, original string, turn int, junk []byte) {
		turn &= 1<<62 - 1
		at := time.Unix(0, 1_772_366_400_123_456_789)
		k := entryKey(turn, hashOf(shaped), hashOf(original))
		e, err := decodeEntry("c", k, encodeValue(at, shaped, original))
		if err != nil || e.Shaped != shaped || e.Original != original || e.Turn != turn || !e.Time.Equal(at) {
			t.Fatalf("round trip: got %+v, %v", e, err)
		}
		_, _ = decodeEntry("c", k, junk)
		_, _, _, _, _ = indexFields(junk, junk)
		_ = decodeMeta(junk)
	})
}
