package conv

import (
	"bytes"
	"math/rand/v2"
	"testing"

	"github.com/shaperproxy/shaperproxy/fixtures"
)

// checkPieces checks the pieces of v, Apply's view of from with n edits,
// whose body is want: they join into want when the body is large enough
// to have them, and only from itself (not a copy of it) gets them.
func checkPieces(t *testing.T, v *Request, from, want []byte, n int) {
	t.Helper()
	ps, ok := v.AppendPieces(nil, from)
	if len(want) < minPieces || n == 0 {
		if ok || ps != nil {
			t.Fatalf("a body of %d bytes with %d edits has pieces, want none under %d bytes or without edits", len(want), n, minPieces)
		}
		return
	}
	if !ok {
		t.Fatalf("a body of %d bytes with %d edits has no pieces", len(want), n)
	}
	if got := bytes.Join(ps, nil); !bytes.Equal(got, want) {
		t.Fatalf("the pieces join into %d bytes that are not the edited body's %d", len(got), len(want))
	}
	if ps, ok := v.AppendPieces(nil, bytes.Clone(from)); ok || ps != nil {
		t.Fatal("pieces given for a copy of the body the view was edited from")
	}
	// Appended: after what the list held, in a list with room that
	// takes no other.
	head := [][]byte{[]byte("head")}
	more, ok := v.AppendPieces(append(make([][]byte, 0, len(ps)+1), head...), from)
	if !ok || len(more) != len(ps)+1 || !bytes.Equal(more[0], head[0]) || !bytes.Equal(bytes.Join(more[1:], nil), want) {
		t.Fatalf("appended to a list of one: %d pieces (ok %v), want the one and %d joining into the edited body", len(more), ok, len(ps))
	}
	if again, _ := v.AppendPieces(more[:0], from); &again[0] != &more[0] {
		t.Fatal("the pieces took a new list where the one given had room")
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
		ps := appendPieces(nil, from, want, edits)
		if got := bytes.Join(ps, nil); !bytes.Equal(got, want) {
			t.Fatalf("round %d: %d edits: the pieces join into %d bytes, not ApplyEdits' %d", round, len(edits), len(got), len(want))
		}
		for i, p := range ps {
			if len(p) == 0 || cap(p) != len(p) {
				t.Fatalf("round %d: piece %d of %d: length %d, capacity %d: want no empty piece and none with room past it", round, i, len(ps), len(p), cap(p))
			}
		}
	}
	if pieced(from[:minPieces-1], []Edit{{Start: 1, End: 2, Repl: []byte("x")}}) || pieced(from, nil) {
		t.Fatal("pieces for a body under minPieces, or for one without edits")
	}
}

// TestAppliedPieces: ApplyLater's pieces, of the edited body before its
// view is made and of the view after, join into the edited body though
// the caller reused its edits, and only for the body the edits were
// applied to.
func TestAppliedPieces(t *testing.T) {
	r := parseCopy(t, fixtures.SeedHistory())
	edits := reasoningEdits(r, shapedTag)
	want := ApplyEdits(bytes.Clone(r.Body), cloneEdits(edits))
	mine := cloneEdits(edits)
	a := r.ApplyLater(mine)
	clear(mine)
	if !bytes.Equal(a.Body, want) {
		t.Fatal("the edited body is not ApplyEdits'")
	}
	ps, ok := a.AppendPieces(nil, r.Body)
	if !ok || !bytes.Equal(bytes.Join(ps, nil), want) {
		t.Fatalf("before the view: %d pieces (ok %v) not joining into the edited body", len(ps), ok)
	}
	if _, ok := a.AppendPieces(nil, bytes.Clone(r.Body)); ok {
		t.Fatal("pieces given for a copy of the body the edits were applied to")
	}
	v, err := a.View()
	if err != nil {
		t.Fatal(err)
	}
	checkPieces(t, v, r.Body, want, len(edits))
	if ps, ok := a.AppendPieces(ps[:0], r.Body); !ok || !bytes.Equal(bytes.Join(ps, nil), want) {
		t.Fatal("the edited body's pieces changed once its view was made")
	}
}
