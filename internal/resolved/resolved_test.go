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

// TestPlaces: a value is found at its place under the key last set there,
// whatever sequences began since (a place keeps its pair until another is
// set), not under another key, not at a place never set, not past the
// places begun nor past the bound.
func TestPlaces(t *testing.T) {
	var p Places[string, int]
	p.Begin(3)
	p.Set(0, "a", 1)
	p.Set(2, "c", 3) // place 1 never set
	p.Set(5, "x", 9) // past the places begun: ignored
	p.Begin(2)       // a shorter sequence: the places past it keep their pairs
	if v, ok := p.Get(0, "a"); !ok || v != 1 {
		t.Fatalf("place 0: %d, %v", v, ok)
	}
	if _, ok := p.Get(0, "b"); ok {
		t.Fatal("found under another key")
	}
	if _, ok := p.Get(1, ""); ok {
		t.Fatal("found a place never set")
	}
	if _, ok := p.Get(5, "x"); ok {
		t.Fatal("found a pair set past the places begun")
	}
	p.Set(0, "b", 2)
	p.Begin(4)
	if _, ok := p.Get(0, "a"); ok {
		t.Fatal("found a pair set over since")
	}
	if v, ok := p.Get(0, "b"); !ok || v != 2 {
		t.Fatalf("place 0: %d, %v", v, ok)
	}
	if v, ok := p.Get(2, "c"); !ok || v != 3 {
		t.Fatalf("place 2, set two sequences ago: %d, %v", v, ok)
	}
	p.Set(-1, "n", 7) // no place: ignored
	if _, ok := p.Get(-1, "n"); ok {
		t.Fatal("found at a negative place")
	}
	p.Begin(MaxPlaces + 10)
	p.Set(MaxPlaces, "z", 26)
	if _, ok := p.Get(MaxPlaces, "z"); ok || len(p.s) != MaxPlaces {
		t.Fatalf("places past the bound: %d kept", len(p.s))
	}
	p.Set(MaxPlaces-1, "y", 25)
	if v, ok := p.Get(MaxPlaces-1, "y"); !ok || v != 25 {
		t.Fatalf("the last place within the bound: %d, %v", v, ok)
	}
}
