package conv

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/shaperproxy/shaperproxy/fixtures"
	"github.com/shaperproxy/shaperproxy/internal/bigbuf"
)

// editCall is one request through a Reparser as the proxy handles it: its
// body read into a bigbuf buffer, parsed, edited by Apply; the call holds
// the body and the edited body until end.
type editCall struct {
	body, out []byte
	view      *Request
}

func (c editCall) end() {
	bigbuf.Release(c.body)
	bigbuf.Release(c.out)
}

// editThrough parses body (copied into a bigbuf buffer) with p, applies
// the edits shapeEdits gives, and checks the edited body and its view
// against ApplyEdits and ParseRequest of a plain copy.
func editThrough(t *testing.T, p *Reparser, body []byte, edits []Edit) editCall {
	t.Helper()
	return editAgainst(t, p, body, edits, nil)
}

// editAgainst is editThrough with the body read against prev (nil: the
// one p finds), as a request read at the same time as another of its
// conversation is.
func editAgainst(t *testing.T, p *Reparser, body []byte, edits []Edit, prev *Request) editCall {
	t.Helper()
	b := bigbuf.Make(len(body))
	copy(b, body)
	var r *Request
	var err error
	if prev == nil {
		r, err = p.Parse(b)
	} else if r, err = parseReusing(b, prev); err == nil {
		r.edited, r.id = p.edited, p.ids.Add(1)
	}
	if err != nil {
		t.Fatal(err)
	}
	want := ApplyEdits(bytes.Clone(body), cloneEdits(edits))
	v, err := r.Apply(edits)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(v.Body, want) {
		i := 0
		for i < len(want) && i < len(v.Body) && v.Body[i] == want[i] {
			i++
		}
		t.Fatalf("edited body differs from ApplyEdits at byte %d of %d (got %d)", i, len(want), len(v.Body))
	}
	pv, err := ParseRequest(bytes.Clone(want))
	if err != nil {
		t.Fatal(err)
	}
	sameView(t, v, pv)
	return editCall{body: b, out: v.Body, view: r}
}

func cloneEdits(es []Edit) []Edit {
	out := make([]Edit, len(es))
	copy(out, es)
	return out
}

// reasoningEdits replaces every reasoning string over 300 bytes with a
// short one that tag names (the same tag, the same bytes: what the shaper
// puts in again for a block it shaped before).
func reasoningEdits(r *Request, tag func(i int) string) []Edit {
	var es []Edit
	for i, m := range r.Messages {
		if m.ReasoningStart >= 0 && m.ReasoningEnd-m.ReasoningStart > 300 {
			es = append(es, Edit{Start: m.ReasoningStart, End: m.ReasoningEnd, Repl: quote(tag(i))})
		}
	}
	return es
}

func editsOf(t testing.TB, body []byte, tag func(i int) string) []Edit {
	t.Helper()
	r, err := ParseRequest(body)
	if err != nil {
		t.Fatal(err)
	}
	return reasoningEdits(r, tag)
}

func shapedTag(i int) string { return fmt.Sprintf("shaped block %d", i) }

// TestApplyWritesOverEarlierBody: a conversation's next request, edited
// the same way, is written over the previous one's edited body once that
// one's call ended — the same buffer, the same bytes as ApplyEdits — and
// not while it is still held.
func TestApplyWritesOverEarlierBody(t *testing.T) {
	seed := parseCopy(t, fixtures.SeedHistory())
	p := NewReparser(32 << 20)
	a := truncated(t, seed, 120)
	first := editThrough(t, p, a, editsOf(t, a, shapedTag))
	if len(first.out) < bigbuf.MinSize {
		t.Fatalf("edited body of %d bytes: too short to be kept", len(first.out))
	}

	b := truncated(t, seed, 122)
	held := editThrough(t, p, b, editsOf(t, b, shapedTag))
	if sameBuffer(held.out, first.out) {
		t.Fatal("an edited body still held was written over")
	}
	if held.view.base != first.view.id || held.view.same == 0 {
		t.Fatalf("the next request's base is %d (same %d), want %d", held.view.base, held.view.same, first.view.id)
	}
	first.end()
	held.end()

	// The request after: its base's body is free now.
	c := truncated(t, seed, 125)
	next := editThrough(t, p, c, editsOf(t, c, shapedTag))
	if !sameBuffer(next.out, held.out) {
		t.Fatal("the next request's edited body did not go over the free one of its base")
	}
	next.end()

	// Along the chain: d's base (e) is held, e's base (next) is free.
	d := truncated(t, seed, 126)
	e := editThrough(t, p, d, editsOf(t, d, shapedTag))
	f := editThrough(t, p, truncated(t, seed, 127), editsOf(t, truncated(t, seed, 127), shapedTag))
	if sameBuffer(f.out, e.out) || !sameBuffer(e.out, next.out) {
		t.Fatal("e should take next's body, f none of a held one")
	}
	e.end()
	f.end()
}

