// Package bigbuf hands out large byte buffers (a request body, an edited
// body) and takes them back, for the next body, as soon as nothing uses
// them any more.
//
// A fresh buffer of a megabyte costs far more than its copy: its pages
// are cleared, faulted in after the runtime gave them back to the system,
// and the garbage it becomes brings the next collection closer. (Make
// has the pages of one it allocates afresh faulted in by one call where
// the system can, internal/prefault, rather than a fault on each page's
// first write; MakeAsItComes leaves that to a maker that fills the
// buffer as its bytes arrive.)
//
// A buffer is counted: Make gives it one reference, held by its maker;
// whoever keeps it beyond the maker's use (a cache of parsed requests,
// the capture queue) calls Retain, and every holder calls Release when it
// is done. The last Release puts it back on the free list at once, for the
// next Make. A holder must not keep any part of it past its Release: not a
// sub-slice, not a string that aliases its bytes. In a test binary a
// buffer released is overwritten with a pattern, so that a reader who
// broke that rule reads garbage and its test fails.
//
// A buffer whose references are never all released is not lost: it
// carries a finalizer, which runs when no pointer into the buffer is left
// (a string that aliases a byte of it keeps all of it) and puts it back
// then, as the collector has proved nothing can read it.
//
// Buffers come in classes from MinSize to MaxSize, four to each doubling
// (so a buffer is at most a quarter larger than asked: SizeOf is what a
// bound on memory should count); a request outside them gets a plain
// make, and Retain and Release do nothing to it. The free list holds at
// most MaxFree bytes; a buffer that finds it full is left to the
// collector, and so is one that waited on the list unused through two or
// three collections (an idle program is collected at least every two
// minutes, unless GOGC=off: the memory of a burst of large bodies goes
// back within minutes).
package bigbuf

import (
	"math/bits"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"unsafe"

	"github.com/shaperproxy/shaperproxy/internal/gccycle"
	"github.com/shaperproxy/shaperproxy/internal/prefault"
)

const (
	// MinSize is the smallest buffer handed out from the free list:
	// below it a fresh allocation is cheap.
	MinSize = 64 << 10
	// MaxSize is the largest.
	MaxSize = 16 << 20
	// MaxFree bounds the bytes the free list keeps.
	MaxFree = 64 << 20
)

const (
	minShift = 16      // log2(MinSize)
	classes  = 8*4 + 1 // 64 KiB … 16 MiB, four steps to each of its eight doublings
)

// maxFree is MaxFree, smaller in tests.
var maxFree = MaxFree

// free is the free list, by class; each list is a stack, its oldest
// buffers at the bottom.
var free struct {
	mu    sync.Mutex
	lists [classes][]entry
	bytes int
	cycle int // collections seen (trim, after each)

	// refs counts the references of each buffer handed out and not
	// yet back, by its first byte's address (a uintptr: the count must
	// not keep the buffer alive, or its finalizer would never run).
	refs map[uintptr]ref
}

// ref is a buffer's count of references and its class, and what its
// last Release runs (OnRelease).
type ref struct {
	n       int32
	class   int8
	done    func()
	reclaim func([]byte)
}

// entry is a buffer on the free list and the collection count when it
// came there.
type entry struct {
	p     *byte
	cycle int
}

// releasers[c] is the finalizer of the buffers of class c.
var releasers [classes]func(*byte)

func init() {
	free.refs = make(map[uintptr]ref)
	for c := range releasers {
		releasers[c] = func(p *byte) { put(c, p) }
	}
	gccycle.After(trim)
}

// staleAfter is how many collections a buffer waits on the free list
// unused before trim lets it go.
var staleAfter = 2

// trim drops the buffers that waited on the free list through staleAfter
// collections: more than the traffic needs.
func trim() {
	free.mu.Lock()
	defer free.mu.Unlock()
	free.cycle++
	for c, l := range free.lists {
		n := 0 // the stale ones are at the bottom
		for n < len(l) && free.cycle-l[n].cycle >= staleAfter {
			n++
		}
		if n > 0 {
			free.lists[c] = slices.Delete(l, 0, n) // clears the tail: no stale copy keeps a buffer alive
			free.bytes -= n * classSize(c)
		}
	}
}

// classSize is the capacity of the buffers of class c: MinSize doubled
// c/4 times, plus c%4 quarters of that.
func classSize(c int) int {
	base := MinSize << (c / 4)
	return base + base/4*(c%4)
}

// classOf returns the class of a buffer of n bytes (the smallest that
// holds n), and false when n is outside the classes.
func classOf(n int) (int, bool) {
	if n < MinSize || n > MaxSize {
		return 0, false
	}
	if n == MinSize {
		return 0, true
	}
	k := bits.Len(uint(n-1)) - 1 // 2^k < n ≤ 2^(k+1)
	step := 1 << (k - 2)
	q := (n - 1<<k + step - 1) / step // 1…4 quarters above 2^k
	return (k-minShift)*4 + q, true
}

