package capture

import (
	"fmt"
	"net/http"
	"reflect"
	"strings"
	"testing"

	"github.com/shaperproxy/shaperproxy/internal/redact"
)

// TestRedactMemo: a header encoded through the memo decodes to what
// redact.Header gives, call after call, for secret and ordinary values,
// and once the values are remembered it costs no allocation.
func TestRedactMemo(t *testing.T) {
	headers := []http.Header{
		{"Authorization": {"Bearer sk-abcdefghijklmnop1234"}, "Content-Type": {"application/json"}, "X-Custom": {"a", "b"}},
		{"X-Api-Key": {"k1"}, "User-Agent": {"OpenAI/Python 1.0"}, "X-Forward": {"https://user:pw@host/?key=secret"}, "Empty": {}},
		{"Content-Type": {"text/event-stream"}, "X-Ratelimit-Remaining-Tokens": {"12345"}, "X-Token": {"eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxIn0.abcdefghijklmnop"}},
		{},
	}
	var m redactMemo
	var sc headerScratch
	buf := []byte{byte(KindRequest), 0}
	for round := range 3 {
		for i, h := range headers {
			want := redact.Header(h)
			d, err := decodeRecord(sc.append(buf[:2], h, m.value))
			if err != nil {
				t.Fatal(err)
			}
			got := d.Header
			if len(got) != len(want) {
				t.Fatalf("round %d header %d: got %v, want %v", round, i, got, want)
			}
			for k, v := range want {
				if len(v) == 0 && len(got[k]) == 0 {
					continue
				}
				if !reflect.DeepEqual(got[k], v) {
					t.Fatalf("round %d header %d %s: got %q, want %q", round, i, k, got[k], v)
				}
			}
		}
	}
	buf = make([]byte, 0, 4096)
	if n := testing.AllocsPerRun(50, func() { sc.append(buf[:0], headers[0], m.value) }); n != 0 {
		t.Errorf("%v allocations per header once remembered", n)
	}
}

// TestRedactMemoBounded: a long header value (a client may send a
// megabyte of one, unique each time) is redacted as redact.Header does but
// not kept, so the memo's memory stays bounded by count × length.
func TestRedactMemoBounded(t *testing.T) {
	var m redactMemo
	long := strings.Repeat("v", 64<<10)
	for i := range 100 {
		v := fmt.Sprint(i) + long
		if got, want := m.value("X-Big", v), redact.Header(http.Header{"X-Big": {v}})["X-Big"][0]; got != want {
			t.Fatalf("value %d redacted as %.20q, want %.20q", i, got, want)
		}
		secret := "Bearer sk-" + fmt.Sprint(i) + long
		if got := m.value("Authorization", secret); strings.Contains(got, "sk-") {
			t.Fatalf("a long secret went out unredacted: %.30q", got)
		}
	}
	if len(m.m) != 0 {
		t.Fatalf("%d long values kept", len(m.m))
	}
}

// TestBufLists: a buffer given back is taken again; the lists keep their
// classes apart.
func TestBufLists(t *testing.T) {
	// The lists are the package's: empty the first one of what earlier
	// tests' late calls gave back, so that the buffer given back below is
	// the next one out.
	for drained := false; !drained; {
		select {
		case <-freeBufs[0]:
		default:
			drained = true
		}
	}
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
