package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"
)

// The program stops in two steps: the first SIGINT or SIGTERM cancels the
// command's context (serve stops accepting and lets the calls in flight
// finish), the second closes the context's cut channel (serve cuts them
// at once), and a third ends the process the default way.

type cutKey struct{}

// withCut returns ctx carrying cut, closed when the command must stop at
// once.
func withCut(ctx context.Context, cut <-chan struct{}) context.Context {
	return context.WithValue(ctx, cutKey{}, cut)
}

// cutOf returns the cut channel of ctx; nil (never ready) when it has
// none.
func cutOf(ctx context.Context) <-chan struct{} {
	cut, _ := ctx.Value(cutKey{}).(<-chan struct{})
	return cut
}

// notifyStop returns a context cancelled by the first SIGINT or SIGTERM,
// whose cut channel the second closes; stop releases the signals.
func notifyStop(parent context.Context) (ctx context.Context, stop func()) {
	ch := make(chan os.Signal, 2)
	signal.Notify(ch, os.Interrupt, syscall.SIGTERM)
	ctx, cancel := context.WithCancel(parent)
	cut, done := make(chan struct{}), make(chan struct{})
	go func() {
		select {
		case <-ch:
			cancel()
		case <-done:
			return
		}
		select {
		case <-ch:
			close(cut)
			signal.Reset(os.Interrupt, syscall.SIGTERM) // the third: the default action
		case <-done:
		}
	}()
	return withCut(ctx, cut), func() {
		signal.Stop(ch)
		close(done)
		cancel()
	}
}
