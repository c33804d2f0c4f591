package gccycle

import (
	"runtime"
	"sync/atomic"
	"testing"
	"time"
)

func TestAfterEachCollection(t *testing.T) {
	var a, b atomic.Int64
	After(func() { a.Add(1) })
	// Each collection runs f once: three collections, three runs (the
	// finalizer goroutine runs them a little after each).
	for i := int64(1); i <= 3; i++ {
		runtime.GC()
		waitFor(t, func() bool { return a.Load() >= i }, "a function registered with After did not run after a collection")
	}
	After(func() { b.Add(1) }) // registered later: runs from the next collection on, beside the first
	runtime.GC()
	waitFor(t, func() bool { return b.Load() >= 1 && a.Load() >= 4 }, "a second function did not run beside the first")
}

func waitFor(t *testing.T, ok func() bool, msg string) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		if ok() {
			return
		}
	}
	t.Fatal(msg)
}
