// Package slicepool keeps slices of a request's working arrays (a long
// history's messages, the shaper's candidates) for the next request: each
// is a large allocation, cleared when made, and garbage a request later.
package slicepool

import "sync"

// Pool holds slices of T. The zero Pool is ready to use; it is safe for
// concurrent use. A slice given back is dropped by the runtime's
// collections when nothing takes it (sync.Pool).
//
// A sync.Pool holds pointers: each slice goes in a box (a *[]T), and the
// boxes emptied by Get are kept in a pool of their own for Put to fill,
// so that giving a slice back allocates nothing once the boxes are made.
type Pool[T any] struct{ p, boxes sync.Pool }

// Get returns an empty slice with room for n, one given back when its
// room is between n and most (a slice much larger than asked would keep
// its room under a short request), else a new one. A slice larger than
// most goes back for a longer request, after a second look: the pool
// hands out the slice given back last first, so a conversation's first
// request, whose arrays are its longest, would otherwise leave one there
// that every shorter request after it finds first and makes its own
// (TestLargerSliceDoesNotBlock). The room past what the caller writes
// may hold what an earlier user left (Put does not clear).
func (p *Pool[T]) Get(n, most int) []T {
	tooLarge := func(b *[]T) bool { return cap(*b) > most && cap(*b) > n }
	b, ok := p.p.Get().(*[]T)
	if ok && tooLarge(b) {
		next, more := p.p.Get().(*[]T) // taken before the large one goes back, which would come out first again
		p.p.Put(b)                     // for a longer request
		if b, ok = next, more; ok && tooLarge(b) {
			p.p.Put(b)
			ok = false
		}
	}
	if !ok {
		return make([]T, 0, n)
	}
	s := *b
	*b = nil
	p.boxes.Put(b)
	if cap(s) >= n {
		return s[:0]
	}
	return make([]T, 0, n)
}

// Put gives s back; nothing may read or write it afterwards. It is not
// cleared: a caller whose elements hold pointers clears it first, unless
// the next user writes every element it reads.
func (p *Pool[T]) Put(s []T) {
	if cap(s) == 0 {
		return
	}
	b, ok := p.boxes.Get().(*[]T)
	if !ok {
		b = new([]T)
	}
	*b = s[:0]
	p.p.Put(b)
}
