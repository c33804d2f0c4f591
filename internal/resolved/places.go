package resolved

// Places remembers, for each place of the last sequence it was given (a
// request's messages, by index), a key and the value resolved for it: a
// conversation's next request repeats most of them at the same places,
// and comparing a key costs less than a lookup in a map. The zero Places
// is ready to use; it is not safe for concurrent use (callers hold their
// own lock, or use it from one goroutine).
type Places[K comparable, V any] struct {
	prev, cur []placed[K, V] // the last sequence's places, and this one's
}

type placed[K comparable, V any] struct {
	k  K
	v  V
	ok bool
}

// MaxPlaces bounds the places kept: a longer sequence keeps none.
const MaxPlaces = 1 << 14

// Begin starts a sequence of n places: Get reads the previous
// sequence's, Set writes this one's.
func (p *Places[K, V]) Begin(n int) {
	p.prev, p.cur = p.cur, p.prev[:0]
	if n > MaxPlaces {
		p.cur = nil
		return
	}
	if cap(p.cur) < n {
		p.cur = make([]placed[K, V], n)
		return
	}
	p.cur = p.cur[:n]
	clear(p.cur)
}

// Get returns the value the previous sequence had at place i, when it
// had k there (a negative i is no place: never found).
func (p *Places[K, V]) Get(i int, k K) (V, bool) {
	if uint(i) < uint(len(p.prev)) && p.prev[i].ok && p.prev[i].k == k {
		return p.prev[i].v, true
	}
	var zero V
	return zero, false
}

// Set records k and its value v at place i of this sequence (ignored past
// its end, where a later Begin may have started a shorter one, and for a
// negative i).
func (p *Places[K, V]) Set(i int, k K, v V) {
	if uint(i) < uint(len(p.cur)) {
		p.cur[i] = placed[K, V]{k, v, true}
	}
}
