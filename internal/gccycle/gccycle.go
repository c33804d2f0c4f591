// Package gccycle runs functions once after each garbage collection: the
// process's free lists and its heap's warming follow the collector's
// cycles without polling it.
package gccycle

import (
	"runtime"
	"sync"
)

var (
	mu  sync.Mutex
	fns []func()
)

func init() { arm() }

// tick is an object whose finalizer runs once per collection: it runs
// the functions and arms a new one. (A pointer field keeps it out of the
// tiny allocator, whose objects may be finalized late.)
type tick struct{ _ *byte }

func arm() {
	runtime.SetFinalizer(new(tick), func(*tick) {
		mu.Lock()
		run := fns
		mu.Unlock()
		for _, f := range run {
			f()
		}
		arm()
	})
}

// After has f run after each collection from now on, on the runtime's
// finalizer goroutine: f must be quick and must not block. There is no
// undoing it; f is for the life of the process.
func After(f func()) {
	mu.Lock()
	defer mu.Unlock()
	fns = append(fns[:len(fns):len(fns)], f) // a new array: a running tick keeps the old one
}
