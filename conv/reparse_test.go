package conv

import (
	"bytes"
	"encoding/json"
	"fmt"
	"hash/maphash"
	"math/rand/v2"
	"reflect"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"
	"unsafe"
	"weak"

	"github.com/shaperproxy/shaperproxy/fixtures"
	"github.com/shaperproxy/shaperproxy/internal/bigbuf"
	"github.com/shaperproxy/shaperproxy/internal/testenv"
)

// checkReparse parses body reusing prev and compares the result with
// ParseRequest's: the same view or the same error. prev's body is then
// overwritten, and the view must not change: it holds none of prev's
// memory. A long prev is tried first as a Reparser's view of it is too,
// one that later views share (share).
func checkReparse(t *testing.T, body []byte, prev *Request) {
	t.Helper()
	if prev != nil && len(prev.Messages) >= minShared {
		shared := parseCopy(t, prev.Body)
		shared.share(0)
		checkReparseOnce(t, bytes.Clone(body), shared)
		if !reflect.DeepEqual(shared.Messages, prev.Messages) {
			t.Fatal("a view read against the shared one changed its messages")
		}
	}
	checkReparseOnce(t, body, prev)
}

func checkReparseOnce(t *testing.T, body []byte, prev *Request) {
	t.Helper()
	want, werr := ParseRequest(body)
	got, gerr := parseReusing(body, prev)
	if (gerr == nil) != (werr == nil) || gerr != nil && gerr.Error() != werr.Error() {
		t.Fatalf("reparse error %v, ParseRequest error %v", gerr, werr)
	}
	if werr != nil {
		return
	}
	sameView(t, got, want)
	if prev != nil {
		for i := range prev.Body {
			prev.Body[i] = 'X'
		}
		sameView(t, got, want)
	}
}

