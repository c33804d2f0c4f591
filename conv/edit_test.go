package conv

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"reflect"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"
	"unsafe"

	"github.com/shaperproxy/shaperproxy/fixtures"
	"github.com/shaperproxy/shaperproxy/internal/bigbuf"
)

// sameView fails unless got and want are the same view: every field
// ParseRequest fills, byte ranges included.
func sameView(t *testing.T, got, want *Request) {
	t.Helper()
	if string(got.Body) != string(want.Body) {
		t.Fatal("bodies differ")
	}
	if got.Model != want.Model || got.Stream != want.Stream || got.DuplicateKeys != want.DuplicateKeys || got.msgDup != want.msgDup {
		t.Fatalf("top level: got %q %v %v %v, want %q %v %v %v", got.Model, got.Stream, got.DuplicateKeys, got.msgDup,
			want.Model, want.Stream, want.DuplicateKeys, want.msgDup)
	}
	if !reflect.DeepEqual(got.fields, want.fields) {
		t.Fatalf("fields: got %v, want %v", got.fields, want.fields)
	}
	if len(got.Messages) != len(want.Messages) {
		t.Fatalf("%d messages, want %d", len(got.Messages), len(want.Messages))
	}
	for i := range got.Messages {
		if !reflect.DeepEqual(got.Messages[i], want.Messages[i]) {
			t.Fatalf("message %d:\n got %+v\nwant %+v", i, got.Messages[i], want.Messages[i])
		}
	}
	checkTally(t, got)
	checkTally(t, want)
}

// checkTally fails unless r's tally, folded as its messages were placed,
// is what a pass over them finds, written out here as the passes were
// before the tally: the turns, the last signed message, the bytes.
func checkTally(t *testing.T, r *Request) {
	t.Helper()
	if !r.tally.ok {
		t.Fatal("a view made by the package has no tally")
	}
	n, start, last := 0, 0, -1
	signed, calls, bytes := -1, 0, 0
	user, userOrTool, final := -1, -1, -1
	for i := range r.Messages {
		m := &r.Messages[i]
		if m.Role == RoleUser {
			user = i
		}
		if m.Role == RoleUser || m.Role == RoleTool {
			userOrTool = i
		}
		if m.Role == RoleAssistant && len(m.ToolCalls) == 0 {
			final = i
		}
		switch {
		case m.Role == RoleUser && (n == 0 || last < 0 || len(r.Messages[last].ToolCalls) == 0):
			n, start, last = n+1, i, -1
		case n > 0 && m.Role == RoleAssistant:
			last = i
		}
		if m.Signed {
			signed = i
		}
		calls += len(m.ToolCalls)
		bytes += len(m.Reasoning) + len(m.Content) + len(m.ToolCalls)*int(unsafe.Sizeof(ToolCall{}))
		for _, tc := range m.ToolCalls {
			bytes += len(tc.Arguments)
		}
	}
	want := tally{ok: true, turns: n, turnStart: start, turnLast: last, lastSigned: signed, calls: calls, strBytes: bytes,
		lastUser: user, lastUserOrTool: userOrTool, lastFinal: final}
	if r.tally != want {
		t.Fatalf("tally %+v, a pass over the messages gives %+v", r.tally, want)
	}
	if turns := r.Turns(); len(turns) != n || n > 0 && turns[n-1].Start != start {
		t.Fatalf("tally: %d turns, the last from %d; Turns gives %d", n, start, len(turns))
	}
}

// checkApply compares Apply with ParseRequest of the edited body: the
// same view, or the same failure.
func checkApply(t *testing.T, r *Request, edits []Edit) {
	t.Helper()
	body := ApplyEdits(r.Body, append([]Edit(nil), edits...))
	want, werr := ParseRequest(body)
	got, gerr := r.Apply(edits)
	if (gerr != nil) != (werr != nil) {
		t.Fatalf("Apply error %v, ParseRequest error %v", gerr, werr)
	}
	if werr == nil {
		sameView(t, got, want)
	}
}

func quote(s string) []byte {
	b, _ := json.Marshal(s)
	return b
}