// TestApplyOverDifferingEdits: where the new request's edits in the
// repeated history differ from the earlier ones — other bytes of the same
// length, a block no longer edited, a block edited anew — or its bytes
// differ only in white space between messages, the body written over the
// earlier one is still exactly ApplyEdits'.
func TestApplyOverDifferingEdits(t *testing.T) {
	seed := parseCopy(t, fixtures.SeedHistory())
	a := truncated(t, seed, 100)
	base := editsOf(t, a, shapedTag)
	if len(base) < 6 {
		t.Fatalf("%d edits: the test needs a few", len(base))
	}
	cases := map[string]func() ([]byte, []Edit){
		"same length, other bytes": func() ([]byte, []Edit) {
			es := cloneEdits(base)
			r := bytes.Clone(es[3].Repl)
			r[2] ^= 1 // still a valid JSON string of letters
			es[3].Repl = r
			return a, es
		},
		"one edit fewer": func() ([]byte, []Edit) {
			es := cloneEdits(base)
			return a, append(es[:2:2], es[3:]...)
		},
		"one edit more": func() ([]byte, []Edit) {
			r := parseCopy(t, a)
			es := cloneEdits(base)
			for _, m := range r.Messages {
				if m.ContentStart > 0 && m.ContentEnd-m.ContentStart > 40 && !containsStart(es, m.ContentStart) {
					return a, append(es, Edit{Start: m.ContentStart, End: m.ContentEnd, Repl: quote("new content")})
				}
			}
			t.Fatal("no content to edit")
			return nil, nil
		},
		"white space between messages": func() ([]byte, []Edit) {
			spaced := bytes.Replace(a, []byte(`},{`), []byte(`}, {`), 1)
			return spaced, editsOf(t, spaced, shapedTag)
		},
		"longer history, the same edits": func() ([]byte, []Edit) {
			l := truncated(t, seed, 104)
			return l, editsOf(t, l, shapedTag)
		},
	}
	// The first request with one separator of another white space, of
	// the same length as the next one's.
	// (Past the beginning the Reparser finds the earlier request by.)
	spacedA := replaceAfter(a, 4096, `},{`, `}, {`)
	cases["white space of the same length"] = func() ([]byte, []Edit) {
		b := replaceAfter(a, 4096, `},{`, "},\n{")
		return b, editsOf(t, b, shapedTag)
	}
	for name, next := range cases {
		t.Run(name, func(t *testing.T) {
			p := NewReparser(32 << 20)
			first := editThrough(t, p, a, cloneEdits(base))
			if strings.HasSuffix(name, "same length") {
				first.end()
				first = editThrough(t, p, spacedA, editsOf(t, spacedA, shapedTag))
			}
			first.end()
			body, edits := next()
			c := editThrough(t, p, body, edits)
			if !sameBuffer(c.out, first.out) && len(c.out) <= cap(first.out) {
				t.Errorf("the free earlier body was not written over (base %d same %d, first id %d)", c.view.base, c.view.same, first.view.id)
			}
			c.end()
		})
	}
}

// replaceAfter replaces the first old in b after offset at.
func replaceAfter(b []byte, at int, old, new string) []byte {
	return append(bytes.Clone(b[:at]), bytes.Replace(b[at:], []byte(old), []byte(new), 1)...)
}

func containsStart(es []Edit, start int) bool {
	for _, e := range es {
		if e.Start == start {
			return true
		}
	}
	return false
}

