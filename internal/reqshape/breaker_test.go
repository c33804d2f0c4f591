package reqshape

import (
	"testing"
	"time"
)

// TestBreakerPauses: a tripped route is paused for its cool-down and only
// that route; once the cool-down has passed it is not paused and its
// entry is gone (and no route is counted paused: the lock is not taken
// again), and it can be tripped again. A route never tripped (most
// requests ask about one) costs no clock read.
func TestBreakerPauses(t *testing.T) {
	now := time.Unix(1000, 0)
	reads := 0
	b := newBreaker(BreakerConfig{Cooldown: time.Minute})
	b.now = func() time.Time { reads++; return now }
	if b.paused("a") {
		t.Fatal("a route never tripped is paused")
	}
	if reads != 0 {
		t.Fatalf("asking about a route never tripped read the clock %d times, want none", reads)
	}
	b.trip("a")
	if !b.paused("a") || b.paused("b") {
		t.Fatalf("after a trip of a: paused(a)=%v paused(b)=%v, want true false", b.paused("a"), b.paused("b"))
	}
	now = now.Add(59 * time.Second)
	if !b.paused("a") {
		t.Fatal("a is no longer paused before its cool-down ended")
	}
	now = now.Add(time.Second)
	if b.paused("a") {
		t.Fatal("a is still paused when its cool-down has ended")
	}
	if _, ok := b.until["a"]; ok || b.tripped.Load() != 0 {
		t.Fatalf("an ended pause keeps its entry (%d counted)", b.tripped.Load())
	}
	b.trip("a")
	if !b.paused("a") {
		t.Fatal("a second trip does not pause")
	}
}
