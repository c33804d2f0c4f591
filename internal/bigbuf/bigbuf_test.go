package bigbuf

import (
	"fmt"
	"runtime"
	"testing"
	"time"
	"unsafe"
)

// collectUntil runs collections until cond holds (finalizers run on a
// goroutine of their own, after the collection that found the buffer
// unreferenced), or fails the test after a few seconds.
func collectUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); {
		runtime.GC()
		if cond() {
			return
		}
		time.Sleep(time.Millisecond)
	}
	t.Fatalf("%s: not after 5 s of collections", what)
}

func base(b []byte) uintptr { return uintptr(unsafe.Pointer(unsafe.SliceData(b))) }

// keepStale turns trimming off for the test: what the test looks for on
// the free list must not leave it between two looks.
func keepStale(t *testing.T) {
	free.mu.Lock()
	defer free.mu.Unlock()
	old := staleAfter
	staleAfter = 1 << 30
	t.Cleanup(func() {
		free.mu.Lock()
		defer free.mu.Unlock()
		staleAfter = old
	})
}

// held returns how many buffers of n bytes' class the free list holds.
func held(n int) int {
	c, _ := classOf(n)
	free.mu.Lock()
	defer free.mu.Unlock()
	return len(free.lists[c])
}

// bound empties the free list and sets its bound for the test.
func bound(t *testing.T, n int) {
	free.mu.Lock()
	defer free.mu.Unlock()
	free.lists, free.bytes = [classes][]entry{}, 0
	old := maxFree
	maxFree = n
	t.Cleanup(func() {
		free.mu.Lock()
		defer free.mu.Unlock()
		maxFree = old
	})
}

func TestClasses(t *testing.T) {
	prev := 0 // every n from MinSize to MaxSize has the smallest class that holds it
	for c := 0; c < classes; c++ {
		size := classSize(c)
		if size <= prev || size > prev+prev/4+1 && c > 0 {
			t.Fatalf("class %d: size %d after %d (want larger, by at most a quarter)", c, size, prev)
		}
		for _, n := range []int{prev + 1, size} {
			if got, ok := classOf(n); n >= MinSize && (!ok || got != c) {
				t.Fatalf("class of %d: %d (%v), want %d", n, got, ok, c)
			}
		}
		prev = size
	}
	if prev != MaxSize {
		t.Fatalf("the last class is %d bytes, want MaxSize", prev)
	}
	for _, tc := range []struct{ n, size int }{
		{MinSize - 1, MinSize - 1}, // below the classes: a plain make
		{MinSize, MinSize},
		{MinSize + 1, MinSize + MinSize/4},
		{938 << 10, 1 << 20},
		{(1 << 20) + 1, 1<<20 + 1<<18},
		{MaxSize, MaxSize},
		{MaxSize + 1, MaxSize + 1}, // above them
	} {
		if got := SizeOf(tc.n); got != tc.size {
			t.Errorf("SizeOf(%d) = %d, want %d", tc.n, got, tc.size)
		}
		// As make: capacity n, so an append past the end copies.
		b := Make(tc.n)
		if len(b) != tc.n || cap(b) != tc.n {
			t.Errorf("Make(%d): len %d cap %d, want both %d", tc.n, len(b), cap(b), tc.n)
		}
		if c := append(b, 'x'); base(c) == base(b) {
			t.Errorf("Make(%d): an append wrote past the end in place", tc.n)
		}
	}
}

// TestReusedOnlyWhenUnreferenced: a buffer comes back from the free list
// once nothing points into it, and not while a string aliasing one of its
// bytes lives; the string's bytes stay as they were.
func TestReusedOnlyWhenUnreferenced(t *testing.T) {
	keepStale(t)
	b := Make(300 << 10)
	for i := range b {
		b[i] = 'a'
	}
	kept := unsafe.String(&b[1000], 16) // as a parsed view's strings alias a body
	at := base(b)
	b = nil
	// While kept lives, the buffer is not on the free list, nor handed out.
	for range 3 {
		runtime.GC()
		time.Sleep(time.Millisecond)
	}
	if onFreeList(at) {
		t.Fatal("a buffer is on the free list while a string points into it")
	}
	other := Make(300 << 10)
	if base(other) == at {
		t.Fatal("a buffer was handed out again while a string pointed into it")
	}
	for i := range other {
		other[i] = 'b'
	}
	if kept != "aaaaaaaaaaaaaaaa" {
		t.Fatalf("the aliasing string changed: %q", kept)
	}
	runtime.KeepAlive(kept)
	second := base(other)
	kept, other = "", nil
	// Now nothing points into either: both come back, and are handed out.
	collectUntil(t, "both buffers on the free list", func() bool { return onFreeList(at) && onFreeList(second) })
	for range held(300 << 10) {
		_ = Make(300 << 10)
	}
	if onFreeList(at) || onFreeList(second) {
		t.Fatal("a buffer on the free list was not handed out")
	}
}