// TestApplyOverRandom: conversations that grow, shrink, change a
// message, and edit their blocks now one way now another, some calls held
// across the next; every edited body is ApplyEdits' and every view
// ParseRequest's, and some were written over earlier ones.
func TestApplyOverRandom(t *testing.T) {
	seed := parseCopy(t, fixtures.SeedHistory())
	rng := rand.New(rand.NewPCG(15, 3))
	p := NewReparser(8 << 20)
	n := 60
	var open []editCall
	before := p.edited.over.Load()
	for round := range 120 {
		switch rng.IntN(6) {
		case 0:
			n = max(45, n-rng.IntN(5))
		case 1, 2, 3:
			n = min(len(seed.Messages), n+1+rng.IntN(3))
		}
		body := truncated(t, seed, n)
		if rng.IntN(8) == 0 { // a message changed in place, its length kept
			i := bytes.Index(body[len(body)/2:], []byte(`"content":"`))
			if i >= 0 && body[len(body)/2+i+11] != '"' && body[len(body)/2+i+11] != '\\' {
				body[len(body)/2+i+11] ^= 0x20
			}
		}
		variant := rng.IntN(3)
		edits := editsOf(t, body, func(i int) string {
			if variant == 0 && i%7 == 3 {
				return strings.ToUpper(shapedTag(i))
			}
			return shapedTag(i)
		})
		if variant == 1 && len(edits) > 2 {
			edits = append(edits[:1:1], edits[2:]...)
		}
		var prev *Request // some read against an earlier one still open: siblings
		if len(open) > 0 && rng.IntN(4) == 0 {
			prev = open[rng.IntN(len(open))].view
		}
		c := editAgainst(t, p, body, edits, prev)
		for _, o := range open {
			if sameBuffer(o.out, c.out) {
				t.Fatalf("round %d: a held edited body was written over", round)
			}
		}
		open = append(open, c)
		for len(open) > 0 && rng.IntN(3) > 0 { // calls end, some late
			k := rng.IntN(len(open))
			open[k].end()
			open = append(open[:k], open[k+1:]...)
		}
	}
	for _, o := range open {
		o.end()
	}
	if over := p.edited.over.Load() - before; over < 30 {
		t.Fatalf("%d of 120 edited bodies written over earlier ones: the test checked little", over)
	}
	p.edited.mu.Lock()
	defer p.edited.mu.Unlock()
	if p.edited.bytes > p.edited.max {
		t.Fatalf("the table keeps %d bytes, over its bound %d", p.edited.bytes, p.edited.max)
	}
}

// sameBuffer reports whether a and b start at the same byte.
func sameBuffer(a, b []byte) bool {
	return cap(a) > 0 && cap(b) > 0 && &a[:1][0] == &b[:1][0]
}

// TestApplyOverSibling: two requests read against the same one (a
// conversation's requests sent at once); the next request, read against
// the first, is written over the second's body when only that one is
// free: the second's first bytes are their common base's, as far as the
// next one's are.
func TestApplyOverSibling(t *testing.T) {
	seed := parseCopy(t, fixtures.SeedHistory())
	p := NewReparser(32 << 20)
	against := func(body []byte, prev *Request) editCall {
		t.Helper()
		return editAgainst(t, p, body, editsOf(t, body, shapedTag), prev)
	}
	base := editThrough(t, p, truncated(t, seed, 130), editsOf(t, truncated(t, seed, 130), shapedTag))
	first := against(truncated(t, seed, 131), base.view)
	second := against(truncated(t, seed, 132), base.view)
	if first.view.base != base.view.id || second.view.base != base.view.id {
		t.Fatal("the two were not read against the same request")
	}
	second.end()
	next := against(truncated(t, seed, 132), first.view) // the second's length: its buffer holds it
	if !sameBuffer(next.out, second.out) {
		t.Fatal("the free body of a sibling was not written over")
	}
	base.end()
	first.end()
	next.end()
}

// TestApplyOverShorter: a request shorter than its base (a history cut
// back) shares only its own messages with it, and so with every view
// along its chain: written over a sibling's body that repeats the longer
// history, it is still exactly ApplyEdits'.
func TestApplyOverShorter(t *testing.T) {
	seed := parseCopy(t, fixtures.SeedHistory())
	p := NewReparser(32 << 20)
	with := func(n int, prev *Request) editCall {
		t.Helper()
		body := truncated(t, seed, n)
		return editAgainst(t, p, body, editsOf(t, body, shapedTag), prev)
	}
	root := with(130, nil)
	base := with(131, root.view)
	sibling := with(131, root.view)
	sibling.end()
	short := with(120, base.view) // its first bytes are base's up to its 120 messages
	if !sameBuffer(short.out, sibling.out) {
		t.Fatal("the sibling's free body was not written over")
	}
	for _, c := range []editCall{root, base, short} {
		c.end()
	}
}

