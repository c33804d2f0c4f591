package shaping

import (
	"strings"
	"testing"
)

func TestCountMarkers(t *testing.T) {
	tests := []struct {
		text string
		want int
	}{
		{"", 0},
		{"[reasoning extract: 242 chars omitted] Both fixes apply.", 1},
		{"a [Reasoning Extract: 1,024 characters omitted] b [reasoning extract: 5 chars omitted]", 2},
		{"[reasoning extract: 242 chars omitted", 0},       // not closed
		{"[reasoning extract:\n5 chars omitted]", 0},       // not on one line
		{"[reasoning" + strings.Repeat(" ", 100) + "]", 0}, // not the head
		{"[reasoning extract" + strings.Repeat("x", 80) + "]", 0},
		{"[[reasoning extract: 1 chars omitted]]", 1},
	}
	for _, tt := range tests {
		if got := CountMarkers(tt.text); got != tt.want {
			t.Errorf("CountMarkers(%q) = %d, want %d", tt.text, got, tt.want)
		}
	}
	if got, n := stripMarkers("x [reasoning extract: 5 chars omitted]  y"); got != "x y" || n != 1 {
		t.Errorf("stripMarkers = %q, %d", got, n)
	}
}

// TestShapeStripsMarkers: a history that carries markers from an earlier
// shaper loses them, short or long, unless the caller asks for the marker
// (then a short text, possibly its own result, stays as it is).
func TestShapeStripsMarkers(t *testing.T) {
	short := "[reasoning extract: 242 chars omitted] Both fixes apply, so I'll patch both."
	out, changed := Shape(short, Options{})
	if !changed || out != "Both fixes apply, so I'll patch both." {
		t.Errorf("short: %q %v", out, changed)
	}
	if again, ch := Shape(out, Options{}); again != out || ch {
		t.Errorf("not idempotent: %q", again)
	}
	if out, ch := Shape(short, Options{Marker: true}); out != short || ch {
		t.Errorf("with Marker a short text must stay: %q", out)
	}
	if out, ch := Shape("[reasoning extract: 9 chars omitted] ", Options{}); ch || out == "" {
		t.Errorf("only a marker: %q %v", out, ch)
	}
	long := "[reasoning extract: 242 chars omitted] The user wants a faster export. " +
		strings.Repeat("Hmm, wait. ", 30) + "So the fix is to stream rows once. [reasoning extract: 12 chars omitted]"
	out, _ = Shape(long, Options{})
	if CountMarkers(out) != 0 || out != "The user wants a faster export. So the fix is to stream rows once." {
		t.Errorf("long: %q", out)
	}
	out, _ = Shape(long, Options{Marker: true})
	if CountMarkers(out) != 1 || !strings.HasPrefix(out, markerPrefix) {
		t.Errorf("long with Marker: %q", out)
	}
	if s := CorpusStats([]string{short, long, "plain"}, Options{}); s.MarkersFound != 3 {
		t.Errorf("MarkersFound = %d, want 3", s.MarkersFound)
	}
}
