// Package resolved keeps values resolved once per key for the request
// path: a route and model's profile, a metric vector's child, a meter's
// counters. Lookups take no lock (sync.Map's read path writes nothing, so
// two cores looking up at once do not pass a cache line between them, as
// a read lock's counter did); the number of keys is bounded, since keys
// such as a model's name come from clients: past the bound the cache
// starts again.
package resolved

import "sync"

// Cache maps keys to values resolved once. The zero Cache is not usable;
// use New. It is safe for concurrent use.
type Cache[K comparable, V any] struct {
	m   sync.Map // K → V; read without a lock
	mu  sync.Mutex
	n   int // keys in m, under mu
	max int
}

// New returns a Cache holding at most max keys.
func New[K comparable, V any](max int) *Cache[K, V] {
	return &Cache[K, V]{max: max}
}

// Get returns the value of k, calling resolve the first time (and again
// after the cache started over). A miss takes a lock (misses are rare
// next to the lookups), so each key is resolved once and the bound is kept
// exactly; resolve runs under it and must not use the Cache.
func (c *Cache[K, V]) Get(k K, resolve func() V) V {
	if v, ok := c.m.Load(k); ok {
		return v.(V)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if v, ok := c.m.Load(k); ok {
		return v.(V)
	}
	if c.n >= c.max {
		c.m.Clear()
		c.n = 0
	}
	v := resolve()
	c.m.Store(k, v)
	c.n++
	return v
}

// Len returns the number of keys held.
func (c *Cache[K, V]) Len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n
}
