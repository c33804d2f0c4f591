package deliberate

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"
)

// TestBackgroundBounded: at most maxBackground deliberations run beside
// the clients' calls at once (each holds its request and spends the key
// on branches); one more is refused, and the room comes back as they end.
func TestBackgroundBounded(t *testing.T) {
	d := New(Config{Routes: []string{"*"}}, nil, nil)
	defer d.Close()
	release := make(chan struct{})
	free := sync.OnceFunc(func() { close(release) })
	defer free() // before Close, which waits for them
	ended := make(chan struct{}, maxBackground+1)
	for i := range maxBackground {
		if !d.background(fmt.Sprint("c", i), func(context.Context) { <-release; ended <- struct{}{} }) {
			t.Fatalf("deliberation %d refused below the bound", i)
		}
	}
	if d.background("one more", func(context.Context) { t.Error("ran past the bound") }) {
		t.Fatal("one more than maxBackground was started")
	}
	free()
	for range maxBackground {
		<-ended
	}
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(time.Millisecond) { // they leave just after ending
		d.mu.Lock()
		n := d.running
		d.mu.Unlock()
		if n == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d deliberations still counted after all ended", n)
		}
	}
	done := make(chan struct{})
	if !d.background("after", func(context.Context) { close(done) }) {
		t.Fatal("refused once the others ended")
	}
	<-done
}
