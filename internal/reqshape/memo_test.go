package reqshape

import (
	"bytes"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/shaperproxy/shaperproxy/conv"
	"github.com/shaperproxy/shaperproxy/internal/jsonstr"
	"github.com/shaperproxy/shaperproxy/shaping"
)

// TestMemoShapeQuoted: ShapeQuoted gives shaping.Shape's result and, when
// it changed the text, that result quoted, from memory or not, on a miss
// and on a hit, whether the entry was made by Shape or ShapeQuoted.
func TestMemoShapeQuoted(t *testing.T) {
	long := strings.Repeat("a \"quoted\" line\nwith\ttabs é ", 200)
	texts := []string{long, "short", "", long + "x"}
	opts := []shaping.Options{{}, {Op: shaping.OpExtract, MaxChars: 50}, {Op: shaping.OpKeep}, {Op: shaping.OpDrop}, {Op: shaping.OpExtract, Marker: true, MaxChars: 200}, {Op: shaping.OpExtract, MaxChars: 200}, {Op: "unknown"}}
	for _, m := range []*memo{nil, newMemo(16)} {
		for round := 0; round < 3; round++ {
			for _, text := range texts {
				for _, o := range opts {
					want, wchanged := shaping.Shape(text, o)
					src := source{conv.RawKeyOf([]byte(text)), partReasoning}
					var out string
					var q conv.String
					var changed bool
					if round == 1 && m != nil {
						out, changed = m.Shape(src, -1, text, o) // an entry made without the quote
						if changed {
							_, q, _ = m.ShapeQuoted(src, -1, text, o)
						}
					} else {
						out, q, changed = m.ShapeQuoted(src, -1, text, o)
					}
					if out != want || changed != wchanged {
						t.Fatalf("round %d op %v: got (%q, %v), want (%q, %v)", round, o.Op, out, changed, want, wchanged)
					}
					switch {
					case changed && !bytes.Equal(q.Token(), jsonstr.Quote(want)):
						t.Fatalf("round %d op %v: quoted %q, want %q", round, o.Op, q.Token(), jsonstr.Quote(want))
					case !changed && q.Token() != nil:
						t.Fatalf("round %d op %v: unchanged text quoted %q", round, o.Op, q.Token())
					}
				}
			}
		}
	}
}

// TestMemoKeepSkips: under OpKeep the memo neither looks up nor remembers
// the text (Shape leaves it as it is anyway).
func TestMemoKeepSkips(t *testing.T) {
	m := newMemo(16)
	text := strings.Repeat("reasoning ", 1000)
	for range 3 {
		if out, changed := m.Shape(source{conv.RawKeyOf([]byte(text)), partReasoning}, -1, text, shaping.Options{Op: shaping.OpKeep}); out != text || changed {
			t.Fatalf("keep changed the text")
		}
	}
	if hits, misses := m.Stats(); hits != 0 || misses != 0 || m.order.Len() != 0 {
		t.Fatalf("keep used the memo: %d hits, %d misses, %d entries", hits, misses, m.order.Len())
	}
}

// TestMemoBySource: the memo finds a text by where it was read (the
// message's key and the part), so a hit costs no pass over the text: the
// same text read from another message, or from the other part, is an
// entry of its own, and the hit returns what shaping.Shape gives.
func TestMemoBySource(t *testing.T) {
	m := newMemo(16)
	text := strings.Repeat("Hmm, wait. The answer is 42 because the tests say so. ", 40)
	o := shaping.Options{Op: shaping.OpExtract, MaxChars: 120}
	want, _ := shaping.Shape(text, o)
	a, b := conv.RawKeyOf([]byte("message a")), conv.RawKeyOf([]byte("message b"))
	for _, src := range []source{{a, partReasoning}, {a, partReasoning}, {b, partReasoning}, {a, partThink}, {b, partReasoning}} {
		if out, _ := m.Shape(src, -1, text, o); out != want {
			t.Fatalf("%v: got %q, want %q", src, out, want)
		}
	}
	if hits, misses := m.Stats(); hits != 2 || misses != 3 {
		t.Fatalf("%d hits, %d misses; want 2 hits (the repeated sources) and 3 misses", hits, misses)
	}
}