// SizeOf returns the memory Make(n) takes: its class's size, or n outside
// the classes.
func SizeOf(n int) int {
	if c, ok := classOf(n); ok {
		return classSize(c)
	}
	return n
}

// Make returns a buffer of length and capacity n. Its bytes are not
// cleared (they may hold an earlier body): the caller writes all n before
// it reads any, or drops the buffer. One allocated afresh has its pages
// faulted in by one call where the system can (internal/prefault),
// rather than a fault on each page's first write: for a caller that
// writes it at once. One that fills it as its bytes arrive takes
// MakeAsItComes.
func Make(n int) []byte {
	b, fresh := MakeAsItComes(n)
	if fresh {
		prefault.Populate(b)
	}
	return b
}

// MakeAsItComes is Make for a caller that fills the buffer as its bytes
// arrive (a request body read from the client): it leaves the pages of
// one allocated afresh as they are and reports it fresh (of a size
// worth faulting in: MinSize or more), so that the caller faults each
// part in as it comes to it (prefault.Populate) instead of all of it
// before the first byte, which would make a client that declares a
// length and sends nothing cost resident memory.
func MakeAsItComes(n int) (b []byte, fresh bool) {
	c, ok := classOf(n)
	if !ok {
		return make([]byte, n), n >= MinSize
	}
	free.mu.Lock()
	var p *byte
	if l := free.lists[c]; len(l) > 0 {
		p = l[len(l)-1].p
		l[len(l)-1] = entry{}
		free.lists[c] = l[:len(l)-1]
		free.bytes -= classSize(c)
	}
	free.mu.Unlock()
	fresh = p == nil
	if fresh {
		p = &make([]byte, classSize(c))[0]
		made.Add(1)
	} else {
		reused.Add(1)
	}
	runtime.SetFinalizer(p, releasers[c]) // set again: a finalizer runs once (or was cleared by Release)
	free.mu.Lock()
	free.refs[uintptr(unsafe.Pointer(p))] = ref{n: 1, class: int8(c)}
	free.mu.Unlock()
	// Capacity n, as make gives: an append past the end copies instead of
	// writing into the class's spare bytes, where two appends to one body
	// would meet (and the spare bytes hold an earlier body's).
	return unsafe.Slice(p, classSize(c))[:n:n], fresh
}

// put keeps the unreferenced buffer p of class c, when the free list has
// room (the finalizer's goroutine runs it).
func put(c int, p *byte) {
	free.mu.Lock()
	defer free.mu.Unlock()
	delete(free.refs, uintptr(unsafe.Pointer(p))) // references not all released: the collector proved them gone
	putLocked(c, p)
}

// putLocked is put with free.mu held.
func putLocked(c int, p *byte) {
	if free.bytes+classSize(c) > maxFree {
		return // no finalizer left on it: the next collection frees it
	}
	free.lists[c] = append(free.lists[c], entry{p, free.cycle})
	free.bytes += classSize(c)
}

// Retain adds a reference to b, a buffer Make returned (b starts at its
// first byte; a sub-slice that starts further, or a buffer Make did not
// hand out from the classes, is not counted and Retain does nothing).
// The holder calls Release once for each Retain.
func Retain(b []byte) {
	if cap(b) < MinSize {
		return
	}
	k := uintptr(unsafe.Pointer(unsafe.SliceData(b)))
	free.mu.Lock()
	if r, ok := free.refs[k]; ok {
		r.n++
		free.refs[k] = r
	}
	free.mu.Unlock()
}

// Release drops a reference to b (as Retain names it). The last one
// puts the buffer back on the free list at once: the caller, and every
// other holder that released it, must not read or write any part of it
// afterwards. Releasing a buffer more often than it was made and
// retained is a bug that Release cannot always see (the buffer may
// already be another body's); when it can, it panics.
func Release(b []byte) {
	if cap(b) < MinSize {
		return
	}
	p := unsafe.SliceData(b)
	k := uintptr(unsafe.Pointer(p))
	free.mu.Lock()
	r, ok := free.refs[k]
	switch {
	case !ok:
		free.mu.Unlock()
		if onFreeList(k) {
			panic("bigbuf: Release of a buffer already released")
		}
		return // not from the classes, or freed by the collector: nothing to give back
	case r.n > 1:
		r.n--
		free.refs[k] = r
		free.mu.Unlock()
		return
	}
	delete(free.refs, k)
	free.mu.Unlock()
	runtime.SetFinalizer(p, nil) // given back: the finalizer must not give it back again
	if r.done != nil {
		r.done()
	}
	c := int(r.class)
	poisoned := poison.Load() // once: SetPoisoning may change it meanwhile
	if r.reclaim != nil && !poisoned {
		// Handed to its reclaimer instead, counted again with the one
		// reference it now holds, as Make hands a buffer out.
		runtime.SetFinalizer(p, releasers[c])
		free.mu.Lock()
		free.refs[k] = ref{n: 1, class: r.class}
		free.mu.Unlock()
		released.Add(1)
		r.reclaim(unsafe.Slice(p, classSize(c)))
		return
	}
	if r.reclaim != nil {
		// In a test binary the reclaimer gets a copy in another buffer,
		// and this one is overwritten as any released buffer is: a
		// holder that read it after its release still reads garbage.
		cp := Make(classSize(c))
		copy(cp, unsafe.Slice(p, classSize(c)))
		defer r.reclaim(cp)
	}
	if poisoned {
		fill(unsafe.Slice(p, classSize(c)))
	}
	free.mu.Lock()
	putLocked(c, p)
	released.Add(1)
	free.mu.Unlock()
}

