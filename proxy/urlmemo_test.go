package proxy

import (
	"net/url"
	"testing"
)

// TestURLMemo: the memo prints what URL.String prints, for the URL asked
// now, whatever it printed before.
func TestURLMemo(t *testing.T) {
	var m urlMemo
	for _, raw := range []string{
		"https://api.example.com/v1/chat/completions",
		"https://api.example.com/v1/chat/completions",
		"https://api.example.com/v1/chat/completions?beta=true",
		"https://api.example.com/v1/models",
		"https://user:pw@api.example.com/v1/models",
		"https://api.example.com/v1/chat/completions",
		"http://127.0.0.1:8080/a%2Fb/chat",
	} {
		u, err := url.Parse(raw)
		if err != nil {
			t.Fatal(err)
		}
		if got, want := m.of(u), u.String(); got != want {
			t.Errorf("of(%q) = %q, want %q", raw, got, want)
		}
		u.RawQuery = "changed=1" // the memo holds a copy: a later change is a new URL
		if got, want := m.of(u), u.String(); got != want {
			t.Errorf("after a change: %q, want %q", got, want)
		}
	}
}

// TestURLMemoKeepsSeveral: calls alternating between a few URLs find each
// one printed (no string built once each has been), and more than the
// memo keeps are still printed right.
func TestURLMemoKeepsSeveral(t *testing.T) {
	var m urlMemo
	var us []*url.URL
	for _, p := range []string{"/v1/chat/completions", "/v1/models", "/v1/messages", "/v1/responses"} {
		u, _ := url.Parse("https://api.example.com" + p)
		us = append(us, u)
		m.of(u)
	}
	allocs := testing.AllocsPerRun(100, func() {
		for _, u := range us {
			m.of(u)
		}
	})
	if allocs != 0 {
		t.Errorf("%v allocations for URLs the memo holds, want 0", allocs)
	}
	for i := range 3 * urlMemoSize {
		u, _ := url.Parse("https://api.example.com/v1/x?i=" + string(rune('a'+i)))
		if got, want := m.of(u), u.String(); got != want {
			t.Errorf("%q, want %q", got, want)
		}
	}
}