// TestPrintMemo: the fingerprints made from remembered print parts are
// the fingerprints made without them, on a miss, on a hit, and in a memo
// too small for the history (it starts a new generation and stays within
// its bound); an edited user message changes its print and no other.
func TestPrintMemo(t *testing.T) {
	p := prof("deepseek-v4")
	v := view(t, seedCase())
	cands := candsOf(v, cacheAwareRule(), nil)
	for i := range cands {
		cands[i].Changed = i%2 == 0 // some blocks go out shaped
	}
	rd := p.Of(v)
	want := fingerprint(v, cands, rd, nil, nil, 0, false)
	for _, size := range []int{1 << 16, 10} {
		pm := newPrintMemo(size)
		for pass := range 2 {
			got := fingerprint(v, cands, rd, pm.of(v, nil, nil, 0), nil, 0, false)
			if got.head != want.head || !slices.Equal(got.msgs, want.msgs) {
				t.Fatalf("memo of %d, pass %d: prints differ", size, pass)
			}
			pm.mu.Lock()
			n := len(pm.cur) + len(pm.old)
			pm.mu.Unlock()
			if n > size || n == 0 {
				t.Fatalf("memo of %d holds %d", size, n)
			}
		}
	}
	// An edited user message: its print changes, every other stays.
	at := bytes.Index(seedCase(), []byte(`"role":"user","content":"`))
	edited := slices.Concat(seedCase()[:at], []byte(`"role":"user","content":"x`), seedCase()[at+len(`"role":"user","content":"`):])
	w := view(t, edited)
	fresh := func(r *conv.Request, pm *printMemo) prints {
		var parts []partPrints
		if pm != nil {
			parts = pm.of(r, nil, nil, 0)
		}
		return fingerprint(r, candsOf(r, cacheAwareRule(), nil), p.Of(r), parts, nil, 0, false)
	}
	pm := newPrintMemo(1 << 16)
	before, after := fresh(v, pm), fresh(w, pm)
	if !slices.Equal(after.msgs, fresh(w, nil).msgs) {
		t.Fatal("the memo's prints of the edited request differ from the prints made without it")
	}
	diff := 0
	for i := range before.msgs {
		if before.msgs[i] != after.msgs[i] {
			diff++
			if v.Messages[i].Role != "user" {
				t.Fatalf("message %d (%s) changed print", i, v.Messages[i].Role)
			}
		}
	}
	if diff != 1 || breakAt(before, after) < 0 {
		t.Fatalf("%d prints changed (break at %d), want the edited message's alone", diff, breakAt(before, after))
	}
}

// TestPrintMemoGenerations: a message used on every request stays
// remembered while others come and go past the bound (it is found before
// each of its requests), and the bound holds.
func TestPrintMemoGenerations(t *testing.T) {
	pm := newPrintMemo(8)
	keep := view(t, []byte(`{"model":"m","messages":[{"role":"system","content":"kept"}]}`))
	k := keep.Messages[0].RawKey()
	pm.of(keep, nil, nil, 0)
	for i := range 40 {
		pm.of(view(t, fmt.Appendf(nil, `{"model":"m","messages":[{"role":"user","content":"other %d"}]}`, i)), nil, nil, 0)
		pm.mu.Lock()
		_, inCur := pm.cur[k]
		_, inOld := pm.old[k]
		n := len(pm.cur) + len(pm.old)
		pm.mu.Unlock()
		if !inCur && !inOld {
			t.Fatalf("request %d: the message of every request was forgotten", i)
		}
		if n > 8 {
			t.Fatalf("holds %d, bound 8", n)
		}
		pm.of(keep, nil, nil, 0)
	}
}

// BenchmarkFingerprintSeed: the seed's prints with and without the memo.
func BenchmarkFingerprintSeed(b *testing.B) {
	p := prof("deepseek-v4")
	v, _ := conv.ParseRequest(seedCase())
	cands := candsOf(v, cacheAwareRule(), nil)
	rd := p.Of(v)
	b.Run("hashed", func(b *testing.B) {
		for b.Loop() {
			fingerprint(v, cands, rd, nil, nil, 0, false)
		}
	})
	b.Run("memo", func(b *testing.B) {
		pm := newPrintMemo(1 << 16)
		for b.Loop() {
			fingerprint(v, cands, rd, pm.of(v, nil, nil, 0), nil, 0, false)
		}
	})
}

// TestNoBlocksNoAllocation: a long history without reasoning costs the
// shaper's candidate pass no allocation (room is made only for messages
// that can give a block).
func TestNoBlocksNoAllocation(t *testing.T) {
	var b strings.Builder
	b.WriteString(`{"model":"m","messages":[`)
	for i := range 600 {
		if i > 0 {
			b.WriteByte(',')
		}
		role := "user"
		if i%2 == 1 {
			role = "assistant"
		}
		fmt.Fprintf(&b, `{"role":%q,"content":"message %d"}`, role, i)
	}
	b.WriteString(`]}`)
	v := view(t, []byte(b.String()))
	rule := cacheAwareRule()
	if n := testing.AllocsPerRun(20, func() { candsOf(v, rule, nil) }); n != 0 {
		t.Fatalf("%v allocations for a history without reasoning", n)
	}
}