// TestEditedBodiesBounded: the bodies of many conversations come back to
// the table as their calls end; it keeps them within its bound, the
// oldest going back to bigbuf's free list, and writes the next request
// of the latest conversation over its own.
func TestEditedBodiesBounded(t *testing.T) {
	seed := parseCopy(t, fixtures.SeedHistory())
	p := NewReparser(2 << 20) // 40 edited bodies of 100 messages are more
	onList := bigbuf.Free()
	var last editCall
	for c := range 40 {
		body := bytes.Replace(truncated(t, seed, 100), []byte("deepseek-reasoner"), fmt.Appendf(nil, "conversation-%04d", c), 1)
		last = editThrough(t, p, body, editsOf(t, body, shapedTag))
		last.end()
		p.edited.mu.Lock()
		if p.edited.bytes > p.edited.max {
			t.Fatalf("conversation %d: the table holds %d bytes, over its bound %d", c, p.edited.bytes, p.edited.max)
		}
		p.edited.mu.Unlock()
	}
	if bigbuf.Free() <= onList {
		t.Fatal("no body went back to the free list past the bound")
	}
	next := bytes.Replace(truncated(t, seed, 100), []byte("deepseek-reasoner"), []byte("conversation-0039"), 1) // sent again
	c := editThrough(t, p, next, editsOf(t, next, shapedTag))
	if !sameBuffer(c.out, last.out) {
		t.Fatal("the latest conversation's next request was not written over its body")
	}
	c.end()
}

// TestEditedForgottenGoesBack: a view edited twice keeps its later body;
// the earlier one, forgotten while its call still held it, goes back to
// bigbuf's free list when released, not to the table.
func TestEditedForgottenGoesBack(t *testing.T) {
	seed := parseCopy(t, fixtures.SeedHistory())
	p := NewReparser(32 << 20)
	body := truncated(t, seed, 100)
	first := editThrough(t, p, body, editsOf(t, body, shapedTag))
	again, err := first.view.Apply(editsOf(t, body, func(i int) string { return "again " + shapedTag(i) }))
	if err != nil {
		t.Fatal(err)
	}
	onList := bigbuf.Free()
	bigbuf.Release(first.out)
	if bigbuf.Free() != onList+bigbuf.SizeOf(len(first.out)) {
		t.Fatal("the forgotten body did not go back to the free list")
	}
	bigbuf.Release(again.Body)
	p.edited.mu.Lock()
	defer p.edited.mu.Unlock()
	if len(p.edited.free) != 1 || p.edited.free[0].id != first.view.id || &p.edited.free[0].out[0] != &again.Body[0] {
		t.Fatalf("the table holds %d bodies, want the later one", len(p.edited.free))
	}
	bigbuf.Release(first.body)
}

// BenchmarkApplySeedRepeat applies the shaper's kind of edits to the
// seed's request sent again and again through a Reparser, each call's
// bodies released at its end: "over" writes each edited body over the
// previous one's (editedBodies), "fresh" edits into a buffer of the free
// list, as before.
func BenchmarkApplySeedRepeat(b *testing.B) {
	seed := fixtures.SeedHistory()
	edits := editsOf(b, seed, shapedTag)
	for _, mode := range []string{"over", "fresh"} {
		b.Run(mode, func(b *testing.B) {
			p := NewReparser(32 << 20)
			b.SetBytes(int64(len(seed)))
			for b.Loop() {
				b.StopTimer()
				body := bigbuf.Make(len(seed))
				copy(body, seed)
				r, err := p.Parse(body)
				if err != nil {
					b.Fatal(err)
				}
				if mode == "fresh" {
					r.edited = nil
				}
				es := cloneEdits(edits)
				b.StartTimer()
				v, err := r.Apply(es)
				if err != nil {
					b.Fatal(err)
				}
				b.StopTimer()
				bigbuf.Release(body)
				bigbuf.Release(v.Body)
				b.StartTimer()
			}
			b.ReportMetric(float64(p.edited.over.Load())/float64(b.N), "over/op")
		})
	}
}