// parseCopy parses a copy of body (the tests overwrite it).
func parseCopy(t testing.TB, body []byte) *Request {
	t.Helper()
	r, err := ParseRequest(bytes.Clone(body))
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// TestReparseGrowth: a conversation's requests, each the previous one
// and more, as agents send them.
func TestReparseGrowth(t *testing.T) {
	seed := parseCopy(t, fixtures.SeedHistory())
	for _, n := range []int{1, 2, 50, 300, len(seed.Messages) - 1} {
		prevBody := truncated(t, seed, n)
		for _, next := range [][]byte{truncated(t, seed, n+1), truncated(t, seed, n), truncated(t, seed, max(n-1, 0))} {
			checkReparse(t, next, parseCopy(t, prevBody))
		}
	}
	for i := 1; i < len(multiturn); i++ {
		checkReparse(t, readTestdata(t, multiturn[i]), parseCopy(t, readTestdata(t, multiturn[i-1])))
	}
}

// truncated returns the request of r with its first n messages.
func truncated(t testing.TB, r *Request, n int) []byte {
	t.Helper()
	var b bytes.Buffer
	b.WriteString(`{"model":"deepseek-reasoner","stream":false,"messages":[`)
	for i, m := range r.Messages[:n] {
		if i > 0 {
			b.WriteByte(',')
		}
		b.Write(r.Body[m.Start:m.End])
	}
	b.WriteString(`],"tools":[{"type":"function","function":{"name":"f"}}]}`)
	return b.Bytes()
}

// TestReparseShapes: bodies the walker reads and bodies it leaves to
// ParseRequest.
func TestReparseShapes(t *testing.T) {
	base := `{"model":"m","messages":[{"role":"user","content":"hi"},{"role":"assistant","reasoning_content":"r\n","content":"c"}],"stream":true}`
	prev := func() *Request { return parseCopy(t, []byte(base)) }
	indented := func(s string) []byte {
		var b bytes.Buffer
		_ = json.Indent(&b, []byte(s), "", "  ")
		return b.Bytes()
	}
	cases := map[string][]byte{
		"same":             []byte(base),
		"one more":         []byte(`{"model":"m","messages":[{"role":"user","content":"hi"},{"role":"assistant","reasoning_content":"r\n","content":"c"},{"role":"user","content":"more"}],"stream":true}`),
		"first differs":    []byte(`{"model":"m","messages":[{"role":"user","content":"HI"},{"role":"assistant","reasoning_content":"r\n","content":"c"}],"stream":true}`),
		"spaces":           []byte(` { "model" : "m" , "messages" : [ {"role":"user","content":"hi"} , {"role":"assistant","reasoning_content":"r\n","content":"c"} ] , "stream" : true } `),
		"indented":         indented(base),
		"empty messages":   []byte(`{"messages":[]}`),
		"no messages":      []byte(`{"model":"m"}`),
		"messages object":  []byte(`{"messages":{}}`),
		"repeated key":     []byte(`{"messages":[],"messages":[{"role":"user","content":"hi"}]}`),
		"escaped key":      []byte(`{"mess\u0061ges":[{"role":"user","content":"hi"}],"messages":[]}`),
		"duplicate in msg": []byte(`{"model":"m","messages":[{"role":"user","content":"hi"},{"role":"assistant","role":"tool"}]}`),
		"number element":   []byte(`{"messages":[{"role":"user","content":"hi"},12,"s",null]}`),
		"prefix not whole": []byte(`{"model":"m","messages":[{"role":"user","content":"hi"}x]}`),
		"trailing garbage": []byte(base + "x"),
		"not an object":    []byte(`[1]`),
		"invalid utf-8":    []byte("{\"messages\":[{\"role\":\"user\",\"content\":\"\xff\"}]}"),
		// The repeated messages are not checked again; the rest is.
		"invalid utf-8 after the repeated":  []byte("{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"hi\"},{\"role\":\"assistant\",\"reasoning_content\":\"r\\n\",\"content\":\"c\"},{\"role\":\"user\",\"content\":\"\xff\"}],\"stream\":true}"),
		"invalid utf-8 in a later key":      []byte("{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"hi\"},{\"role\":\"assistant\",\"reasoning_content\":\"r\\n\",\"content\":\"c\"}],\"stream\":true,\"x\":\"\xc3\"}"),
		"invalid utf-8 before the repeated": []byte("{\"model\":\"m\xe2\x82\",\"messages\":[{\"role\":\"user\",\"content\":\"hi\"},{\"role\":\"assistant\",\"reasoning_content\":\"r\\n\",\"content\":\"c\"}],\"stream\":true}"),
		"deep in a message":                 []byte(`{"messages":[{"role":"user","content":"hi"},{"x":` + closed(MaxDepth-2) + `}]}`),
		"deep at the limit":                 []byte(`{"messages":[{"role":"user","content":"hi"},{"x":` + closed(MaxDepth-3) + `}]}`),
		"deep at the top":                   []byte(`{"messages":[{"role":"user","content":"hi"}],"x":` + closed(MaxDepth-1) + `}`),
		"model not string":                  []byte(`{"model":1,"messages":[{"role":"user","content":"hi"}],"stream":"true"}`),
		"empty":                             nil,
	}
	for name, body := range cases {
		t.Run(name, func(t *testing.T) { checkReparse(t, body, prev()) })
	}
}

// TestReparseRandom mutates a parsed body at random and reparses it with
// the original as the earlier request.
func TestReparseRandom(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	pieces := []string{`"`, `\`, `{`, `}`, `[`, `]`, `,`, `:`, ` `, `a`, `1`, `"role":"user",`, "\xff", "é"}
	for n, body := range applyBodies(t) {
		if len(body) > 64<<10 {
			continue // the seed's megabyte: TestReparseGrowth covers it
		}
		for k := 0; k < 300; k++ {
			next := bytes.Clone(body)
			for e := 0; e < 1+rng.IntN(2) && len(next) > 0; e++ {
				at := rng.IntN(len(next))
				end := min(at+rng.IntN(3), len(next))
				next = append(next[:at], append([]byte(pieces[rng.IntN(len(pieces))]), next[end:]...)...)
			}
			t.Run("", func(t *testing.T) {
				defer func() {
					if t.Failed() {
						t.Logf("body %d: %q", n, next)
					}
				}()
				prev, err := ParseRequest(bytes.Clone(body))
				if err != nil {
					t.Skip()
				}
				checkReparse(t, next, prev)
			})
		}
	}
}

// TestReparser: the cache finds the earlier request of a conversation and
// keeps within its bound.
func TestReparser(t *testing.T) {
	const bound = 256 << 10
	p := NewReparser(bound)
	seed := parseCopy(t, fixtures.SeedHistory())
	for n := 10; n < 20; n++ {
		body := truncated(t, seed, n)
		got, err := p.Parse(body)
		if err != nil {
			t.Fatal(err)
		}
		want, _ := ParseRequest(body)
		sameView(t, got, want)
	}
	if p.bytes > bound || len(p.recent) != 1 {
		t.Fatalf("%d bytes in %d entries", p.bytes, len(p.recent))
	}
	big := truncated(t, seed, 200) // over a quarter of the bound: parsed, not kept
	if len(big) <= bound/4 {
		t.Fatalf("%d bytes is not big", len(big))
	}
	if _, err := p.Parse(big); err != nil {
		t.Fatal(err)
	}
	if len(p.recent) != 1 {
		t.Fatalf("%d entries", len(p.recent))
	}
}

func FuzzReparse(f *testing.F) {
	for _, s := range requestSeeds {
		f.Add([]byte(s), []byte(s))
	}
	for i := 1; i < len(multiturn); i++ {
		f.Add(readTestdata(f, multiturn[i-1]), readTestdata(f, multiturn[i]))
	}
	f.Fuzz(func(t *testing.T, earlier, body []byte) {
		prev, err := ParseRequest(bytes.Clone(earlier))
		if err != nil {
			return
		}
		checkReparse(t, body, prev)
	})
}

// BenchmarkReparse parses the seed's request when its request less the
// last message was parsed before: the common case of an agent's history.
func BenchmarkReparse(b *testing.B) {
	seed, _ := ParseRequest(fixtures.SeedHistory())
	prev, _ := ParseRequest(truncated(b, seed, len(seed.Messages)-1))
	body := truncated(b, seed, len(seed.Messages))
	b.SetBytes(int64(len(body)))
	for b.Loop() {
		if _, err := parseReusing(body, prev); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkParseRequestSeed(b *testing.B) {
	seed, _ := ParseRequest(fixtures.SeedHistory())
	body := truncated(b, seed, len(seed.Messages))
	b.SetBytes(int64(len(body)))
	for b.Loop() {
		if _, err := ParseRequest(body); err != nil {
			b.Fatal(err)
		}
	}
}

// TestReparserBytesExact: with several conversations growing side by
// side, the bytes the Reparser counts are the bytes it holds, and stay
// within its bound.
func TestReparserBytesExact(t *testing.T) {
	const bound = 40000
	p := NewReparser(bound)
	for n := 1; n <= 70; n++ { // up to ~3 KB each, 8 of them: past the bound
		for c := range 8 {
			body := fmt.Appendf(nil, `{"model":"m","messages":[{"role":"system","content":"conversation %d"}`, c)
			for i := range n {
				body = fmt.Appendf(body, `,{"role":"user","content":"message %d of %d"}`, i, c)
			}
			body = append(body, "]}"...)
			if _, err := p.Parse(body); err != nil {
				t.Fatal(err)
			}
			checkHeld(t, p, bound, fmt.Sprintf("after %d×%d", n, c))
		}
	}
}

// TestReparserSharedBeginning: conversations that share a long system
// prompt (the body's first bytes), sent in turn, each find their own
// previous request.
func TestReparserSharedBeginning(t *testing.T) { inTurn(t, 4, 6) }

// TestReparserManyConversationsOneBeginning: a gateway serves forty
// conversations of one agent at once (one system prompt, past the
// beginning's key), in turn: each request finds its own conversation's
// previous one (with eight kept per beginning, as before, each found
// none: the other conversations had pushed it out).
func TestReparserManyConversationsOneBeginning(t *testing.T) { inTurn(t, 40, 3) }

// inTurn sends n requests of each of conversations that share a system
// prompt, one conversation after the other, and checks that each request
// finds its conversation's previous one and gives ParseRequest's view.
func inTurn(t *testing.T, conversations, n int) {
	p := NewReparser(32 << 20)
	system := strings.Repeat("You are a careful coding agent. ", 200) // over reparseKeyBytes
	body := func(c, n int) []byte {
		b := fmt.Appendf(nil, `{"model":"m","messages":[{"role":"system","content":%q}`, system)
		for i := range n {
			b = fmt.Appendf(b, `,{"role":"user","content":"conversation %d, message %d"}`, c, i)
		}
		return append(b, "]}"...)
	}
	for k := 1; k <= n; k++ {
		for c := range conversations {
			key := maphash.Bytes(p.seed, body(c, k)[:reparseKeyBytes])
			p.mu.Lock()
			prev := closest(p.recent[key], body(c, k))
			p.mu.Unlock()
			if k > 1 && (prev == nil || !bytes.Equal(prev.Body, body(c, k-1))) {
				t.Fatalf("conversation %d, request %d: the earlier request found is not its own", c, k)
			}
			got, err := p.Parse(body(c, k))
			if err != nil {
				t.Fatal(err)
			}
			want, _ := ParseRequest(body(c, k))
			sameView(t, got, want)
		}
	}
}

// TestReparserBoundsViews: the bound counts what a kept view holds, not
// only its body: bodies of many empty messages (views far larger than
// their bytes), then many tiny requests of distinct beginnings (a view
// and a map entry each), stay within it in memory as well as in the count.
func TestReparserBoundsViews(t *testing.T) {
	const bound = 4 << 20
	empties := func(c int) []byte {
		body := fmt.Appendf(nil, `{"model":"m%d","messages":[`, c)
		for i := range MaxMessages { // the most a view takes
			if i > 0 {
				body = append(body, ',')
			}
			body = append(body, "{}"...)
		}
		return append(body, "]}"...)
	}
	tiny := func(c int) []byte {
		return fmt.Appendf(nil, `{"model":"t%d","messages":[{"role":"user","content":"hi"}]}`, c)
	}
	for _, tc := range []struct {
		name string
		n    int
		body func(int) []byte
	}{{"empty messages", 5, empties}, {"tiny requests", 200000, tiny}} {
		t.Run(tc.name, func(t *testing.T) {
			var base, after runtime.MemStats
			runtime.GC()
			runtime.ReadMemStats(&base)
			p := NewReparser(bound)
			for c := range tc.n {
				if _, err := p.Parse(tc.body(c)); err != nil {
					t.Fatal(err)
				}
			}
			checkHeld(t, p, bound, tc.name)
			runtime.GC()
			runtime.ReadMemStats(&after)
			if grew := int64(after.HeapAlloc) - int64(base.HeapAlloc); grew > 3*bound {
				t.Fatalf("the heap grew by %d MB for a %d MB bound", grew>>20, bound>>20)
			}
			runtime.KeepAlive(p)
		})
	}
}

// checkHeld fails when the bytes p counts are not what its kept views
// hold, or are over bound.
func checkHeld(t *testing.T, p *Reparser, bound int, when string) {
	t.Helper()
	held := 0
	for _, list := range p.recent {
		for _, r := range list {
			held += r.heldBytes()
		}
	}
	if held != p.bytes || held > bound {
		t.Fatalf("%s: counted %d bytes, held %d (bound %d)", when, p.bytes, held, bound)
	}
}

// TestReparserConcurrent: conversations sharing a beginning parsed from
// many goroutines at once (keep changes the kept lists in place; Parse
// reads a copy taken under the lock) give ParseRequest's views, and the
// count of held bytes stays exact. Run with -race, as CI does.
func TestReparserConcurrent(t *testing.T) {
	const bound = 64 << 10
	p := NewReparser(bound)
	body := func(c, n int) []byte {
		b := fmt.Appendf(nil, `{"model":"m","messages":[{"role":"system","content":%q}`, strings.Repeat("shared ", 300)) // over reparseKeyBytes
		for i := range n {
			b = fmt.Appendf(b, `,{"role":"user","content":"conversation %d, message %d"}`, c, i)
		}
		return append(b, "]}"...)
	}
	var wg sync.WaitGroup
	errs := make(chan string, 2*maxPerBeginning)
	for c := range 2 * maxPerBeginning { // twice maxPerBeginning conversations of one beginning
		wg.Add(1)
		go func() {
			defer wg.Done()
			for n := 1; n <= 40; n++ {
				b := body(c, n)
				got, err := p.Parse(b)
				want, werr := ParseRequest(b)
				if err != nil || werr != nil || len(got.Messages) != len(want.Messages) || !bytes.Equal(got.Body, want.Body) {
					errs <- fmt.Sprintf("conversation %d, request %d: %v %v", c, n, err, werr)
					return
				}
				for i := range got.Messages {
					if !reflect.DeepEqual(got.Messages[i], want.Messages[i]) { // every field, the key included
						errs <- fmt.Sprintf("conversation %d, request %d: message %d differs", c, n, i)
						return
					}
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Error(e)
	}
	checkHeld(t, p, bound, "after the concurrent parses")
}

// TestReparseViewRoom: a view holds its messages at about their count,
// whatever the request it was read against: exactly when a short history
// follows a short one (a two-message request's view held room for six,
// 1.2 KB of its 1.7), within an eighth and four more otherwise (a short
// request read against a 600-message one held room for 604); its fields
// with room for one more than the earlier request's. Each view is
// ParseRequest's, and stays so when the earlier body is overwritten.
func TestReparseViewRoom(t *testing.T) {
	body := []byte(`{"model":"m","stream":false,"messages":[{"role":"system","content":"be brief"},{"role":"user","content":"hello"}]}`)
	for _, c := range []struct{ prev, next int }{
		{2, 2}, {2, 3}, {2, exactBelow - 1}, {2, exactBelow}, {2, exactBelow + 5}, {exactBelow - 1, exactBelow + 2},
		{exactBelow + 8, exactBelow + 9}, {600, 2}, {600, 602},
	} {
		next := grown(body, c.next)
		prev, err := ParseRequest(grown(body, c.prev))
		if err != nil {
			t.Fatal(err)
		}
		checkReparse(t, next, prev) // overwrites prev's body
		prev, _ = ParseRequest(grown(body, c.prev))
		r, err := parseReusing(next, prev)
		if err != nil {
			t.Fatal(err)
		}
		n := len(r.Messages)
		switch {
		case n != c.next:
			t.Fatalf("%+v: %d messages read", c, n)
		case c.prev < exactBelow && c.next <= exactBelow && cap(r.Messages) != n:
			t.Errorf("%+v: room for %d messages, want exactly %d", c, cap(r.Messages), n)
		case cap(r.Messages) > n+n/8+4:
			t.Errorf("%+v: room for %d messages, %d used", c, cap(r.Messages), n)
		case cap(r.fields) > max(len(prev.fields)+1, 4):
			t.Errorf("%+v: room for %d fields, %d used", c, cap(r.fields), len(r.fields))
		}
	}
}

// TestParseViewRoom: a view parsed afresh keeps its messages at about
// their count too; the guess from the array's size (a message per 256
// bytes, at most 256) gave a two-message request with a long system
// prompt room for 256 messages (53 KB), and the seed's 631 room for 1,024.
func TestParseViewRoom(t *testing.T) {
	long := fmt.Appendf(nil, `{"model":"m","messages":[{"role":"system","content":%q},{"role":"user","content":"hi"}]}`, strings.Repeat("a rule. ", 8<<10))
	for name, body := range map[string][]byte{"long prompt": long, "seed": fixtures.SeedHistory()} {
		r, err := ParseRequest(body)
		if err != nil {
			t.Fatal(err)
		}
		if n := len(r.Messages); cap(r.Messages) > n+n/8+4 {
			t.Errorf("%s: room for %d messages, %d used", name, cap(r.Messages), n)
		}
	}
}

// TestReparseShortViewBytes: reading a two-message request against the
// one before allocates about what its view holds (no hidden room behind
// a cut slice: a 32-message scratch array alone is 6.6 KB).
func TestReparseShortViewBytes(t *testing.T) {
	if testenv.Race {
		t.Skip("the race detector's sync.Pool drops the scratch at random")
	}
	body := []byte(`{"model":"m","stream":false,"messages":[{"role":"system","content":"be brief"},{"role":"user","content":"hello"}]}`)
	prev, err := ParseRequest(bytes.Clone(body))
	if err != nil {
		t.Fatal(err)
	}
	const runs = 200
	for range 10 { // the pool's scratch made
		_, _ = parseReusing(body, prev)
	}
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	for range runs {
		if _, err := parseReusing(body, prev); err != nil {
			t.Fatal(err)
		}
	}
	runtime.ReadMemStats(&after)
	per := (after.TotalAlloc - before.TotalAlloc) / runs
	t.Logf("%d bytes a parse", per)
	if want := uint64(1400); per > want {
		t.Errorf("%d bytes a parse, want at most %d", per, want)
	}
}

// TestPutScratchClears: a scratch slice goes back to the pool cleared
// (it held strings of a body), all of its room, not just what was used.
func TestPutScratchClears(t *testing.T) {
	sp := scratchMessages.Get().(*[]Message)
	s := append((*sp)[:0], Message{Role: "user", Content: "secret"}, Message{Content: "body"})
	(*sp)[:cap(*sp)][cap(*sp)-1] = Message{Content: "left from a longer walk"}
	putScratch(sp)
	for i, m := range s[:cap(s)] {
		if m.Role != "" || m.Content != "" {
			t.Fatalf("scratch message %d keeps %q", i, m.Content)
		}
	}
}

// grown is body (two messages) with messages added up to n.
func grown(body []byte, n int) []byte {
	out := bytes.Clone(bytes.TrimSuffix(body, []byte("]}")))
	for i := 2; i < n; i++ {
		out = fmt.Appendf(out, `,{"role":"user","content":"more %d"}`, i)
	}
	return append(out, "]}"...)
}

// TestReparseRepeatedMembers: a member whose value repeats the previous
// request's byte for byte is taken with its key (not checked or hashed
// again), wherever it lies; one that differs — longer, shorter, another
// value that starts the same, invalid — is read anew; every view is what
// ParseRequest gives.
func TestReparseRepeatedMembers(t *testing.T) {
	tools := `[{"type":"function","function":{"name":"bash","description":"` + strings.Repeat("runs a command ", 200) + `"}}]`
	prevBody := `{"messages":[{"role":"user","content":"hi"}],"model":"m","tools":` + tools + `,"temperature":0.5,"stream":false}`
	for name, body := range map[string]string{
		"same members":       `{"messages":[{"role":"user","content":"hi"},{"role":"user","content":"and?"}],"model":"m","tools":` + tools + `,"temperature":0.5,"stream":false}`,
		"moved":              `{"tools":` + tools + `,"model":"m","messages":[{"role":"user","content":"hi"}],"stream":false,"temperature":0.5}`,
		"spaced":             `{"messages":[{"role":"user","content":"hi"}] , "model" : "m" , "tools" : ` + tools + ` , "temperature":0.5 }`,
		"longer number":      `{"messages":[{"role":"user","content":"hi"}],"model":"m","tools":` + tools + `,"temperature":0.55,"stream":false}`,
		"longer string":      `{"messages":[{"role":"user","content":"hi"}],"model":"m2","tools":` + tools + `,"temperature":0.5,"stream":false}`,
		"tools grown":        `{"messages":[{"role":"user","content":"hi"}],"model":"m","tools":` + strings.TrimSuffix(tools, "]") + `,{"type":"function"}],"stream":false}`,
		"tools then garbage": `{"messages":[{"role":"user","content":"hi"}],"model":"m","tools":` + tools + `x,"stream":false}`,
		"stream changed":     `{"messages":[{"role":"user","content":"hi"}],"model":"m","tools":` + tools + `,"temperature":0.5,"stream":true}`,
	} {
		t.Run(name, func(t *testing.T) {
			prev := parseCopy(t, []byte(prevBody))
			checkReparse(t, []byte(body), prev)
		})
	}
	// The repeated "tools" carries the previous request's key.
	prev := parseCopy(t, []byte(prevBody))
	next := []byte(`{"messages":[{"role":"user","content":"hi"},{"role":"user","content":"and?"}],"model":"m","tools":` + tools + `}`)
	got, err := parseReusing(next, prev)
	if err != nil {
		t.Fatal(err)
	}
	f, _ := got.Field("tools")
	pf, _ := prev.Field("tools")
	if f.RawKey() != pf.RawKey() || f.RawKey() != RawKeyOf(next[f.Start:f.End]) {
		t.Fatalf("tools key %v, previous %v", f.RawKey(), pf.RawKey())
	}
	if m, _ := got.Field("messages"); m.RawKey() != (RawKey{}) {
		t.Fatal("the history was keyed")
	}
	// The walk takes it from the previous request: repeats finds it where
	// the new body has it (and not a value that only starts the same).
	if _, ok := prev.repeats(2, "tools", next, f.Start, 0); !ok {
		t.Fatal("repeats did not find the previous request's tools")
	}
	if _, ok := prev.repeats(1, "model", []byte(`{"model":"m2"}`), 9, 0); ok {
		t.Fatal(`repeats took "m2" for "m"`)
	}
	// And the walk uses it: a key marked in the previous view comes back
	// as it is (a value checked and keyed again would get its real key).
	marked := parseCopy(t, []byte(prevBody))
	for i := range marked.fields {
		if marked.fields[i].Key == "tools" {
			marked.fields[i].key = RawKey{1, 2}
		}
	}
	again, err := parseReusing(next, marked)
	if err != nil {
		t.Fatal(err)
	}
	if f, _ := again.Field("tools"); f.RawKey() != (RawKey{1, 2}) {
		t.Fatal("the walk checked and keyed the repeated tools again")
	}
}

// BenchmarkReparseTools: a conversation's next request with 48 KB of tool
// declarations after its messages, as the SDKs send them: the tools taken
// from the previous request (repeated), against what it cost when they
// were checked again and then hashed twice, by the capture and the
// shaper's prints (checked-hashed).
func BenchmarkReparseTools(b *testing.B) {
	tools := `[` + strings.TrimSuffix(strings.Repeat(`{"type":"function","function":{"name":"f","description":"`+strings.Repeat("reads a file ", 30)+`","parameters":{"type":"object"}}},`, 100), ",") + `]`
	prev, err := ParseRequest([]byte(`{"messages":[{"role":"user","content":"hi"}],"model":"m","tools":` + tools + `}`))
	if err != nil {
		b.Fatal(err)
	}
	body := []byte(`{"messages":[{"role":"user","content":"hi"},{"role":"user","content":"and?"}],"model":"m","tools":` + tools + `}`)
	b.SetBytes(int64(len(tools)))
	b.Run("repeated", func(b *testing.B) {
		for b.Loop() {
			if _, err := parseReusing(body, prev); err != nil {
				b.Fatal(err)
			}
		}
	})
	// What reading the same request cost when the tools were checked
	// again and then hashed by the capture and by the shaper's prints.
	b.Run("checked-hashed", func(b *testing.B) {
		t := []byte(tools)
		for b.Loop() {
			if _, err := parseReusing(body, prev); err != nil || !valid(t, MaxDepth-1) {
				b.Fatal("invalid")
			}
			_, _ = RawKeyOf(t), RawKeyOf(t)
		}
	})
}

// TestReparserHoldsBodies: a body the Reparser keeps is retained while
// kept — its owner's release at the end of its request does not put it
// back for the next request to overwrite — and released when the
// conversation's next request takes its place.
func TestReparserHoldsBodies(t *testing.T) {
	rp := NewReparser(32 << 20)
	history := `{"role":"user","content":"` + strings.Repeat("y", 200<<10) + `"}`
	mk := func(msgs string) []byte {
		s := `{"model":"m","messages":[` + msgs + `]}`
		b := bigbuf.Make(len(s))
		copy(b, s)
		return b
	}
	first := mk(history)
	if _, err := rp.Parse(first); err != nil {
		t.Fatal(err)
	}
	bigbuf.Release(first) // its request ended
	second := mk(history + `,{"role":"assistant","content":"ok"}`)
	if unsafe.SliceData(second) == unsafe.SliceData(first) {
		t.Fatal("the kept body was handed out again while the Reparser kept it")
	}
	if bigbuf.Poisoned(first) {
		t.Fatal("a body went back while the Reparser kept it")
	}
	v, err := rp.Parse(second) // follows first: takes its place
	if err != nil || len(v.Messages) != 2 {
		t.Fatalf("second request: %v, %v", v, err)
	}
	if !bigbuf.Poisoned(first) || bigbuf.Poisoned(second) {
		t.Fatalf("when the next request replaced the kept one: the kept one went back %v, the next %v; want only the kept one", bigbuf.Poisoned(first), bigbuf.Poisoned(second))
	}
	third := mk(history)
	if unsafe.SliceData(third) != unsafe.SliceData(first) {
		t.Fatal("the body released was not the next one handed out of its class")
	}
}

// TestReparserRecyclesViews: a long view's message array goes back with
// its body's last release — not while the Reparser keeps the view, nor
// while the call holds the body — and not before (in a test binary the
// array given back is overwritten, so a reader after it would see).
func TestReparserRecyclesViews(t *testing.T) {
	msgs := make([]string, minRecycled)
	for i := range msgs {
		msgs[i] = fmt.Sprintf(`{"role":"user","content":"q%d %s"}`, i, strings.Repeat("x", 600))
	}
	mk := func(ms []string) []byte {
		s := `{"model":"m","messages":[` + strings.Join(ms, ",") + `]}`
		b := bigbuf.Make(len(s))
		copy(b, s)
		return b
	}
	rp := NewReparser(32 << 20)
	first := mk(msgs)
	v, err := rp.Parse(first)
	if err != nil {
		t.Fatal(err)
	}
	arr := v.Messages
	bigbuf.Release(first) // the call ended; the Reparser keeps the view
	if v.Messages == nil || arr[0].Role != RoleUser || arr[0].Content != "q0 "+strings.Repeat("x", 600) {
		t.Fatal("the view was given back while the Reparser kept it")
	}
	second := mk(append(msgs, `{"role":"assistant","content":"ok"}`))
	w, err := rp.Parse(second) // takes the first's place: its body's last release
	if err != nil || len(w.Messages) != minRecycled+1 {
		t.Fatalf("second request: %v", err)
	}
	if v.Messages != nil || arr[0].Role != poisonRole {
		t.Fatal("the first view's array did not go back with its body")
	}
	if w.Messages[0].Content != "q0 "+strings.Repeat("x", 600) || w.Messages[minRecycled].Content != "ok" {
		t.Fatal("the second view reads wrong")
	}
	// A view the Reparser does not keep (over a quarter of its bound)
	// goes back with the call's release.
	small := NewReparser(1 << 10)
	third := mk(msgs)
	x, err := small.Parse(third)
	if err != nil {
		t.Fatal(err)
	}
	if x.Messages == nil {
		t.Fatal("given back before the call released its body")
	}
	bigbuf.Release(third)
	if x.Messages != nil {
		t.Fatal("a view not kept did not go back with its body")
	}
}

// TestReparserReleasedConcurrently: goroutines parse the growing requests
// of conversations that share a beginning, each releasing its body as soon
// as its parse is read (its request ended), so that the next Make may
// hand it to another goroutine: every view still reads its own messages —
// the Reparser retains what it keeps and what it reads.
func TestReparserReleasedConcurrently(t *testing.T) {
	rp := NewReparser(4 << 20)
	sys := `{"role":"system","content":"` + strings.Repeat("S", 70<<10) + `"}`
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			msgs := []string{sys}
			for i := range minRecycled + 12 { // past minRecycled: the views' arrays are recycled too
				msgs = append(msgs, fmt.Sprintf(`{"role":"user","content":"g%d q%d %s"}`, g%3, i, strings.Repeat("u", 300)))
				s := `{"model":"m","messages":[` + strings.Join(msgs, ",") + `]}`
				b := bigbuf.Make(len(s))
				copy(b, s)
				v, err := rp.Parse(b)
				if err != nil {
					t.Error(err)
					return
				}
				for j, m := range v.Messages {
					if j == 0 && m.Content != strings.Repeat("S", 70<<10) || j > 0 && !strings.HasPrefix(m.Content, fmt.Sprintf("g%d q%d ", g%3, j-1)) {
						t.Errorf("conversation %d, request %d: message %d reads %.20q", g, i, j, m.Content)
						return
					}
				}
				bigbuf.Release(b)
			}
		})
	}
	wg.Wait()
}

// BenchmarkReparserRepeat is a conversation's request sent again (a
// retry, or the bench's repeated seed): every message is taken from the
// kept view, and the array of the view it replaces comes back for it.
// (In a test binary a released body is overwritten, which the figure
// includes.)
func BenchmarkReparserRepeat(b *testing.B) {
	seed := fixtures.SeedHistory()
	for _, keyed := range []bool{false, true} {
		b.Run(map[bool]string{false: "compared", true: "keyed"}[keyed], func(b *testing.B) {
			rp := NewReparser(32 << 20)
			fresh := func() ([]byte, BodyKeys) {
				body := bigbuf.Make(len(seed))
				copy(body, seed)
				var k BodyKeys
				if keyed { // as the proxy keys a body while it reads it
					k.Add(body, len(body))
				}
				return body, k
			}
			first, k := fresh()
			if _, err := rp.ParseKeyed(first, k); err != nil {
				b.Fatal(err)
			}
			bigbuf.Release(first)
			b.SetBytes(int64(len(seed)))
			for b.Loop() {
				b.StopTimer()
				body, k := fresh()
				b.StartTimer()
				if _, err := rp.ParseKeyed(body, k); err != nil {
					b.Fatal(err)
				}
				bigbuf.Release(body)
			}
		})
	}
}

// BenchmarkSeedCompare is what the Reparser's reuse rests on, against
// what would stand in for it: comparing the seed's body with the same
// bytes of an earlier one (whole, as the walk's comparisons add up to),
// and hashing it instead (hash/maphash, the fastest keyed hash at hand),
// which reads one body where the comparison reads two. In cache, one
// core; the README's "Measured not to help" cites both.
func BenchmarkSeedCompare(b *testing.B) {
	seed := fixtures.SeedHistory()
	earlier := bytes.Clone(seed)
	b.Run("compare", func(b *testing.B) {
		b.SetBytes(int64(len(seed)))
		for b.Loop() {
			if !bytes.Equal(seed, earlier) {
				b.Fatal("the copies differ")
			}
		}
	})
	b.Run("hash", func(b *testing.B) {
		h := maphash.MakeSeed()
		want := maphash.Bytes(h, earlier) // kept from the earlier request: only the new body is hashed
		b.SetBytes(int64(len(seed)))
		for b.Loop() {
			if maphash.Bytes(h, seed) != want {
				b.Fatal("the copies hash apart")
			}
		}
	})
}

// TestReparseToolCallsApart: the tool calls of the messages a reparse
// takes from the kept view share one array, each capped: an append to
// one message's calls does not write over the next message's.
func TestReparseToolCallsApart(t *testing.T) {
	call := func(id string) string {
		return `{"role":"assistant","content":"","tool_calls":[{"id":"` + id + `","type":"function","function":{"name":"f","arguments":"{}"}}]}`
	}
	msgs := `{"role":"user","content":"go"},` + call("a") + `,{"role":"tool","tool_call_id":"a","content":"x"},` + call("b")
	prev, err := ParseRequest([]byte(`{"model":"m","messages":[` + msgs + `]}`))
	if err != nil {
		t.Fatal(err)
	}
	r, err := parseReusing([]byte(`{"model":"m","messages":[`+msgs+`,{"role":"tool","tool_call_id":"b","content":"y"}]}`), prev)
	if err != nil {
		t.Fatal(err)
	}
	a, b := &r.Messages[1], &r.Messages[3]
	if len(a.ToolCalls) != 1 || len(b.ToolCalls) != 1 || b.ToolCalls[0].ID != "b" {
		t.Fatalf("calls %+v %+v", a.ToolCalls, b.ToolCalls)
	}
	a.ToolCalls = append(a.ToolCalls, ToolCall{ID: "over"})
	if b.ToolCalls[0].ID != "b" || prev.Messages[3].ToolCalls[0].ID != "b" {
		t.Fatal("an append to one message's calls wrote over another's")
	}
}

// TestReparserBodiesCollectable: a body the Reparser parsed whose holder
// never releases it (a bug, but one bigbuf forgives: the collector gives
// such a buffer back) becomes unreachable once nothing uses it — not
// kept alive by the function that recycles its view's array — both when
// the Reparser did not keep it and when the Reparser itself was dropped.
func TestReparserBodiesCollectable(t *testing.T) {
	msgs := make([]string, minRecycled)
	for i := range msgs {
		msgs[i] = fmt.Sprintf(`{"role":"user","content":"q%d %s"}`, i, strings.Repeat("x", 600))
	}
	s := `{"model":"m","messages":[` + strings.Join(msgs, ",") + `]}`
	for _, keep := range []bool{false, true} {
		wp := func() weak.Pointer[byte] {
			bound := 1 << 10 // too small to keep the view
			if keep {
				bound = 32 << 20
			}
			rp := NewReparser(bound)
			b := bigbuf.Make(len(s))
			copy(b, s)
			if _, err := rp.Parse(b); err != nil {
				t.Fatal(err)
			}
			return weak.Make(&b[0]) // the call's reference is never released
		}()
		deadline := time.Now().Add(5 * time.Second)
		for wp.Value() != nil {
			if time.Now().After(deadline) {
				t.Fatalf("kept by a dropped Reparser %v: the body never became unreachable", keep)
			}
			runtime.GC()
			time.Sleep(time.Millisecond)
		}
	}
}

// TestReparseCountsSpareCalls: the array the moved messages' tool calls
// share is sized for the previous view's calls; when the history stops
// repeating early, the room left is counted in the view's bytes (the
// Reparser's bound), not lost to it.
func TestReparseCountsSpareCalls(t *testing.T) {
	msg := func(i int, text string) string {
		return fmt.Sprintf(`{"role":"assistant","content":%q,"tool_calls":[{"id":"c%d","type":"function","function":{"name":"f","arguments":"{}"}}]}`, text, i)
	}
	var a, b []string
	for i := range 10 {
		a = append(a, msg(i, "same"))
		text := "same"
		if i == 2 {
			text = "changed" // the history stops repeating here
		}
		b = append(b, msg(i, text))
	}
	prev, err := ParseRequest([]byte(`{"model":"m","messages":[` + strings.Join(a, ",") + `]}`))
	if err != nil {
		t.Fatal(err)
	}
	r, err := parseReusing([]byte(`{"model":"m","messages":[`+strings.Join(b, ",")+`]}`), prev)
	if err != nil {
		t.Fatal(err)
	}
	if r.spareCalls() != 8 {
		t.Fatalf("spare calls %d, want 8 (room for 10, two moved)", r.spareCalls())
	}
	counted := r.viewBytes()
	r.callArray = r.callArray[:len(r.callArray):len(r.callArray)]
	if d := counted - r.viewBytes(); d != 8*int(unsafe.Sizeof(ToolCall{})) {
		t.Fatalf("the spare room adds %d bytes to the view's, want %d", d, 8*int(unsafe.Sizeof(ToolCall{})))
	}
}

// TestReparserMovedCalls: the tool calls a long view moved into an
// array of their own (its messages moved: the body's head grew) stay
// readable after its body's last release: the copies of its messages,
// in later views and in Apply's views the edited bodies' table keeps,
// point into that array, which is left to the collector.
func TestReparserMovedCalls(t *testing.T) {
	call := func(i int) string {
		return fmt.Sprintf(`{"role":"assistant","content":"","tool_calls":[{"id":"c%d","type":"function","function":{"name":"read","arguments":"{\"n\":%d}"}}]},{"role":"tool","tool_call_id":"c%d","content":"r%d"}`, i, i, i, i)
	}
	var msgs []string
	for i := range minRecycled {
		msgs = append(msgs, call(i))
	}
	mk := func(n int) []byte {
		// A long first message: a body bigbuf counts, whose last release
		// it sees. A field before the messages grows past the bytes that
		// find the earlier request (reparseKeyBytes): the messages move,
		// and are not shared (TestReparserShares).
		s := `{"model":"m","x":"` + strings.Repeat("z", reparseKeyBytes+n) + `","messages":[{"role":"user","content":"` + strings.Repeat("x", bigbuf.MinSize) + `"},` + strings.Join(msgs[:n], ",") + `]}`
		b := bigbuf.Make(len(s))
		copy(b, s)
		return b
	}
	rp := NewReparser(32 << 20)
	var views, wants []*Request
	for k := range 4 {
		body := mk(minRecycled/2 + k)
		v, err := rp.Parse(body)
		if err != nil {
			t.Fatal(err)
		}
		want, err := ParseRequest(bytes.Clone(body))
		if err != nil {
			t.Fatal(err)
		}
		sameView(t, v, want)
		if k > 0 && (v.reused == 0 || len(v.callArray) != (v.reused-1)/2) {
			t.Fatalf("request %d: %d messages moved, their calls in no array of their own (%d)", k, v.reused, cap(v.callArray))
		}
		bigbuf.Release(body) // the call ended; the Reparser keeps the view until the next one
		views, wants = append(views, v), append(wants, want)
	}
	for k, v := range views[:len(views)-1] { // replaced in the Reparser: their bodies' last release
		if v.Messages == nil {
			continue // its message array went back (TestReparserRecyclesViews); its calls need not
		}
		for i := range wants[k].Messages {
			if !reflect.DeepEqual(v.Messages[i].ToolCalls, wants[k].Messages[i].ToolCalls) {
				t.Fatalf("request %d, message %d: calls %+v, want %+v", k, i, v.Messages[i].ToolCalls, wants[k].Messages[i].ToolCalls)
			}
		}
	}
	if len(views[1].callArray) == 0 || views[1].callArray[0].ID != "c0" {
		t.Fatalf("a moved view's calls went back with its body: %+v", views[1].callArray[:1])
	}
}

// TestRepeats: a view says it repeats the first n messages of the view it
// was read against, byte for byte at their places, and of no other view;
// not past a message that changed; ParseRequest's and Apply's views have
// no number.
func TestRepeats(t *testing.T) {
	msg := func(i int) string {
		return fmt.Sprintf(`{"role":"user","content":"step %d: %s"}`, i, strings.Repeat("x", 300)) // the first 2 KB of a body find its earlier requests
	}
	body := func(n int, edit map[int]string) []byte {
		ms := make([]string, n)
		for i := range ms {
			ms[i] = msg(i)
			if s, ok := edit[i]; ok {
				ms[i] = s
			}
		}
		return []byte(`{"model":"m","messages":[` + strings.Join(ms, ",") + `]}`)
	}
	rp := NewReparser(32 << 20)
	parse := func(b []byte) *Request {
		t.Helper()
		r, err := rp.Parse(b)
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	a := parse(body(10, nil))
	b := parse(body(12, nil)) // a's next request
	if a.ID() == 0 || b.ID() == 0 || a.ID() == b.ID() {
		t.Fatalf("ids %d and %d", a.ID(), b.ID())
	}
	for n := 0; n <= 10; n++ {
		if !b.Repeats(a.ID(), n) {
			t.Errorf("b does not repeat a's first %d messages", n)
		}
	}
	if b.Repeats(a.ID(), 11) || b.Repeats(a.ID(), 13) || b.Repeats(b.ID(), 1) || b.Repeats(0, 0) {
		t.Error("b repeats more than a's messages, or another view's")
	}
	c := parse(body(12, map[int]string{8: msg(80)})) // read against b, its message 8 changed
	if !c.Repeats(b.ID(), 8) || c.Repeats(b.ID(), 9) || c.Repeats(a.ID(), 1) {
		t.Errorf("c read against b (base %d, same %d): repeats b's 8, not 9, and nothing of a", c.base, c.same)
	}
	// Repeated is the most n Repeats holds for.
	for _, v := range []struct {
		r    *Request
		id   uint64
		want int
	}{{b, a.ID(), 10}, {c, b.ID(), 8}, {c, a.ID(), 0}, {b, b.ID(), 0}, {b, 0, 0}} {
		if got := v.r.Repeated(v.id); got != v.want || got > 0 && (!v.r.Repeats(v.id, got) || v.r.Repeats(v.id, got+1)) {
			t.Errorf("view %d repeats %d messages of view %d, want %d", v.r.ID(), got, v.id, v.want)
		}
	}
	other := NewReparser(32 << 20) // another Reparser's views have other numbers
	d, err := other.Parse(body(10, nil))
	if err != nil || d.ID() == a.ID() || d.ID() == b.ID() || d.ID() == c.ID() {
		t.Fatalf("another Reparser's view numbered %d (err %v)", d.ID(), err)
	}
	p, err := ParseRequest(body(12, nil))
	if err != nil || p.ID() != 0 || p.Repeats(a.ID(), 1) {
		t.Fatalf("ParseRequest's view: id %d, err %v", p.ID(), err)
	}
	e, err := b.Apply([]Edit{{Start: b.Messages[11].ContentStart, End: b.Messages[11].ContentEnd, Repl: []byte(`"changed"`)}})
	if err != nil || e.ID() != 0 || e.Repeats(a.ID(), 1) {
		t.Fatalf("Apply's view: id %d, err %v", e.ID(), err)
	}
}

// TestParseKeyedLater: until its parse settles, a view is not one the
// next requests are read against (they take the messages of the view
// before it), and the earlier body it was read against stays held; once
// settled, the next request takes its messages, and its body goes on to
// be the one kept.
func TestParseKeyedLater(t *testing.T) {
	seed := parseCopy(t, fixtures.SeedHistory())
	rp := NewReparser(32 << 20)
	parse := func(n int) (*Request, []byte, func()) {
		b := truncated(t, seed, n)
		v, body, settle := parseLater(t, rp, b)
		want, _ := ParseRequest(b)
		sameView(t, v, want)
		return v, body, settle
	}
	a, aBody, settleA := parse(100)
	settleA()
	bigbuf.Release(aBody) // its call ended: the Reparser holds it
	b, bBody, settleB := parse(110)
	if b.reused != len(a.Messages) {
		t.Fatalf("the second request took %d messages, want the first's %d", b.reused, len(a.Messages))
	}
	c, cBody, settleC := parse(120) // b not settled: read against a
	if c.reused != len(a.Messages) {
		t.Fatalf("a request read before the second settled took %d messages, want the first's %d", c.reused, len(a.Messages))
	}
	settleC()
	bigbuf.Release(cBody)
	bodies := [][]byte{aBody, bBody, cBody}
	if n := wentBackOf(bodies); n != 0 {
		t.Fatalf("%d bodies went back while the second request's parse held the first's", n)
	}
	settleB()
	bigbuf.Release(bBody)
	if n := wentBackOf(bodies); n != 1 || !bigbuf.Poisoned(aBody) { // looked at before a Make can hand it out again
		t.Fatalf("%d bodies went back once the first was replaced (the first: %v), want the first's", n, bigbuf.Poisoned(aBody))
	}
	d, _, settleD := parse(130)
	defer settleD()
	if d.reused != len(c.Messages) && d.reused != len(b.Messages) {
		t.Fatalf("after the second settled, the next request took %d messages, want those of a later view (%d or %d)", d.reused, len(b.Messages), len(c.Messages))
	}
}

// wentBackOf counts the bodies of bs that went back (bigbuf.Poisoned:
// each body alone, not bigbuf.Released's count over the whole binary).
func wentBackOf(bs [][]byte) int {
	n := 0
	for _, b := range bs {
		if bigbuf.Poisoned(b) {
			n++
		}
	}
	return n
}

// parseLater reads a copy of b, as a proxy reads a large body (into a
// bigbuf buffer, keyed as it comes), with rp.ParseKeyedLater; it returns
// the view, the body (the caller's to release) and the settle.
func parseLater(t *testing.T, rp *Reparser, b []byte) (*Request, []byte, func()) {
	t.Helper()
	body := bigbuf.Make(len(b))
	copy(body, b)
	var keys BodyKeys
	keys.Add(body, len(body))
	v, settle, err := rp.ParseKeyedLater(body, keys)
	if err != nil {
		t.Fatal(err)
	}
	return v, body, settle
}

// TestParseKeyedLaterSmall: a body under bigbuf.MinSize leaves nothing
// to settle (no settle to allocate): its bookkeeping is done in the
// parse, and the next request of its conversation is read against it at
// once.
func TestParseKeyedLaterSmall(t *testing.T) {
	seed := parseCopy(t, fixtures.SeedHistory())
	rp := NewReparser(1 << 20)
	var small []*Request
	for _, n := range []int{4, 5} {
		body := truncated(t, seed, n)
		if len(body) >= bigbuf.MinSize {
			t.Fatalf("the body is not small: %d bytes", len(body))
		}
		v, settle, err := rp.ParseKeyedLater(body, BodyKeys{})
		if err != nil || settle != nil {
			t.Fatalf("a small body: settle %v, err %v; want nothing left", settle != nil, err)
		}
		small = append(small, v)
	}
	if small[1].reused != len(small[0].Messages) {
		t.Fatalf("the next request took %d messages, want the first's %d", small[1].reused, len(small[0].Messages))
	}
}

// BenchmarkSmallReparse is the proxy's parse of a small request (two
// messages, one of 16 conversations in turn, read against its
// conversation's previous request), warm, and cold: before each request
// the cache is written over (1 MiB, 4 MiB, 64 MiB), as the client and
// the upstream between two paced requests do, more or less. The README's
// "Where the small request's added latency goes" cites it.
func BenchmarkSmallReparse(b *testing.B) {
	bodies := make([][]byte, 16)
	for i := range bodies {
		bodies[i] = fmt.Appendf(nil, `{"model":"deepseek-reasoner","stream":false,"messages":[{"role":"system","content":"You are a careful coding assistant."},{"role":"user","content":"Say hello to user %d."}]}`, i)
	}
	for _, evict := range []int{0, 1 << 20, 4 << 20, 64 << 20} {
		b.Run(fmt.Sprintf("evicted=%dMiB", evict>>20), func(b *testing.B) {
			rp := NewReparser(32 << 20)
			junk := make([]byte, evict)
			i := 0
			for b.Loop() {
				b.StopTimer()
				for j := 0; j < len(junk); j += 64 {
					junk[j]++
				}
				body := bytes.Clone(bodies[i%len(bodies)])
				i++
				var k BodyKeys
				k.Add(body, len(body))
				b.StartTimer()
				if _, err := rp.ParseKeyed(body, k); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
