package capture

import (
	"net/http"
	"reflect"
	"testing"

	"github.com/shaperproxy/shaperproxy/internal/redact"
)

// TestRedactMemo: the memo gives what redact.Header gives, call after
// call (its scratch header reused), for secret and ordinary values.
func TestRedactMemo(t *testing.T) {
	headers := []http.Header{
		{"Authorization": {"Bearer sk-abcdefghijklmnop1234"}, "Content-Type": {"application/json"}, "X-Custom": {"a", "b"}},
		{"X-Api-Key": {"k1"}, "User-Agent": {"OpenAI/Python 1.0"}, "X-Forward": {"https://user:pw@host/?key=secret"}, "Empty": {}},
		{"Content-Type": {"text/event-stream"}, "X-Ratelimit-Remaining-Tokens": {"12345"}, "X-Token": {"eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxIn0.abcdefghijklmnop"}},
		{},
	}
	var m redactMemo
	for round := range 3 {
		for i, h := range headers {
			want := redact.Header(h)
			got := m.header(h)
			if len(got) != len(want) {
				t.Fatalf("round %d header %d: got %v, want %v", round, i, got, want)
			}
			for k, v := range want {
				if !reflect.DeepEqual(got[k], v) {
					t.Fatalf("round %d header %d %s: got %q, want %q", round, i, k, got[k], v)
				}
			}
		}
	}
	if n := testing.AllocsPerRun(50, func() { m.header(headers[0]) }); n != 0 {
		t.Errorf("%v allocations per header once remembered", n)
	}
	if m.header(nil) != nil {
		t.Error("header(nil) is not nil")
	}
}

// TestBufLists: a buffer given back is taken again; the lists keep their
// classes apart.
func TestBufLists(t *testing.T) {
	b := getBuf(100)
	if cap(*b) != bufClasses[0] {
		t.Fatalf("cap %d", cap(*b))
	}
	*b = append(*b, "event"...)
	putBuf(b)
	if c := getBuf(300); c != b || len(*c) != 0 {
		t.Fatal("the buffer given back was not reused, or not emptied")
	}
	big := getBuf(3000)
	if cap(*big) != bufClasses[2] {
		t.Fatalf("cap %d for 3000 bytes", cap(*big))
	}
	putBuf(nil) // no-op
}