// applyBodies are the requests the Apply tests edit.
func applyBodies(t *testing.T) [][]byte {
	bodies := [][]byte{fixtures.SeedHistory()}
	for _, name := range append(multiturn, "anthropic_tool-use-with-thinking.request2.json") {
		bodies = append(bodies, readTestdata(t, name))
	}
	for _, s := range requestSeeds {
		bodies = append(bodies, []byte(s))
	}
	bodies = append(bodies, []byte(`{"tools":[{"type":"function","function":{"name":"f"}}],"model":"m","messages":[{"role":"user","content":"hi"},{"role":"assistant","reasoning_content":"think","content":"ok"}],"stream":true}`))
	return bodies
}

// TestApplyDerived edits the reasoning of every block (the shaper's
// edit), content strings inside messages (the guard's notices) and the
// tools array (the deliberate tool), and checks Apply against a fresh
// parse each time.
func TestApplyDerived(t *testing.T) {
	for n, body := range applyBodies(t) {
		r, err := ParseRequest(body)
		if err != nil {
			t.Fatalf("body %d: %v", n, err)
		}
		var shape []Edit
		for _, m := range r.Messages {
			if m.ReasoningStart >= 0 {
				shape = append(shape, Edit{Start: m.ReasoningStart, End: m.ReasoningEnd, Repl: quote("shaped: " + strings.ToUpper(m.Reasoning[:min(len(m.Reasoning), 20)]) + "\u00e9\n\"")})
			}
		}
		checkApply(t, r, shape)
		shaped, err := r.Apply(shape)
		if err != nil {
			t.Fatal(err)
		}
		// A second transform on the derived view: a notice in the last
		// user or tool message, and the tool added.
		var more []Edit
		for i := len(shaped.Messages) - 1; i >= 0; i-- {
			m := shaped.Messages[i]
			raw := shaped.Body[m.Start:m.End]
			if j := strings.Index(string(raw), `"content":"`); j >= 0 && (m.Role == RoleUser || m.Role == RoleTool) {
				at := m.Start + j + len(`"content":"`)
				more = append(more, Edit{Start: at, End: at, Repl: []byte(`Note: \"again\" `)})
				break
			}
		}
		if f, ok := shaped.Field("tools"); ok && shaped.Body[f.Start] == '[' && f.End-f.Start > 2 {
			more = append(more, Edit{Start: f.End - 1, End: f.End - 1, Repl: []byte(`,{"type":"function","function":{"name":"deliberate"}}`)})
		}
		checkApply(t, shaped, more)
	}
}

// TestApplyStringEdits: edits made from a String (the shaper's, which
// carry their text) give the view a fresh parse gives, for texts with
// escapes, non-ASCII and invalid UTF-8 (whose token decodes to U+FFFD, not
// to the text: Apply must decode it).
func TestApplyStringEdits(t *testing.T) {
	texts := []string{"plain", "line\nquote \" tab\t é 字 😀", "bad \xff byte", "", "\u2028"}
	for n, body := range applyBodies(t) {
		r, err := ParseRequest(body)
		if err != nil {
			t.Fatalf("body %d: %v", n, err)
		}
		for k, text := range texts {
			var edits []Edit
			for _, m := range r.Messages {
				if m.ReasoningStart >= 0 {
					edits = append(edits, QuoteString(text).Replace(m.ReasoningStart, m.ReasoningEnd))
				}
			}
			if len(edits) == 0 {
				continue
			}
			checkApply(t, r, edits)
			v, err := r.Apply(edits)
			if err != nil {
				t.Fatalf("body %d text %d: %v", n, k, err)
			}
			for _, m := range v.Messages {
				if m.ReasoningStart >= 0 && m.Reasoning != strings.ToValidUTF8(text, "\ufffd") {
					t.Fatalf("body %d text %d: reasoning %q", n, k, m.Reasoning)
				}
			}
		}
	}
	if s := QuoteString("a\xffb"); s.known || !bytes.Equal(s.Token(), []byte(`"a\ufffdb"`)) {
		t.Fatalf("invalid UTF-8: %+v", s)
	}
}

