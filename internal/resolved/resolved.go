// Package resolved keeps values resolved once per key for the request
// path: a route and model's profile, a metric vector's child, a meter's
// counters. Lookups take no lock (sync.Map's read path writes nothing, so
// two cores looking up at once do not pass a cache line between them, as
// a read lock's counter did); the number of keys is bounded, since keys
// such as a model's name come from clients: past the bound the cache
// starts again.
package resolved

import (
	"sync"
	"sync/atomic"
)

// Cache maps keys to values resolved once. The zero Cache is not usable;
// use New. It is safe for concurrent use.
type Cache[K comparable, V any] struct {
	m   sync.Map // K → V
	n   atomic.Int64
	max int64
}

// New returns a Cache holding at most max keys.
func New[K comparable, V any](max int) *Cache[K, V] {
	return &Cache[K, V]{max: int64(max)}
}

// Get returns the value of k, calling resolve the first time (and again
// after the cache started over). Two goroutines may both resolve a new
// key; one value is kept and both get it.
func (c *Cache[K, V]) Get(k K, resolve func() V) V {
	if v, ok := c.m.Load(k); ok {
		return v.(V)
	}
	if c.n.Add(1) > c.max {
		c.m.Clear()
		c.n.Store(1)
	}
	v, _ := c.m.LoadOrStore(k, resolve())
	return v.(V)
}

// Len returns the number of keys held.
func (c *Cache[K, V]) Len() int {
	n := 0
	c.m.Range(func(any, any) bool { n++; return true })
	return n
}
