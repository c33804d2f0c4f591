package proxy

import (
	"sync/atomic"
	"testing"
	"time"
)

// TestWheel: a watch on the wheel is looked at every tick while it is
// registered, and not after it left (but for a look already taken); the
// wheel stops ticking once it has been empty for its keep, and starts
// again with the next watch.
func TestWheel(t *testing.T) {
	const every, keep = 5 * time.Millisecond, 40 * time.Millisecond
	w := newWheel(every, keep)
	var looks atomic.Int32
	x := &wheelWatch{look: func(time.Time) { looks.Add(1) }}
	waitFor := func(what string, ok func() bool) {
		t.Helper()
		for deadline := time.Now().Add(5 * time.Second); !ok(); time.Sleep(time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("after 5s: %s", what)
			}
		}
	}
	w.add(x)
	if !w.isTicking() || w.size() != 1 {
		t.Fatalf("after add: ticking %v, %d watches", w.isTicking(), w.size())
	}
	waitFor("three looks", func() bool { return looks.Load() >= 3 })
	w.remove(x)
	time.Sleep(2 * every) // a look taken before the remove has run by now
	after := looks.Load()
	time.Sleep(4 * every)
	if got := looks.Load(); got != after {
		t.Fatalf("%d looks after the watch left the wheel", got-after)
	}
	waitFor("the wheel stopped ticking after its keep", func() bool { return !w.isTicking() })

	w.add(x)
	if !w.isTicking() {
		t.Fatal("a watch added to a stopped wheel did not start it")
	}
	waitFor("a look after the restart", func() bool { return looks.Load() > after })
	w.remove(x)
}

// TestWheelLookRemovesItself: a look may take its own watch off the wheel
// (the tick looks outside the wheel's lock), and another watch added
// meanwhile is looked at on the next tick.
func TestWheelLookRemovesItself(t *testing.T) {
	w := newWheel(2*time.Millisecond, 20*time.Millisecond)
	var a, b atomic.Int32
	var y *wheelWatch
	y = &wheelWatch{look: func(time.Time) { b.Add(1) }}
	var x *wheelWatch
	x = &wheelWatch{look: func(time.Time) {
		if a.Add(1) == 1 {
			w.remove(x)
			w.add(y)
		}
	}}
	w.add(x)
	for deadline := time.Now().Add(5 * time.Second); b.Load() < 2; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("after 5s: the watch added by a look was looked at %d times", b.Load())
		}
	}
	if a.Load() != 1 {
		t.Fatalf("the watch that removed itself was looked at %d times", a.Load())
	}
	w.remove(y)
}
