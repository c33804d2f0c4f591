package bigbuf

import (
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

func TestClasses(t *testing.T) {
	for _, tc := range []struct{ n, class int }{
		{MinSize - 1, -1}, // below the classes: a plain make
		{MinSize, MinSize},
		{MinSize + 1, 2 * MinSize},
		{938 << 10, 1 << 20},
		{MaxSize, MaxSize},
		{MaxSize + 1, -1}, // above them
	} {
		c, ok := classOf(tc.n)
		if got := map[bool]int{true: classSize(c), false: -1}[ok]; got != tc.class {
			t.Errorf("class of %d: %d, want %d", tc.n, got, tc.class)
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
	drain := func() { // empty the class, so that the next Make shows where its buffer came from
		free.mu.Lock()
		c, _ := classOf(300 << 10)
		free.bytes -= len(free.lists[c]) * classSize(c)
		free.lists[c] = nil
		free.mu.Unlock()
	}
	drain()
	b := Make(300 << 10)
	for i := range b {
		b[i] = 'a'
	}
	kept := unsafe.String(&b[1000], 16) // as a parsed view's strings alias a body
	at := base(b)
	b = nil
	// While kept lives, the buffer is not on the free list.
	for range 3 {
		runtime.GC()
		time.Sleep(time.Millisecond)
	}
	if n := held(300 << 10); n != 0 {
		t.Fatalf("free list holds %d buffers of the class while a string points into its buffer", n)
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
	kept, other = "", nil
	// Now nothing points into either: both come back.
	collectUntil(t, "both buffers on the free list", func() bool { return held(300<<10) == 2 })
	seen := map[uintptr]bool{base(Make(300 << 10)): true, base(Make(260 << 10)): true}
	if !seen[at] {
		t.Fatal("the first buffer was not reused once unreferenced")
	}
	if n := held(300 << 10); n != 0 {
		t.Fatalf("free list holds %d buffers of the class after both were taken", n)
	}
}

// TestFreeBounded: the free list never keeps more than MaxFree bytes.
func TestFreeBounded(t *testing.T) {
	keepStale(t)
	bufs := make([][]byte, 2*MaxFree/MaxSize+2)
	for i := range bufs {
		bufs[i] = Make(MaxSize)
	}
	// All unreferenced at once: more than the bound comes back, and the
	// list fills until there is no room for another.
	bufs = nil
	collectUntil(t, "the free list full", func() bool { return Free() > MaxFree-MaxSize })
	for range 3 {
		runtime.GC()
		time.Sleep(time.Millisecond)
	}
	if got := Free(); got > MaxFree {
		t.Fatalf("free list holds %d bytes, bound %d", got, MaxFree)
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
