package conv

import (
	"bytes"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"unsafe"

	"github.com/shaperproxy/shaperproxy/fixtures"
	"github.com/shaperproxy/shaperproxy/internal/bigbuf"
)

// TestReparserShares: a long conversation's views share one message array,
// each its head, the new messages appended in place; each reads as
// ParseRequest reads its body after every body went back (in a test
// binary a released body is overwritten) and after the Reparser let every
// view go (a recycled array is overwritten too): none holds a body's
// memory, and no shared array or array of calls is given back.
func TestReparserShares(t *testing.T) {
	seed := parseCopy(t, fixtures.SeedHistory())
	mk := func(n int, last string) []byte {
		b := truncated(t, seed, n)
		if last != "" { // in place of the n-th message
			cut := bytes.LastIndex(b, []byte(`],"tools"`))
			m := seed.Messages[n-1]
			b = append(append(b[:cut-(m.End-m.Start)], last...), b[cut:]...)
		}
		body := bigbuf.Make(len(b))
		copy(body, b)
		return body
	}
	parse := func(rp *Reparser, body []byte) (*Request, *Request) {
		t.Helper()
		want, err := ParseRequest(bytes.Clone(body))
		if err != nil {
			t.Fatal(err)
		}
		var k BodyKeys
		k.Add(body, len(body))
		v, err := rp.ParseKeyed(body, k)
		if err != nil {
			t.Fatal(err)
		}
		sameView(t, v, want)
		bigbuf.Release(body) // the request ended
		return v, want
	}
	rp := NewReparser(32 << 20)
	var views, wants []*Request
	inPlace := 0
	for n := 100; n <= 200; n += 2 { // a conversation: two messages a request
		v, want := parse(rp, mk(n, ""))
		if len(views) > 0 {
			prev := views[len(views)-1]
			if v.reused != len(prev.Messages) {
				t.Fatalf("%d messages: %d reused of the %d the request before had", n, v.reused, len(prev.Messages))
			}
			if unsafe.SliceData(v.Messages) == unsafe.SliceData(prev.Messages) {
				inPlace++
			}
		}
		views, wants = append(views, v), append(wants, want)
	}
	// The first view's array is ParseRequest's, at its length: the second
	// copies it, with room, and the rest append in place until it is full.
	if inPlace < len(views)-4 {
		t.Fatalf("%d of %d views appended in place to the one before", inPlace, len(views)-1)
	}
	// Two requests that follow the last view and differ: the first takes
	// the room past its head, the second copies the head.
	last := views[len(views)-1]
	n := len(last.Messages)
	a, aw := parse(rp, mk(n+1, ""))
	b, bw := parse(rp, mk(n+1, `{"role":"user","content":"another question"}`))
	if unsafe.SliceData(a.Messages) != unsafe.SliceData(last.Messages) || unsafe.SliceData(b.Messages) == unsafe.SliceData(last.Messages) {
		t.Fatal("of two requests following one view, the first should append in place and the second copy")
	}
	if b.reused != n || b.Messages[n].Content != "another question" || a.Messages[n].Content == "another question" {
		t.Fatal("the second request read the first's message")
	}
	// A request the same as the last takes its array as it is: no claim,
	// no copy.
	same, _ := parse(rp, mk(n, "")) // read against a or b, the latest
	if p := unsafe.SliceData(same.Messages); p != unsafe.SliceData(a.Messages) && p != unsafe.SliceData(b.Messages) || same.reused != n {
		t.Fatalf("a request that adds nothing copied the head (%d reused)", same.reused)
	}
	// A request whose last message differs shares what comes before it.
	c, cw := parse(rp, mk(n, `{"role":"user","content":"edited"}`))
	if c.reused != n-1 || c.Messages[n-1].Content != "edited" || last.Messages[n-1].Content == "edited" {
		t.Fatalf("a changed last message: %d reused, want %d", c.reused, n-1)
	}
	// An invalid request claims the room and gives it back.
	bad := mk(n+1, `{"role":"user","content":"x"`)
	if _, err := rp.Parse(bad); err == nil {
		t.Fatal("an invalid body parsed")
	}
	again, againw := parse(rp, mk(n+2, ""))
	if again.reused < n || len(again.Messages) != n+2 {
		t.Fatalf("after an invalid body: %d of %d reused", again.reused, len(again.Messages))
	}
	views, wants = append(views, a, b, c, again), append(wants, aw, bw, cw, againw)
	// Every view let go: the Reparser's bound pushes them out.
	for i := range 4 {
		body := []byte(fmt.Sprintf(`{"model":"other %d","messages":[{"role":"user","content":%q}]}`, i, strings.Repeat("y", 7<<20)))
		if _, err := rp.Parse(body); err != nil {
			t.Fatal(err)
		}
	}
	for i, v := range views {
		if len(v.Messages) != len(wants[i].Messages) {
			t.Fatalf("view %d lost its messages", i)
		}
		for j := range v.Messages {
			w := wants[i].Messages[j]
			m := v.Messages[j]
			if m.Role != w.Role || m.Content != w.Content || m.Reasoning != w.Reasoning || len(m.ToolCalls) != len(w.ToolCalls) {
				t.Fatalf("view %d, message %d reads %.40q, want %.40q", i, j, m.Content, w.Content)
			}
			for k := range m.ToolCalls {
				if m.ToolCalls[k] != w.ToolCalls[k] {
					t.Fatalf("view %d, message %d: call %d reads %+v, want %+v", i, j, k, m.ToolCalls[k], w.ToolCalls[k])
				}
			}
		}
	}
}

