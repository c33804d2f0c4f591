package conv

import (
	"bytes"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"testing"
)

// messageWithKeys returns a request whose one message has n distinct keys
// besides role and content, then the keys of extra.
func messageWithKeys(n int, extra string) []byte {
	var b bytes.Buffer
	b.WriteString(`{"model":"m","messages":[{"role":"user","content":"hi"`)
	for i := range n {
		fmt.Fprintf(&b, `,"k%d":0`, i)
	}
	b.WriteString(extra + `}]}`)
	return b.Bytes()
}

// TestKeySetRepeats: a repeated key is found wherever it comes (among the
// first keys, past the sixteen scanned, in a long object); an object of
// distinct keys is not taken for one that repeats until it has more than
// maxKeysChecked; the Reparser says the same as ParseRequest.
func TestKeySetRepeats(t *testing.T) {
	for _, c := range []struct {
		name string
		body []byte
		dup  bool
	}{
		{"few, distinct", messageWithKeys(3, ""), false},
		{"few, repeated", messageWithKeys(3, `,"role":"user"`), true},
		{"100 distinct", messageWithKeys(100, ""), false},
		{"100, then a repeat of the 50th", messageWithKeys(100, `,"k50":1`), true},
		{"100, then a repeat of the first", messageWithKeys(100, `,"role":"user"`), true},
		{"as many as checked", messageWithKeys(maxKeysChecked-2, ""), false},
		{"one more than checked", messageWithKeys(maxKeysChecked-1, ""), true},
		{"top level, repeated past sixteen", []byte(`{"model":"m",` + strings.Repeat(`"x":0,`, 0) + topKeysN(20) + `,"a3":1,"messages":[]}`), true},
		{"top level, distinct", []byte(`{"model":"m",` + topKeysN(20) + `,"messages":[]}`), false},
	} {
		r, err := ParseRequest(c.body)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if r.DuplicateKeys != c.dup {
			t.Errorf("%s: DuplicateKeys %v, want %v", c.name, r.DuplicateKeys, c.dup)
		}
		// The Reparser, walking the body against an earlier request (the
		// same view as ParseRequest's).
		checkReparse(t, c.body, parseCopy(t, []byte(`{"model":"m","messages":[{"role":"user","content":"hi"}]}`)))
	}
}

func topKeysN(n int) string {
	keys := make([]string, n)
	for i := range keys {
		keys[i] = fmt.Sprintf(`"a%d":0`, i)
	}
	return strings.Join(keys, ",")
}

// elements returns a request whose messages array holds n copies of elem;
// each message with tool calls holds k of them.
func elements(n int, elem string) []byte {
	var b bytes.Buffer
	b.WriteString(`{"model":"m","messages":[`)
	for i := range n {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(elem)
	}
	b.WriteString(`]}`)
	return b.Bytes()
}

// oneMoreCall returns MaxToolCalls calls over 64 messages and one more in
// a 65th.
func oneMoreCall() []byte {
	b := elements(64, toolMessage(MaxToolCalls/64))
	return append(b[:len(b)-2], `,{"role":"assistant","tool_calls":[0]}]}`...)
}

func toolMessage(k int) string {
	return `{"role":"assistant","tool_calls":[` + strings.TrimSuffix(strings.Repeat("0,", k), ",") + `]}`
}

// TestViewBounds: a request of more than MaxMessages messages or
// MaxToolCalls tool calls is not a chat request to the proxy (it goes out
// untouched), at the limit it is; the Reparser says the same; and the
// view of a body of tiny elements costs a bounded amount of memory, not
// a hundred times the body (it did: 231 MB for 2 MiB of "0,"; now at
// most about 70 MB whatever the body).
func TestViewBounds(t *testing.T) {
	msgsPrev, callsPrev, spreadPrev := elements(MaxMessages, "0"), elements(1, toolMessage(MaxToolCalls)), elements(64, toolMessage(MaxToolCalls/64))
	for _, c := range []struct {
		name       string
		body, prev []byte // prev: an earlier request of the conversation, for the Reparser
		ok         bool
	}{
		{"MaxMessages messages", elements(MaxMessages, "0"), elements(MaxMessages-1, "0"), true},
		{"one more", elements(MaxMessages+1, "0"), msgsPrev, false},
		{"a million", elements(1<<20, "0"), msgsPrev, false},
		{"MaxToolCalls calls in one message", elements(1, toolMessage(MaxToolCalls)), elements(1, toolMessage(10)), true},
		{"one more in one message", elements(1, toolMessage(MaxToolCalls+1)), callsPrev, false},
		{"four million in one message", elements(1, toolMessage(1<<22)), callsPrev, false},
		{"MaxToolCalls calls in 64 messages", spreadPrev, elements(63, toolMessage(MaxToolCalls/64)), true},
		{"one more, in a 65th message", oneMoreCall(), spreadPrev, false},
	} {
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		_, err := ParseRequest(c.body)
		runtime.ReadMemStats(&after)
		if (err == nil) != c.ok || err != nil && !errors.Is(err, ErrNotChat) {
			t.Errorf("%s: err %v, want ok=%v", c.name, err, c.ok)
		}
		if alloc := after.TotalAlloc - before.TotalAlloc; alloc > 96<<20 {
			t.Errorf("%s: parsing %d bytes allocated %d MB", c.name, len(c.body), alloc>>20)
		}
		// The Reparser, reusing the earlier request's messages (the same
		// view, the same error as ParseRequest).
		checkReparse(t, c.body, parseCopy(t, c.prev))
	}
	// An edit that adds a call past the bound: Apply says what
	// ParseRequest of its output says.
	r := parseCopy(t, spreadPrev)
	at := bytes.Index(r.Body, []byte(`"tool_calls":[`)) + len(`"tool_calls":[`)
	checkApply(t, r, []Edit{{Start: at, End: at, Repl: []byte("0,")}})
}

// BenchmarkParseManyKeys parses a message of 40,000 distinct keys (1.7 s
// when every key was compared with every earlier one; about 5 ms now).
func BenchmarkParseManyKeys(b *testing.B) {
	body := messageWithKeys(40000, "")
	for b.Loop() {
		if _, err := ParseRequest(body); err != nil {
			b.Fatal(err)
		}
	}
}
