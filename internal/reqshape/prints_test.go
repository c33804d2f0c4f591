package reqshape

import (
	"slices"
	"sync"
	"testing"
	"unsafe"
)

// sameArray reports whether two prints lie in one array.
func sameArray(a, b prints) bool { return unsafe.SliceData(a.msgs) == unsafe.SliceData(b.msgs) }

// TestPrintsExtend: a request's prints are taken in the array of its
// conversation's last request when they agree with them as far as both
// go, written past them only by the first request to get there; every
// other request gets a new array, and no request's prints change after
// it made them.
func TestPrintsExtend(t *testing.T) {
	first := prints{}.extend(7, 0, []uint64{1, 2, 3}, true)
	if first.end == nil || first.head != 7 || !slices.Equal(first.msgs, []uint64{1, 2, 3}) {
		t.Fatalf("first request: %+v", first)
	}
	more := first.extend(7, 2, []uint64{3, 4, 5}, true) // the history and two messages more
	if !sameArray(first, more) || !slices.Equal(more.msgs, []uint64{1, 2, 3, 4, 5}) {
		t.Fatalf("a request going on from the last one: %v (same array: %v)", more.msgs, sameArray(first, more))
	}
	other := first.extend(7, 2, []uint64{3, 9}, true) // a sibling of more: first's array is taken past it
	if sameArray(first, other) || !slices.Equal(other.msgs, []uint64{1, 2, 3, 9}) || !slices.Equal(more.msgs, []uint64{1, 2, 3, 4, 5}) {
		t.Fatalf("a sibling wrote over the array: sibling %v, the first to go on %v", other.msgs, more.msgs)
	}
	again := more.extend(8, 4, []uint64{5}, true) // the same request again
	if !sameArray(more, again) || again.head != 8 || !slices.Equal(again.msgs, more.msgs) {
		t.Fatalf("the same request again: %+v", again)
	}
	shorter := more.extend(7, 2, []uint64{3}, true) // an earlier point of the conversation
	if !sameArray(more, shorter) || !slices.Equal(shorter.msgs, []uint64{1, 2, 3}) {
		t.Fatalf("a shorter request: %v", shorter.msgs)
	}
	// A long conversation gone back to its start: its array is not kept
	// alive by prints a small part of it.
	big := prints{}.extend(7, 0, make([]uint64, 500), true)
	if small := big.extend(7, 2, []uint64{0}, true); sameArray(big, small) || cap(small.msgs) > 64 || !slices.Equal(small.msgs, []uint64{0, 0, 0}) {
		t.Fatalf("short prints of a long array: same array %v, room %d", sameArray(big, small), cap(small.msgs))
	}
	edited := more.extend(7, 3, []uint64{7, 5}, true) // message 3 edited
	if sameArray(more, edited) || !slices.Equal(edited.msgs, []uint64{1, 2, 3, 7, 5}) || !slices.Equal(more.msgs, []uint64{1, 2, 3, 4, 5}) {
		t.Fatalf("an edited message: %v, and the last request's %v", edited.msgs, more.msgs)
	}
	unshared := prints{msgs: []uint64{1, 2, 3}}.extend(7, 3, []uint64{4}, true) // made by hand: no end
	if !slices.Equal(unshared.msgs, []uint64{1, 2, 3, 4}) || unshared.end == nil {
		t.Fatalf("prints without an end: %+v", unshared)
	}
	// Prints that go in no carry are never extended: made to their size.
	if exact := first.extend(7, 3, []uint64{8}, false); exact.end != nil || cap(exact.msgs) != 4 || !slices.Equal(exact.msgs, []uint64{1, 2, 3, 8}) {
		t.Fatalf("prints not to be extended: %v, room %d, end %v", exact.msgs, cap(exact.msgs), exact.end)
	}
	// Past the array's room a new one is made.
	long := prints{}.extend(7, 0, []uint64{1}, true)
	for i := range 64 {
		next := long.extend(7, len(long.msgs), []uint64{uint64(100 + i)}, true)
		if len(next.msgs) > cap(long.msgs) == sameArray(long, next) {
			t.Fatalf("message %d: same array %v with room %d for %d", i, sameArray(long, next), cap(long.msgs), len(next.msgs))
		}
		long = next
	}
}

// TestPrintsExtendConcurrent: requests of one conversation extending the
// same prints at once each get exactly their own (one of them in the
// shared array), and the prints they extended do not change.
func TestPrintsExtendConcurrent(t *testing.T) {
	base := prints{}.extend(1, 0, []uint64{1, 2, 3, 4}, true)
	const n = 16
	got := make([]prints, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { got[i] = base.extend(1, 3, []uint64{4, uint64(10 + i), uint64(20 + i)}, true) })
	}
	wg.Wait()
	shared := 0
	for i, p := range got {
		if !slices.Equal(p.msgs, []uint64{1, 2, 3, 4, uint64(10 + i), uint64(20 + i)}) {
			t.Fatalf("request %d: %v", i, p.msgs)
		}
		if sameArray(base, p) {
			shared++
		}
	}
	if shared != 1 || !slices.Equal(base.msgs, []uint64{1, 2, 3, 4}) {
		t.Fatalf("%d requests wrote in the shared array; it reads %v", shared, base.msgs)
	}
}

// TestSeedPrintsShared: the seed's request sent again takes the prints of
// the one before in their array (no new array of 631 prints a request),
// and so does the request that goes on from it.
func TestSeedPrintsShared(t *testing.T) {
	body := seedCase()
	memo := newMemo(4096)
	in := inputs{prof: prof("deepseek-v4"), track: true, carry: true}
	run := func(b []byte) result {
		res := shape(view(t, b), cacheAwareRule(), memo, in)
		putBlocks(res.Blocks)
		in.from.release()
		in.prev, in.from = res.Prints, res.Carry
		return res
	}
	first := run(body)
	again := run(body)
	if !sameArray(first.Prints, again.Prints) || !samePrints(first.Prints, again.Prints) {
		t.Fatalf("the seed sent again: prints in the same array %v", sameArray(first.Prints, again.Prints))
	}
	more := run(appendMsg(appendMsg(body, []byte(`{"role":"assistant","content":"done"}`)), []byte(`{"role":"user","content":"and then?"}`)))
	if !sameArray(first.Prints, more.Prints) || len(more.Prints.msgs) != len(first.Prints.msgs)+2 || !slices.Equal(more.Prints.msgs[:len(first.Prints.msgs)-1], first.Prints.msgs[:len(first.Prints.msgs)-1]) {
		t.Fatalf("the seed and two messages more: in the same array %v, %d prints after %d", sameArray(first.Prints, more.Prints), len(more.Prints.msgs), len(first.Prints.msgs))
	}
	in.from.release()
}
