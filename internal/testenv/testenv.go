// Package testenv holds what several packages' tests need of their
// environment: a log that keeps its records, a real small file system, a
// settable clock, a lowered stack limit, whether the race detector is on,
// a raw loopback server.
// Only tests import it.
package testenv

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"os/exec"
	"runtime/debug"
	"strings"
	"sync"
	"testing"
	"time"
)

// Log is a slog handler that keeps every record. It is safe for
// concurrent use.
type Log struct {
	mu   sync.Mutex
	recs []slog.Record
}

// Enabled reports true: every level is kept.
func (l *Log) Enabled(context.Context, slog.Level) bool { return true }

// Handle keeps r.
func (l *Log) Handle(_ context.Context, r slog.Record) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.recs = append(l.recs, r.Clone())
	return nil
}

// WithAttrs returns l (attributes of the logger are not kept).
func (l *Log) WithAttrs([]slog.Attr) slog.Handler { return l }

// WithGroup returns l.
func (l *Log) WithGroup(string) slog.Handler { return l }

// Lines returns the attributes of the records whose message starts with
// prefix, in order.
func (l *Log) Lines(prefix string) []map[string]slog.Value {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []map[string]slog.Value
	for _, r := range l.recs {
		if strings.HasPrefix(r.Message, prefix) {
			attrs := map[string]slog.Value{}
			r.Attrs(func(a slog.Attr) bool { attrs[a.Key] = a.Value; return true })
			out = append(out, attrs)
		}
	}
	return out
}

// Rendered returns every record as one line: its message, then its
// attributes as key=value.
func (l *Log) Rendered() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := make([]string, 0, len(l.recs))
	for _, r := range l.recs {
		var b strings.Builder
		b.WriteString(r.Message)
		r.Attrs(func(a slog.Attr) bool { fmt.Fprintf(&b, " %s=%v", a.Key, a.Value); return true })
		out = append(out, b.String())
	}
	return out
}

// Count returns how many records have a message starting with prefix.
func (l *Log) Count(prefix string) int { return len(l.Lines(prefix)) }

// Tmpfs mounts a tmpfs of size bytes for the test and unmounts it at the
// end, or skips the test where mounting is not allowed.
func Tmpfs(t testing.TB, size int) string {
	t.Helper()
	mnt := t.TempDir()
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", fmt.Sprintf("size=%d", size), "tmpfs", mnt).CombinedOutput(); err != nil {
		t.Skipf("cannot mount a tmpfs: %v %s", err, out)
	}
	t.Cleanup(func() { _ = exec.Command("umount", mnt).Run() })
	return mnt
}

// Clock is a settable clock for a store's Options.Now. It is safe for
// concurrent use.
type Clock struct {
	mu sync.Mutex
	t  time.Time
}

// NewClock returns a Clock at a fixed date.
func NewClock() *Clock { return &Clock{t: time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)} }

// Now returns the clock's time.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

// Add moves the clock by d.
func (c *Clock) Add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// DeepStack is the goroutine stack limit of the deep-nesting tests: far
// more than an iterative parse needs, far less than a recursion over
// millions of levels (which then dies at once instead of after 1 GB).
const DeepStack = 16 << 20

// WithStack runs fn with the goroutine stack limit lowered to limit bytes.
func WithStack(t testing.TB, limit int, fn func()) {
	t.Helper()
	old := debug.SetMaxStack(limit)
	defer debug.SetMaxStack(old)
	fn()
}

// ServeConns listens on a loopback port until the test ends and hands
// each connection to handle in a goroutine of its own, closing it after;
// it returns the server's URL ("http://" and the address). Tests use it
// for an upstream that reads and writes exact bytes.
func ServeConns(t testing.TB, handle func(c net.Conn)) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				handle(c)
			}()
		}
	}()
	return "http://" + ln.Addr().String()
}
