package conv

import (
	"bytes"
	"math/rand/v2"
	"testing"
)

// checkPieces checks the pieces of v, Apply's view of from with n edits,
// whose body is want: they join into want when the body is large enough
// to have them, and only from itself (not a copy of it) gets them.
func checkPieces(t *testing.T, v *Request, from, want []byte, n int) {
	t.Helper()
	ps := v.Pieces(from)
	if len(want) < minPieces || n == 0 {
		if ps != nil {
			t.Fatalf("a body of %d bytes with %d edits has pieces, want none under %d bytes or without edits", len(want), n, minPieces)
		}
		return
	}
	if ps == nil {
		t.Fatalf("a body of %d bytes with %d edits has no pieces", len(want), n)
	}
	if got := bytes.Join(ps, nil); !bytes.Equal(got, want) {
		t.Fatalf("the pieces join into %d bytes that are not the edited body's %d", len(got), len(want))
	}
	if v.Pieces(bytes.Clone(from)) != nil {
		t.Fatal("pieces given for a copy of the body the view was edited from")
	}
}

// TestPiecesOf: the pieces of random edits, at the ends, side by side,
// insertions and deletions among them, join into ApplyEdits' body, and
// each piece's capacity ends with it (an append to one writes nowhere).
func TestPiecesOf(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 15))
	from := make([]byte, minPieces+1000)
	for i := range from {
		from[i] = byte('a' + i%26)
	}
	for round := range 500 {
		var edits []Edit
		at := 0
		for at < len(from) && len(edits) < 40 {
			start := at + rng.IntN(4)*rng.IntN(3000) // 0: side by side with the last
			if round%5 == 0 && len(edits) == 0 {
				start = 0
			}
			if start > len(from) {
				break
			}
			end := min(len(from), start+rng.IntN(3)*rng.IntN(500)) // 0: an insertion
			if round%7 == 0 && rng.IntN(4) == 0 {
				end = len(from)
			}
			edits = append(edits, Edit{Start: start, End: end, Repl: bytes.Repeat([]byte{'#'}, rng.IntN(3)*rng.IntN(400))})
			at = end
		}
		want := ApplyEdits(from, cloneEdits(edits))
		if len(want) < minPieces {
			continue
		}
		ps := piecesOf(from, want, edits)
		if got := bytes.Join(ps, nil); !bytes.Equal(got, want) {
			t.Fatalf("round %d: %d edits: the pieces join into %d bytes, not ApplyEdits' %d", round, len(edits), len(got), len(want))
		}
		for i, p := range ps {
			if len(p) == 0 || cap(p) != len(p) {
				t.Fatalf("round %d: piece %d of %d: length %d, capacity %d: want no empty piece and none with room past it", round, i, len(ps), len(p), cap(p))
			}
		}
	}
	if piecesOf(from[:minPieces-1], from[:minPieces-1], []Edit{{Start: 1, End: 2, Repl: []byte("x")}}) != nil {
		t.Fatal("pieces for a body under minPieces")
	}
}
