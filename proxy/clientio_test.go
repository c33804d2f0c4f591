package proxy

import (
	"strings"
	"testing"
	"time"
)

func TestDeadlineMovesRarely(t *testing.T) {
	var d deadline
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	idle := 80 * time.Second
	at, ok := d.next(t0, idle, time.Time{})
	if !ok || !at.Equal(t0.Add(90*time.Second)) {
		t.Fatalf("first: %v %v, want set at +90s", at, ok)
	}
	// Within idle/8 of the first operation, the deadline set still leaves idle.
	if _, ok := d.next(t0.Add(10*time.Second), idle, time.Time{}); ok {
		t.Fatal("moved after 10s, want kept")
	}
	// Past it, an operation would get less than idle: moved.
	at, ok = d.next(t0.Add(11*time.Second), idle, time.Time{})
	if !ok || !at.Equal(t0.Add(101*time.Second)) {
		t.Fatalf("after 11s: %v %v, want set at +101s", at, ok)
	}
}

func TestDeadlineTotalCaps(t *testing.T) {
	var d deadline
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	total := t0.Add(30 * time.Second)
	at, ok := d.next(t0, time.Minute, total)
	if !ok || !at.Equal(total) {
		t.Fatalf("first: %v %v, want the total", at, ok)
	}
	if _, ok := d.next(t0.Add(time.Second), time.Minute, total); ok {
		t.Fatal("total set again")
	}
	// The total cleared (a body streamed through): idle only, set anew.
	at, ok = d.next(t0.Add(2*time.Second), time.Minute, time.Time{})
	if !ok || !at.Equal(t0.Add(2*time.Second+time.Minute+time.Minute/8)) {
		t.Fatalf("after clearing the total: %v %v", at, ok)
	}
}

// monoNow is now, read on the monotonic clock, and carries that reading
// (deadlines and idle times are kept by it).
func TestMonoNow(t *testing.T) {
	for range 100 {
		before := time.Now()
		got := monoNow()
		after := time.Now()
		if got.Before(before) || got.After(after) {
			t.Fatalf("monoNow %v, not between %v and %v", got, before, after)
		}
		if !strings.Contains(got.String(), " m=") {
			t.Fatalf("monoNow %v has no monotonic reading", got)
		}
	}
}
