package resolved

import (
	"strconv"
	"sync"
	"testing"
)

// TestGet: a value is resolved once per key and then served; concurrent
// first lookups of a key all get the one value kept.
func TestGet(t *testing.T) {
	c := New[string, *int](16)
	calls := 0
	var mu sync.Mutex
	resolve := func(n int) func() *int {
		return func() *int { mu.Lock(); calls++; mu.Unlock(); return &n }
	}
	a := c.Get("a", resolve(1))
	if c.Get("a", resolve(2)) != a || *a != 1 || calls != 1 {
		t.Fatalf("second lookup resolved again (%d calls) or changed the value", calls)
	}
	var wg sync.WaitGroup
	got := make([]*int, 8)
	for i := range got {
		wg.Add(1)
		go func() { defer wg.Done(); got[i] = c.Get("b", resolve(i)) }()
	}
	wg.Wait()
	for _, p := range got {
		if p != got[0] {
			t.Fatal("concurrent lookups of one key got different values")
		}
	}
	if calls != 2 {
		t.Fatalf("%d resolutions for two keys, want one each", calls)
	}
	if n := testing.AllocsPerRun(100, func() { c.Get("a", nil) }); n != 0 {
		t.Errorf("%v allocations per lookup of a held key", n)
	}
}

// TestBounded: however many keys come, from however many goroutines, at
// most max are held (counted in the map itself); past the bound the cache
// starts again and still resolves right.
func TestBounded(t *testing.T) {
	c := New[int, string](64)
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := g * 1000; i < g*1000+1000; i++ {
				if got := c.Get(i, func() string { return strconv.Itoa(i) }); got != strconv.Itoa(i) {
					t.Errorf("key %d: got %q", i, got)
					return
				}
			}
		}()
	}
	wg.Wait()
	held := 0
	c.m.Range(func(any, any) bool { held++; return true })
	if held > 64 || held != c.Len() {
		t.Fatalf("%d keys held, %d counted, bound 64", held, c.Len())
	}
}
