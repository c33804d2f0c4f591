package proxy

import (
	"sync"
	"time"
)

// wheel runs the looks of the watches that wait on time: a request's
// watch of its client's connection (serverConn.lookWatch) and a large
// body's write (writeWatch.look), from one timer that ticks every
// wheelEvery while a watch is registered, and until its ticks have found
// none for wheelKeep. A request arms no timer of its own. Arming a timer while none
// of the runtime's threads waits in its network poller wakes one (the
// runtime's wakeNetPoller), and a request did it twice, both times on its
// way: the request's watch as its body began, a large body's watch as its
// write began. Without the two arms the seed's added p50 was 30–45 µs
// lower (internal/bench/HISTORY.md, Session BZ).
//
// A look may come after its watch left the wheel (a tick takes the
// watches, then looks outside the wheel's lock): each look checks that
// its watch is still on.
type wheel struct {
	every, keep time.Duration

	mu      sync.Mutex
	t       *time.Timer
	ticking bool
	idle    int // ticks in a row that found no watch and saw none added since
	watches map[*wheelWatch]struct{}
	looks   []*wheelWatch // the tick's, reused (ticks never overlap: the next is armed after the looks)
}

// wheelWatch is a watch on the wheel: look runs at each tick while it is
// registered, in the wheel's goroutine; it must not block.
type wheelWatch struct {
	look func(now time.Time)
}

const (
	wheelEvery = 25 * time.Millisecond
	wheelKeep  = 2 * time.Second
)

// watches is the process's wheel.
var watches = newWheel(wheelEvery, wheelKeep)

func newWheel(every, keep time.Duration) *wheel {
	return &wheel{every: every, keep: keep, watches: map[*wheelWatch]struct{}{}}
}

// add registers x; its first look comes within w.every.
func (w *wheel) add(x *wheelWatch) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.watches[x] = struct{}{}
	w.idle = 0
	if w.ticking {
		return
	}
	w.ticking = true
	if w.t == nil {
		w.t = time.AfterFunc(w.every, w.tick)
		return
	}
	w.t.Reset(w.every)
}

// remove takes x off the wheel (a look already taken may still run).
func (w *wheel) remove(x *wheelWatch) {
	w.mu.Lock()
	defer w.mu.Unlock()
	delete(w.watches, x)
}

// tick runs in the timer's goroutine.
func (w *wheel) tick() {
	now := time.Now()
	w.mu.Lock()
	looks := w.looks[:0]
	for x := range w.watches {
		looks = append(looks, x)
	}
	w.looks = looks
	if len(looks) == 0 {
		w.idle++
	} else {
		w.idle = 0
	}
	w.mu.Unlock()
	for _, x := range looks {
		x.look(now)
	}
	clear(looks) // no watch kept alive by the buffer
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.watches) == 0 && time.Duration(w.idle)*w.every >= w.keep {
		w.ticking = false
		return
	}
	w.t.Reset(w.every)
}

// isTicking reports whether the wheel's timer is on (tests).
func (w *wheel) isTicking() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.ticking
}

// size is the number of watches on the wheel (tests).
func (w *wheel) size() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.watches)
}