// TestShareOwnsStrings: a long view made to be shared holds no string of
// its body; a short one is left as it is.
func TestShareOwnsStrings(t *testing.T) {
	seed := parseCopy(t, fixtures.SeedHistory())
	inBody := func(v *Request, s string) bool {
		if s == "" {
			return false
		}
		p, b := uintptr(unsafe.Pointer(unsafe.StringData(s))), uintptr(unsafe.Pointer(unsafe.SliceData(v.Body)))
		return p >= b && p < b+uintptr(len(v.Body))
	}
	for _, n := range []int{minShared - 1, minShared, len(seed.Messages)} {
		body := truncated(t, seed, n)
		v, err := parseKeyed(body, nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		want := parseCopy(t, body)
		held := 0
		for j := range v.Messages {
			m := &v.Messages[j]
			for _, s := range []string{m.Role, m.Name, m.Reasoning, m.Content, m.ToolCallID} {
				if inBody(v, s) {
					held++
				}
			}
			for _, tc := range m.ToolCalls {
				for _, s := range []string{tc.ID, tc.Type, tc.Name, tc.Arguments} {
					if inBody(v, s) {
						held++
					}
				}
			}
		}
		switch {
		case n >= minShared && (held > 0 || v.arr == nil):
			t.Fatalf("%d messages: %d strings are the body's (shared %v)", n, held, v.arr != nil)
		case n < minShared && (held == 0 || v.arr != nil):
			t.Fatalf("%d messages: a short view was copied (%d strings the body's)", n, held)
		}
		if n < minShared {
			continue
		}
		for i := range body {
			body[i] = 'X'
		}
		if !reflect.DeepEqual(v.Messages, want.Messages) {
			t.Fatalf("%d messages: the view changed with its body", n)
		}
	}
}

// TestSharedEnds: a body that repeats a long view's messages and then
// goes wrong, or ends, right after one of them reads as ParseRequest
// reads it (checkReparse tries the view as one that is shared): the
// same view or the same error.
func TestSharedEnds(t *testing.T) {
	seed := parseCopy(t, fixtures.SeedHistory())
	prev := truncated(t, seed, 40)
	cut := bytes.LastIndex(prev, []byte(`],"tools"`))
	m39 := seed.Messages[39]
	last := cut - (m39.End - m39.Start) // where the 40th message starts
	for name, body := range map[string]string{
		"the same":                 string(prev),
		"ends after the 40th":      string(prev[:cut]) + `]}`,
		"junk after the 40th":      string(prev[:cut]) + `x],"tools":[]}`,
		"object closed there":      string(prev[:cut]) + `},"tools":[]}`,
		"space, then the end":      string(prev[:cut]) + " \n ]}",
		"no comma before another":  string(prev[:cut]) + `{"role":"user","content":"q"}]}`,
		"another after a comma":    string(prev[:cut]) + ` , {"role":"user","content":"q"}]}`,
		"the 40th cut short":       string(prev[:cut-1]) + `]}`,
		"no comma before the 40th": string(prev[:last-1]) + string(prev[last:]),
		"a space before the 40th":  string(prev[:last]) + " " + string(prev[last:]),
	} {
		t.Run(name, func(t *testing.T) { checkReparse(t, []byte(body), parseCopy(t, prev)) })
	}
}

// TestSharedEndsAtBlock: a body cut right after a message that ends its
// last keyed block (every byte of it known by the keys, nothing after
// it) is refused as ParseRequest refuses it.
func TestSharedEndsAtBlock(t *testing.T) {
	head := `{"model":"m","messages":[`
	var ms []string
	for i := range minShared {
		ms = append(ms, fmt.Sprintf(`{"role":"user","content":"q%d %s"}`, i, strings.Repeat("x", 900)))
	}
	msgs := strings.Join(ms, ",")
	pad := 3*keyBlock - len(head) - len(msgs) - len(`,{"role":"user","content":""}`)
	if pad < 0 {
		t.Fatal("the messages are longer than three blocks")
	}
	cutBody := head + msgs + `,{"role":"user","content":"` + strings.Repeat("p", pad) + `"}`
	if len(cutBody) != 3*keyBlock {
		t.Fatalf("the body is %d bytes, want %d", len(cutBody), 3*keyBlock)
	}
	full := []byte(cutBody + `]}`)
	prev, err := parseKeyed(bytes.Clone(full), keysOf(full).keys, nil)
	if err != nil || prev.arr == nil {
		t.Fatalf("the full body: %v (shared %v)", err, prev != nil && prev.arr != nil)
	}
	body := []byte(cutBody)
	_, werr := ParseRequest(bytes.Clone(body))
	_, gerr := parseKeyed(body, keysOf(body).keys, prev)
	if werr == nil || gerr == nil || gerr.Error() != werr.Error() {
		t.Fatalf("read against the full body: %v, ParseRequest: %v", gerr, werr)
	}
}

// TestSharedClaimGivenBack: a body whose messages the walk took, claiming
// the room past the head of a shared array, and that then fails the walk
// after them (an invalid value, invalid UTF-8, a repeated key left to
// ParseRequest) gives the room back: the array's count is the longest
// view's again, and after an invalid body the next request appends in
// place.
func TestSharedClaimGivenBack(t *testing.T) {
	seed := parseCopy(t, fixtures.SeedHistory())
	for name, tail := range map[string]string{
		"invalid value":  `,"x":tru}`,
		"invalid utf-8":  ",\"x\":\"\xff\"}",
		"a repeated key": `,"model":"m"}`,
	} {
		t.Run(name, func(t *testing.T) {
			rp := NewReparser(32 << 20)
			body := func(n int) []byte { return truncated(t, seed, n) }
			if _, err := rp.Parse(body(60)); err != nil {
				t.Fatal(err)
			}
			second, err := rp.Parse(body(61)) // copies the first's fitted array, with room
			if err != nil || second.arr == nil {
				t.Fatalf("second: %v", err)
			}
			bad := body(62)
			bad = append(bad[:len(bad)-1], tail...) // after the messages and tools
			want, werr := ParseRequest(bytes.Clone(bad))
			got, err := rp.Parse(bad)
			if (err == nil) != (werr == nil) || err != nil && err.Error() != werr.Error() {
				t.Fatalf("the bad body: %v, ParseRequest: %v", err, werr)
			}
			if err == nil {
				sameView(t, got, want)
			}
			if used := second.arr.used.Load(); used != int64(len(second.Messages)) {
				t.Fatalf("the array's count is %d after the walk failed, want %d", used, len(second.Messages))
			}
			if err == nil {
				return // the Reparser keeps ParseRequest's view in second's place
			}
			next, err := rp.Parse(body(62))
			if err != nil {
				t.Fatal(err)
			}
			if unsafe.SliceData(next.Messages) != unsafe.SliceData(second.Messages) || next.reused != 61 {
				t.Fatalf("after a failed parse the next request did not append in place (%d reused)", next.reused)
			}
			// A body that adds nothing to next's first 61 messages takes
			// them without a claim; failing after them, it gives nothing
			// back: next's 62 stay counted.
			short := body(61)
			short = append(short[:len(short)-1], tail...)
			if _, err := rp.Parse(short); err == nil {
				t.Fatal("the short bad body parsed")
			}
			if used := second.arr.used.Load(); used != int64(len(next.Messages)) {
				t.Fatalf("the array's count is %d after a head taken as it was failed, want %d", used, len(next.Messages))
			}
		})
	}
}

// TestSharedShortView: a short request read against a long view it shares
// a first message with gets room for about its own messages, not the long
// view's, and holds about what ParseRequest's view holds.
func TestSharedShortView(t *testing.T) {
	sys := `{"role":"system","content":"` + strings.Repeat("Follow the rules. ", 200) + `"}`
	msgs := []string{sys}
	for i := range 300 {
		msgs = append(msgs, fmt.Sprintf(`{"role":"user","content":"question %d %s"}`, i, strings.Repeat("q", 500)))
	}
	mk := func(ms []string) []byte { return []byte(`{"model":"m","messages":[` + strings.Join(ms, ",") + `]}`) }
	rp := NewReparser(32 << 20)
	if _, err := rp.Parse(mk(msgs)); err != nil {
		t.Fatal(err)
	}
	body := mk([]string{sys, `{"role":"user","content":"a new question"}`})
	v, err := rp.Parse(body)
	if err != nil {
		t.Fatal(err)
	}
	want := parseCopy(t, body)
	sameView(t, v, want)
	if v.reused != 1 || cap(v.Messages) > 16 {
		t.Fatalf("%d messages reused, room for %d", v.reused, cap(v.Messages))
	}
	if got, w := v.ViewBytes(), want.ViewBytes(); got > 2*w {
		t.Fatalf("the view holds %d bytes besides its body, ParseRequest's %d", got, w)
	}
}