// TestFreeBounded: the free list never keeps more than MaxFree bytes.
func TestFreeBounded(t *testing.T) {
	keepStale(t)
	bound(t, 2<<20)
	bufs := make([][]byte, 8) // 4 MiB: twice the bound
	for i := range bufs {
		bufs[i] = Make(512 << 10)
	}
	// All unreferenced at once: more than the bound comes back, and the
	// list fills until there is no room for another.
	bufs = nil
	collectUntil(t, "the free list full", func() bool { return Free() > 2<<20-512<<10 })
	for range 3 {
		runtime.GC()
		time.Sleep(time.Millisecond)
	}
	if got := Free(); got > 2<<20 {
		t.Fatalf("free list holds %d bytes, bound %d", got, 2<<20)
	}
	runtime.KeepAlive(bufs)
}

// TestIdleTrimmed: buffers nobody takes leave the free list after two
// collections.
func TestIdleTrimmed(t *testing.T) {
	for range 4 {
		_ = Make(3 << 20)
	}
	collectUntil(t, "buffers on the free list", func() bool { return held(3<<20) > 0 })
	collectUntil(t, "the idle buffers trimmed", func() bool { return held(3<<20) == 0 })
}

// TestTrimClearsTail: trimming leaves no copy of a kept entry past the
// list's end, which would keep that buffer alive after Make hands it out
// and its user drops it.
func TestTrimClearsTail(t *testing.T) {
	c, _ := classOf(5 << 20)
	bufs := make([][]byte, 4)
	free.mu.Lock()
	for i := range bufs {
		bufs[i] = make([]byte, classSize(c))
		free.lists[c] = append(free.lists[c], entry{&bufs[i][0], free.cycle + 100*(2*(i/2)-1)}) // the first two stale, the others fresh whatever the collections meanwhile
		free.bytes += classSize(c)
	}
	free.mu.Unlock()
	trim()
	free.mu.Lock()
	l := free.lists[c]
	tail := l[len(l):cap(l)]
	free.bytes -= len(l) * classSize(c)
	free.lists[c] = nil
	free.mu.Unlock()
	if len(l) != 2 || l[0].p != &bufs[2][0] || l[1].p != &bufs[3][0] {
		t.Fatalf("trim kept %d entries, want the two fresh ones", len(l))
	}
	for i, e := range tail {
		if e.p != nil {
			t.Fatalf("slot %d past the end still points at a buffer", len(l)+i)
		}
	}
}

func TestReleaseGivesBackAtOnce(t *testing.T) {
	keepStale(t)
	bound(t, MaxFree)
	const n = 1 << 20
	b := Make(n)
	addr := base(b)
	if onFreeList(addr) {
		t.Fatal("a buffer handed out is on the free list")
	}
	before := Released()
	Release(b)
	if !onFreeList(addr) {
		t.Fatal("the last Release did not put the buffer back")
	}
	if got := Released() - before; got != 1 {
		t.Fatalf("Released counted %d, want 1", got)
	}
	if again := Make(n); base(again) != addr {
		t.Fatal("the next Make of the class did not take the buffer released")
	}
}

func TestRetainHoldsUntilLastRelease(t *testing.T) {
	keepStale(t)
	bound(t, MaxFree)
	b := Make(300 << 10)
	addr := base(b)
	Retain(b)
	Retain(b)
	for i := range 2 {
		Release(b)
		if onFreeList(addr) {
			t.Fatalf("back on the free list after %d of 3 releases", i+1)
		}
	}
	Release(b)
	if !onFreeList(addr) {
		t.Fatal("not back after the last of 3 releases")
	}
}

func TestReleasePoisons(t *testing.T) {
	bound(t, MaxFree)
	b := Make(MinSize)
	for i := range b {
		b[i] = 'x'
	}
	s := unsafe.String(&b[0], len(b)) // a reader that keeps an alias past the release
	if Poisoned(b) {
		t.Fatal("a buffer in use reads as given back")
	}
	Release(b)
	if !Poisoned(b) {
		t.Fatal("a released buffer does not read as given back")
	}
	for i := range len(s) {
		if s[i] != Poison {
			t.Fatalf("byte %d of a released buffer is %q, not the poison", i, s[i])
		}
	}
}

func TestReleaseTwicePanics(t *testing.T) {
	keepStale(t)
	bound(t, MaxFree)
	b := Make(MinSize)
	Release(b)
	defer func() {
		if recover() == nil {
			t.Fatal("a second Release of a buffer on the free list did not panic")
		}
	}()
	Release(b)
}

