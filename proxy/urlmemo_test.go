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