// TestPrintMemoLastConcurrent: requests of two conversations whose
// messages differ at the same places, looked up from many goroutines
// (each one's messages both found by their place in the last request and
// not), always get each message's own parts, never a place's other
// message's, nor parts not yet made.
func TestPrintMemoLastConcurrent(t *testing.T) {
	mk := func(tag string, n int) *conv.Request {
		return messagesView(t, n, "", func(i int) string { return fmt.Sprintf(`{"role":"user","content":"%s %d"}`, tag, i%7) })
	}
	reqs := []*conv.Request{mk("a", 40), mk("b", 40), mk("a", 60)}
	pm := newPrintMemo(16) // small: the maps forget, the last request's places do not
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 300 {
				r := reqs[(g+i)%len(reqs)]
				got := pm.of(r, nil, nil, 0)
				for j := range r.Messages {
					if got[j] != partPrintsOf(&r.Messages[j]) {
						t.Errorf("message %d of %q: wrong parts", j, r.Messages[j].Content)
						return
					}
				}
			}
		})
	}
	wg.Wait()
}

// TestMemoPlacesConcurrent: requests of three conversations shaped at once
// through a memo too small to hold their blocks, each block found at its
// place when the last request had it there: every shaped text is
// shaping.Shape's, whichever request began the places.
func TestMemoPlacesConcurrent(t *testing.T) {
	mk := func(tag string, n int) *conv.Request {
		return messagesView(t, n, `,{"role":"user","content":"last"}`, func(i int) string {
			return fmt.Sprintf(`{"role":"user","content":"q%d"},{"role":"assistant","reasoning_content":"Okay, %s %d. Let me think about step %d. The answer is %d because the input says so. Wait, check it again: yes, %d.","content":"a"}`, i, tag, i%5, i, i*i, i)
		})
	}
	reqs := []*conv.Request{mk("a", 20), mk("b", 20), mk("a", 30)}
	m := newMemo(8)
	o := shaping.Options{Op: shaping.OpExtract, MaxChars: 40}
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 200 {
				r := reqs[(g+i)%len(reqs)]
				m.begin(len(r.Messages))
				for j := range r.Messages {
					msg := &r.Messages[j]
					if msg.Reasoning == "" {
						continue
					}
					got, q, changed := m.ShapeQuoted(source{msg.RawKey(), partReasoning}, placeOf(j, partReasoning), msg.Reasoning, o)
					want, wchanged := shaping.Shape(msg.Reasoning, o)
					if got != want || changed != wchanged || changed && string(q.Token()) != string(conv.QuoteString(want).Token()) {
						t.Errorf("message %d: %q (changed %v), want %q (%v)", j, got, changed, want, wchanged)
						return
					}
				}
			}
		})
	}
	wg.Wait()
	if hits, _ := m.Stats(); hits == 0 {
		t.Fatal("no block was found again: the test checked nothing")
	}
}

// TestMemoPlacesKeepRecent: a conversation's blocks, found at their places
// on every request, stay the most recent in the map: other traffic does
// not push them out, so when another request's places come in between
// they are still found (by the map).
func TestMemoPlacesKeepRecent(t *testing.T) {
	o := shaping.Options{Op: shaping.OpExtract, MaxChars: 40}
	blocks := make([]string, 4)
	for i := range blocks {
		blocks[i] = fmt.Sprintf("Okay, block %d. ", i) + strings.Repeat("Let me think about it. ", 20)
	}
	m := newMemo(8)
	req := func() {
		m.begin(len(blocks))
		for i, b := range blocks {
			m.ShapeQuoted(source{conv.RawKeyOf([]byte(b)), partReasoning}, placeOf(i, partReasoning), b, o)
		}
	}
	req()
	for round := range 3 {
		req()              // found at their places
		for j := range 4 { // other traffic: 4 entries of its own, no places
			x := fmt.Sprintf("other %d %d ", round, j) + strings.Repeat("Hmm, consider. ", 20)
			m.Shape(source{conv.RawKeyOf([]byte(x)), partReasoning}, -1, x, o)
		}
	}
	m.begin(1) // another conversation's request begins in between
	_, before := m.Stats()
	req()
	if _, after := m.Stats(); after != before {
		t.Errorf("%d of %d blocks in use every request were shaped again", after-before, len(blocks))
	}
}

// messagesView is the view of a request whose messages are msg(0) …
// msg(n-1), then last (its raw JSON, with a leading comma).
func messagesView(t *testing.T, n int, last string, msg func(i int) string) *conv.Request {
	t.Helper()
	var b strings.Builder
	b.WriteString(`{"model":"m","messages":[`)
	for i := range n {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(msg(i))
	}
	b.WriteString(last + `]}`)
	return view(t, []byte(b.String()))
}
