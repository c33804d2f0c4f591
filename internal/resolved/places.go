package resolved

// Places remembers, for each place (a request's messages, by index), the
// last key set there and the value resolved for it: a conversation's next
// request repeats most of them at the same places, and comparing a key
// costs less than a lookup in a map. A place keeps its pair until another
// is set there: a request that repeats the last one's places finds them
// where they are, and nothing is cleared or copied per request (for a
// history of hundreds of messages that was most of the cost). A value
// must therefore stay right for its key as long as the Places is used (a
// pure function of the key, or one its user checks). The zero Places is
// ready to use; it is not safe for concurrent use (callers hold their own
// lock, or use it from one goroutine).
type Places[K comparable, V any] struct {
	s []placed[K, V]
}

type placed[K comparable, V any] struct {
	k  K
	v  V
	ok bool
}

// MaxPlaces bounds the places kept: the places of a longer sequence past
// it are none.
const MaxPlaces = 1 << 14

// Begin readies the places of a sequence of n, keeping what they hold.
func (p *Places[K, V]) Begin(n int) {
	if n = min(n, MaxPlaces); n > len(p.s) {
		p.s = append(p.s, make([]placed[K, V], n-len(p.s))...)
	}
}

// Get returns the value set at place i with k, when k is the key last set
// there (a negative i is no place: never found).
func (p *Places[K, V]) Get(i int, k K) (V, bool) {
	if uint(i) < uint(len(p.s)) && p.s[i].ok && p.s[i].k == k {
		return p.s[i].v, true
	}
	var zero V
	return zero, false
}

// Set records k and its value v at place i (ignored past the places
// begun, and for a negative i).
func (p *Places[K, V]) Set(i int, k K, v V) {
	if uint(i) < uint(len(p.s)) {
		p.s[i] = placed[K, V]{k, v, true}
	}
}