// TestApplyFallback covers edits Apply cannot derive (a message added, a
// top-level key changed, a message replaced whole) and edits that break
// the body: the result is still what ParseRequest says.
func TestApplyFallback(t *testing.T) {
	body := []byte(`{"model":"m","tools":[{"a":1}],"messages":[{"role":"user","content":"hi"},{"role":"assistant","reasoning_content":"r","content":"c"}],"stream":false}`)
	r, err := ParseRequest(body)
	if err != nil {
		t.Fatal(err)
	}
	m0, m1 := r.Messages[0], r.Messages[1]
	f, _ := r.Field("model")
	tools, _ := r.Field("tools")
	cases := map[string][]Edit{
		"message added":        {{Start: m1.End, End: m1.End, Repl: []byte(`,{"role":"tool","content":"x"}`)}},
		"message replaced":     {{Start: m0.Start, End: m0.End, Repl: []byte(`{"role":"system","content":"s"}`)}},
		"model changed":        {{Start: f.Start, End: f.End, Repl: []byte(`"other"`)}},
		"key added at the top": {{Start: tools.End, End: tools.End, Repl: []byte(`,"stream":true`)}},
		"reasoning not string": {{Start: m1.ReasoningStart, End: m1.ReasoningEnd, Repl: []byte(`null`)}},
		"reasoning two tokens": {{Start: m1.ReasoningStart, End: m1.ReasoningEnd, Repl: []byte(`"a","content":"b"`)}},
		"content broken":       {{Start: m0.Start + 1, End: m0.Start + 1, Repl: []byte(`"x":`)}},
		"duplicate key added":  {{Start: m0.Start + 1, End: m0.Start + 1, Repl: []byte(`"role":"tool",`)}},
		"tools broken":         {{Start: tools.Start + 1, End: tools.Start + 1, Repl: []byte(`}`)}},
		"tools deeper":         {{Start: tools.Start + 1, End: tools.Start + 1, Repl: []byte(strings.Repeat("[", MaxDepth-1) + strings.Repeat("]", MaxDepth-1) + ",")}},
		"message deeper":       {{Start: m0.End - 1, End: m0.End - 1, Repl: []byte(`,"x":` + strings.Repeat("[", MaxDepth-2) + strings.Repeat("]", MaxDepth-2))}},
		"message at the limit": {{Start: m0.End - 1, End: m0.End - 1, Repl: []byte(`,"x":` + strings.Repeat("[", MaxDepth-3) + strings.Repeat("]", MaxDepth-3))}},
		"invalid utf-8":        {{Start: m1.ReasoningStart, End: m1.ReasoningEnd, Repl: []byte("\"\xff\"")}},
		"no edit":              nil,
	}
	for name, edits := range cases {
		t.Run(name, func(t *testing.T) { checkApply(t, r, edits) })
	}
}