// OnRelease has f run by b's last Release, before the buffer goes back
// (as Retain names it), so that what lives exactly as long as b's bytes
// (a view that aliases them) goes back with it. It reports whether b is
// counted; when not, f never runs. One f a buffer: a later one replaces
// it. A buffer the collector gives back runs no f.
//
// f must not reach b, by a closure's variables or anything it points to
// (a view whose strings alias b): the free list keeps f, and b would then
// never be unreachable, so a buffer whose holder forgot its Release would
// never go back. Reach what f gives back through a weak pointer.
func OnRelease(b []byte, f func()) bool { return setRef(b, func(r *ref) { r.done = f }) }

// setRef has set change b's count (as Retain names it) and reports
// whether b is counted.
func setRef(b []byte, set func(*ref)) bool {
	if cap(b) < MinSize {
		return false
	}
	k := uintptr(unsafe.Pointer(unsafe.SliceData(b)))
	free.mu.Lock()
	defer free.mu.Unlock()
	r, ok := free.refs[k]
	if ok {
		set(&r)
		free.refs[k] = r
	}
	return ok
}

// Reclaim has b's last Release hand the buffer to f instead of the free
// list, with its bytes as they are: f gets the whole buffer (its class's
// size), counted with one reference, which f's receiver now holds and
// releases in time (a body kept to be written over by the next one:
// Resized). It reports whether b is counted; when not, f never runs. One
// reclaimer a buffer, taken by the release that runs it; a buffer the
// collector gives back runs none. In a test binary f gets a copy of the
// bytes in another buffer, and b is overwritten and goes back as any
// (Release).
//
// Like OnRelease's, f must not reach b before it runs (a weak pointer, or
// nothing of b at all).
func Reclaim(b []byte, f func([]byte)) bool { return setRef(b, func(r *ref) { r.reclaim = f }) }

// Resized returns b's buffer at length and capacity n, for b's only
// holder (Reclaim) to write: ok is false when b is not counted or its
// class does not hold n. The bytes past b's length are an earlier body's.
func Resized(b []byte, n int) ([]byte, bool) {
	if cap(b) < MinSize || n < 0 {
		return nil, false
	}
	p := unsafe.SliceData(b)
	free.mu.Lock()
	r, ok := free.refs[uintptr(unsafe.Pointer(p))]
	free.mu.Unlock()
	if !ok || n > classSize(int(r.class)) {
		return nil, false
	}
	return unsafe.Slice(p, classSize(int(r.class)))[:n:n], true
}

// onFreeList reports whether the buffer at address k is on the free list.
func onFreeList(k uintptr) bool {
	free.mu.Lock()
	defer free.mu.Unlock()
	for _, l := range free.lists {
		for _, e := range l {
			if uintptr(unsafe.Pointer(e.p)) == k {
				return true
			}
		}
	}
	return false
}

// poison is set in test binaries: a released buffer is overwritten, so
// that a holder reading it after its Release reads garbage.
var poison atomic.Bool

func init() { poison.Store(testing.Testing()) }

// SetPoisoning turns the overwriting of released buffers on or off and
// returns whether it was on. It is on in test binaries only; a benchmark
// that times the proxy's own work turns it off, as the filling of a
// released megabyte would be in the times and a production binary does
// not do it.
func SetPoisoning(on bool) (was bool) { return poison.Swap(on) }

// Poison is the byte a released buffer is filled with in a test binary.
const Poison = 0xA5

// Poisoned reports whether b is filled with Poison at both ends: in a
// test binary, a buffer given back and not handed out again. A test that
// asks whether one body went back asks this, not Released, which counts
// every buffer of the binary: another test's, given back by the
// collector meanwhile, too (a count of Released failed so once under
// -race in session BM).
func Poisoned(b []byte) bool { return len(b) > 0 && b[0] == Poison && b[len(b)-1] == Poison }

func fill(b []byte) {
	b[0] = Poison
	for n := 1; n < len(b); n *= 2 {
		copy(b[n:], b[:n])
	}
}

// made and reused count the buffers of the classes Make allocated and
// took from the free list.
var made, reused, released atomic.Int64

// Counts returns how many buffers Make has allocated and how many it took
// from the free list.
func Counts() (allocated, fromFreeList int64) { return made.Load(), reused.Load() }

// Released returns how many buffers came back by their last Release, to
// the free list or to their reclaimer (the others came back by the
// collector).
func Released() int64 { return released.Load() }

// Free returns the bytes the free list holds.
func Free() int {
	free.mu.Lock()
	defer free.mu.Unlock()
	return free.bytes
}