func TestReleaseIgnoresOthers(t *testing.T) {
	keepStale(t)
	bound(t, MaxFree)
	b := Make(MinSize * 2)
	addr := base(b)
	Release(b[1:])                 // a sub-slice names no buffer
	Release(make([]byte, MinSize)) // nor does a plain make
	Release(make([]byte, 10))
	if onFreeList(addr) {
		t.Fatal("a sub-slice's Release gave the buffer back")
	}
	Release(b)
	if !onFreeList(addr) {
		t.Fatal("the buffer's own Release did not")
	}
}

// A reference never released does not lose the buffer: the collector
// gives it back once nothing points into it, and its count goes with it.
func TestUnreleasedGoesBackByCollector(t *testing.T) {
	keepStale(t)
	bound(t, MaxFree)
	addr := func() uintptr {
		b := Make(1 << 20)
		Retain(b) // a holder that never releases
		Release(b)
		return base(b)
	}()
	collectUntil(t, "the collector giving back a buffer never released", func() bool { return onFreeList(addr) })
	free.mu.Lock()
	_, counted := free.refs[addr]
	free.mu.Unlock()
	if counted {
		t.Fatal("the buffer the collector gave back still has a count")
	}
}

// TestOnReleaseAtLastRelease: the function OnRelease registers runs once,
// at the buffer's last Release, before the buffer can be handed out
// again; a buffer Make did not count takes none.
func TestOnReleaseAtLastRelease(t *testing.T) {
	b := Make(MinSize * 3)
	runs := 0
	if !OnRelease(b, func() {
		runs++
		if b[0] == Poison && b[len(b)-1] == Poison {
			t.Error("ran after the buffer was poisoned: it may already be another body's")
		}
	}) {
		t.Fatal("a counted buffer refused")
	}
	b[0], b[len(b)-1] = 1, 1
	Retain(b)
	Release(b)
	if runs != 0 {
		t.Fatal("ran before the last release")
	}
	Release(b)
	if runs != 1 {
		t.Fatalf("ran %d times at the last release, want 1", runs)
	}
	c := Make(MinSize * 3) // the same buffer, from the free list: its function is gone
	Release(c)
	if runs != 1 {
		t.Fatal("a buffer handed out again ran the earlier holder's function")
	}
	if OnRelease(make([]byte, MinSize*2), func() { t.Error("ran for an uncounted buffer") }) {
		t.Fatal("an uncounted buffer accepted a function")
	}
}

// TestReclaimAtLastRelease: a buffer with a reclaimer goes to it at its
// last release, not before, its bytes as they were (not poisoned), counted
// again with one reference, and grows within its class; its next last
// release puts it on the free list as any other. In a test binary the
// reclaimer gets a copy in another buffer and the released one is
// poisoned, so that a holder reading it after its release still fails.
func TestReclaimAtLastRelease(t *testing.T) {
	for _, poisoned := range []bool{false, true} {
		t.Run(fmt.Sprint("poison=", poisoned), func(t *testing.T) {
			defer SetPoisoning(SetPoisoning(poisoned))
			b := Make(MinSize + 10)
			b[0], b[len(b)-1] = 7, 9
			var got []byte
			if !Reclaim(b, func(r []byte) { got = r }) {
				t.Fatal("a counted buffer refused")
			}
			Retain(b)
			Release(b)
			if got != nil {
				t.Fatal("reclaimed before the last release")
			}
			back := Released()
			Release(b)
			size := SizeOf(len(b))
			if got == nil || len(got) != size || (&got[0] == &b[0]) == poisoned || Released() != back+1 {
				t.Fatalf("not reclaimed whole at the last release (got %d bytes, the same buffer: %v)", len(got), got != nil && &got[0] == &b[0])
			}
			if got[0] != 7 || got[MinSize+9] != 9 {
				t.Fatal("the reclaimed bytes changed")
			}
			if poisoned && (b[0] != Poison || b[MinSize+9] != Poison) {
				t.Fatal("the released buffer was not poisoned")
			}
			if g, ok := Resized(got, size); !ok || len(g) != size || &g[0] != &got[0] {
				t.Fatal("not resized within its class")
			}
			if _, ok := Resized(got, size+1); ok {
				t.Fatal("resized past its class")
			}
			freed := Released()
			Release(got)
			if Released() != freed+1 {
				t.Fatal("the reclaimed buffer's release did not give it back")
			}
			if _, ok := Resized(got, MinSize); ok {
				t.Fatal("a released buffer resized")
			}
		})
	}
	u := make([]byte, MinSize*2)
	if Reclaim(u, func([]byte) { t.Error("reclaimed an uncounted buffer") }) {
		t.Fatal("an uncounted buffer accepted a reclaimer")
	}
	if _, ok := Resized(u, MinSize); ok {
		t.Fatal("an uncounted buffer resized")
	}
}