// TestApplyRandom applies random byte edits inside messages and values:
// whatever they break, Apply agrees with ParseRequest.
func TestApplyRandom(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	pieces := []string{`"`, `\`, `\"`, `{`, `}`, `[`, `]`, `,`, `:`, `"x":1,`, `null`, "\u00e9", "\xff", ` `, `a`, `"role":"user",`}
	for n, body := range applyBodies(t) {
		if len(body) > 64<<10 {
			continue // the seed's megabyte: TestApplyDerived covers it
		}
		r, err := ParseRequest(body)
		if err != nil {
			t.Fatal(err)
		}
		for k := 0; k < 200; k++ {
			var edits []Edit
			at := 0
			for e := 0; e < 1+rng.IntN(3) && at < len(body); e++ {
				start := at + rng.IntN(len(body)-at)
				end := min(start+rng.IntN(4), len(body))
				edits = append(edits, Edit{Start: start, End: end, Repl: []byte(pieces[rng.IntN(len(pieces))])})
				at = end + 1
			}
			t.Run("", func(t *testing.T) {
				defer func() {
					if t.Failed() {
						t.Logf("body %d, edits %+v", n, edits)
					}
				}()
				checkApply(t, r, edits)
			})
		}
	}
}

// TestApplyEdits checks the edited body against a byte-by-byte reference:
// edits at either end, back to back, out of order, deleting everything.
func TestApplyEdits(t *testing.T) {
	body := []byte("0123456789")
	// The reference applies the edits one at a time, the last first.
	ref := func(edits []Edit) string {
		sorted := append([]Edit(nil), edits...)
		slices.SortStableFunc(sorted, func(a, b Edit) int { return b.Start - a.Start })
		out := string(body)
		for _, e := range sorted {
			out = out[:e.Start] + string(e.Repl) + out[e.End:]
		}
		return out
	}
	cases := [][]Edit{
		nil,
		{{Start: 0, End: 0, Repl: []byte("<")}},
		{{Start: 10, End: 10, Repl: []byte(">")}},
		{{Start: 0, End: 10, Repl: nil}},
		{{Start: 0, End: 10, Repl: []byte("all")}},
		{{Start: 7, End: 9, Repl: []byte("x")}, {Start: 1, End: 3, Repl: []byte("yyy")}, {Start: 3, End: 4, Repl: nil}},
		{{Start: 2, End: 5, Repl: []byte("long replacement")}, {Start: 5, End: 5, Repl: []byte("+")}},
	}
	if got := ApplyEdits([]byte{}, nil); got == nil || len(got) != 0 {
		t.Errorf("empty body, no edits: %#v, want an empty non-nil body", got)
	}
	for i, edits := range cases {
		want := ref(edits)
		got := ApplyEdits(body, append([]Edit(nil), edits...))
		if string(got) != want || got == nil {
			t.Errorf("case %d: got %q, want %q", i, got, want)
		}
		if string(body) != "0123456789" {
			t.Fatalf("case %d changed the body", i)
		}
	}
}

// BenchmarkApplyEditsSeed edits the seed's request as the shaper does:
// one replacement per long reasoning string.
func BenchmarkApplyEditsSeed(b *testing.B) {
	seed, _ := ParseRequest(fixtures.SeedHistory())
	var edits []Edit
	for _, m := range seed.Messages {
		if m.ReasoningEnd-m.ReasoningStart > 300 {
			edits = append(edits, Edit{Start: m.ReasoningStart, End: m.ReasoningEnd, Repl: []byte(`"shaped"`)})
		}
	}
	b.SetBytes(int64(len(seed.Body)))
	b.ReportAllocs()
	for b.Loop() {
		_ = ApplyEdits(seed.Body, edits)
	}
	b.ReportMetric(float64(len(edits)), "edits")
}

// TestApplyEditsReusedBuffer: a large edited body is written into a
// reused buffer that is not cleared, so every byte must be written: the
// buffers an earlier body left (here filled with 0xEE) must not show.
func TestApplyEditsReusedBuffer(t *testing.T) {
	body := bytes.Repeat([]byte("0123456789"), 20<<10) // 200 KiB
	edits := []Edit{{Start: 150 << 10, End: 150<<10 + 4, Repl: []byte("tail")}, {Start: 0, End: 10, Repl: []byte("head-")}, {Start: 100 << 10, End: 110 << 10, Repl: nil}}
	want := string(body[:0]) + "head-" + string(body[10:100<<10]) + string(body[110<<10:150<<10]) + "tail" + string(body[150<<10+4:])
	n := len(want)
	poison := func() {
		for range 4 { // buffers of the edited body's class, filled and dropped
			b := bigbuf.Make(n)
			for i := range b {
				b[i] = 0xEE
			}
		}
	}
	poison()
	for deadline := time.Now().Add(5 * time.Second); bigbuf.Free() == 0; { // back on the free list after a collection
		if time.Now().After(deadline) {
			t.Fatal("no buffer came back to the free list")
		}
		runtime.GC()
		time.Sleep(time.Millisecond)
	}
	_, reused := bigbuf.Counts()
	for range 4 {
		got := ApplyEdits(body, slices.Clone(edits))
		if string(got) != want {
			i := 0
			for i < len(got) && i < len(want) && got[i] == want[i] {
				i++
			}
			t.Fatalf("edited body differs at byte %d of %d (got %d bytes)", i, n, len(got))
		}
	}
	if _, now := bigbuf.Counts(); now == reused {
		t.Fatal("no edited body went into a reused buffer: the test checked nothing")
	}
}

// TestApplyAppendSurrogate: an insertion that completes a surrogate pair
// whose high half ends the content decodes as the pair (a fresh parse
// reads the two together): it is read again, not derived.
func TestApplyAppendSurrogate(t *testing.T) {
	r, err := ParseRequest([]byte(`{"model":"m","messages":[{"role":"tool","content":"x\ud83d"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	at := r.Messages[0].ContentEnd - 1
	checkApply(t, r, []Edit{{Start: at, End: at, Repl: []byte(`\ude00 done`)}})
}

// TestApplyAppendToContent: text inserted just before the closing quote of
// a string content (the guard's notice) is derived without reading the
// message again, and agrees with a fresh parse: for every message of the
// Apply bodies, with escapes, non-ASCII text, a reasoning after the
// content, a reasoning edit elsewhere, and insertions that are not a
// string's inner bytes (which fall back).
func TestApplyAppendToContent(t *testing.T) {
	bodies := append(applyBodies(t),
		[]byte(`{"messages":[{"role":"assistant","content":"c\u00e9","reasoning_content":"r","tool_calls":[]},{"role":"tool","tool_call_id":"x","content":""}]}`))
	for n, body := range bodies {
		r, err := ParseRequest(body)
		if err != nil {
			t.Fatal(err)
		}
		for i, m := range r.Messages {
			if !m.ContentIsString {
				continue
			}
			at := m.ContentEnd - 1
			for _, repl := range []string{`\n\nNote: \"again\" \u00e9`, "caf\u00e9 \U0001F600", ``, `\`, `"`, `x","y":"z`, `\ude00 done`} {
				edits := []Edit{{Start: at, End: at, Repl: []byte(repl)}}
				if j := (i + 1) % len(r.Messages); r.Messages[j].ReasoningStart >= 0 && j != i {
					o := r.Messages[j]
					edits = append(edits, Edit{Start: o.ReasoningStart, End: o.ReasoningEnd, Repl: quote("shaped")})
				}
				t.Run(fmt.Sprintf("body%d/msg%d", n, i), func(t *testing.T) {
					checkApply(t, r, edits)
					// An insertion is planned as one, the message not read again.
					sorted := append([]Edit(nil), edits...)
					slices.SortFunc(sorted, func(a, b Edit) int { return a.Start - b.Start })
					p, ok := r.plan(sorted)
					if !ok || p.msg[i] != 3 {
						t.Errorf("insertion %q planned as %d, want 3", repl, p.msg[i])
					}
				})
			}
			if len(body) > 64<<10 && i > 40 {
				break // the seed's megabyte: its first messages are enough
			}
		}
	}
}

// TestRecycleView: a view Apply made gives its message array back when
// recycled — a reader who kept it reads the poison in a test binary — and
// the next view Apply makes takes it (sync.Pool may drop one: a few tries)
// and is still ParseRequest's view, every element written; a view Apply
// did not make, and a short one, are left alone.
func TestRecycleView(t *testing.T) {
	short, err := ParseRequest(fixtures.AgentHistory(minRecycled-1, 100, 50))
	if err != nil {
		t.Fatal(err)
	}
	m := short.Messages[2]
	sd, err := short.Apply([]Edit{{Start: m.ReasoningStart, End: m.ReasoningEnd, Repl: quote("short")}})
	if err != nil || !sd.derived {
		t.Fatalf("Apply: %v", err)
	}
	sd.Recycle()
	if len(sd.Messages) != minRecycled-1 {
		t.Fatalf("a view of %d messages gave its array back", minRecycled-1)
	}
	r, err := ParseRequest(fixtures.AgentHistory(minRecycled+40, 400, 200))
	if err != nil {
		t.Fatal(err)
	}
	var edits []Edit
	for _, m := range r.Messages {
		if m.ReasoningStart >= 0 {
			edits = append(edits, Edit{Start: m.ReasoningStart, End: m.ReasoningEnd, Repl: quote("short")})
		}
	}
	if len(edits) == 0 {
		t.Fatal("no reasoning to edit")
	}
	r.Recycle() // parsed, not derived: left alone
	if len(r.Messages) != minRecycled+40 {
		t.Fatalf("Recycle of a parsed view took its messages (%d left)", len(r.Messages))
	}
	d, err := r.Apply(slices.Clone(edits))
	if err != nil || !d.derived {
		t.Fatalf("Apply: %v (derived %v)", err, d.derived)
	}
	kept := d.Messages
	d.Recycle()
	if d.Messages != nil || kept[0].Role != poisonRole {
		t.Fatalf("after Recycle the view holds %d messages, a kept array reads role %q", len(d.Messages), kept[0].Role)
	}
	for try := 0; ; try++ {
		d, err := r.Apply(slices.Clone(edits))
		if err != nil {
			t.Fatal(err)
		}
		want, err := ParseRequest(d.Body)
		if err != nil {
			t.Fatal(err)
		}
		sameView(t, d, want)
		if &d.Messages[:1][0] == &kept[:1][0] {
			break // the recycled array, all of it written again
		}
		if try == 20 {
			t.Fatal("20 views derived after a Recycle, none took the array given back")
		}
		kept = d.Messages
		d.Recycle()
	}
}
