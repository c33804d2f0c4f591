package conv

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
	"unsafe"

	"github.com/shaperproxy/shaperproxy/fixtures"
	"github.com/shaperproxy/shaperproxy/internal/bigbuf"
)

// editCall is one request through a Reparser as the proxy handles it: its
// body read into a bigbuf buffer, parsed, edited by Apply; the call holds
// the body and the edited body until end.
type editCall struct {
	body, out []byte
	view      *Request
	edited    *Request // Apply's view of out
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
		r.edited, r.id = p.edited, viewIDs.Add(1)
	}
	if err != nil {
		t.Fatal(err)
	}
	want := ApplyEdits(bytes.Clone(body), cloneEdits(edits))
	mine := cloneEdits(edits)
	v, err := r.Apply(mine)
	if err != nil {
		t.Fatal(err)
	}
	clear(mine) // the caller's to reuse once Apply returns: the view's pieces are not made of it
	if !bytes.Equal(v.Body, want) {
		i := 0
		for i < len(want) && i < len(v.Body) && v.Body[i] == want[i] {
			i++
		}
		t.Fatalf("edited body differs from ApplyEdits at byte %d of %d (got %d)", i, len(want), len(v.Body))
	}
	checkPieces(t, v, b, want, len(edits))
	pv, err := ParseRequest(bytes.Clone(want))
	if err != nil {
		t.Fatal(err)
	}
	sameView(t, v, pv)
	return editCall{body: b, out: v.Body, view: r, edited: v}
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
			// Made as the shaper makes it: the edit carries its text.
			es = append(es, QuoteString(tag(i)).Replace(m.ReasoningStart, m.ReasoningEnd))
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
	over := p.edited.over.Load()
	held := editThrough(t, p, b, editsOf(t, b, shapedTag))
	if p.edited.over.Load() != over {
		t.Fatal("an edited body still held was written over")
	}
	if held.view.base != first.view.id || held.view.same == 0 {
		t.Fatalf("the next request's base is %d (same %d), want %d", held.view.base, held.view.same, first.view.id)
	}
	first.end()
	held.end()

	// The request after: its base's body is back now.
	c := truncated(t, seed, 125)
	next := editThrough(t, p, c, editsOf(t, c, shapedTag))
	if taken(p) != held.view.id {
		t.Fatalf("the next request's edited body went over view %d's, want its base's (%d)", taken(p), held.view.id)
	}
	next.end()

	// Along the chain: e's base (next) is back; f's base (e) is held,
	// and so is next's body, which e took.
	d := truncated(t, seed, 126)
	e := editThrough(t, p, d, editsOf(t, d, shapedTag))
	if taken(p) != next.view.id {
		t.Fatalf("e went over view %d's body, want next's (%d)", taken(p), next.view.id)
	}
	over = p.edited.over.Load()
	f := editThrough(t, p, truncated(t, seed, 127), editsOf(t, truncated(t, seed, 127), shapedTag))
	if p.edited.over.Load() != over && taken(p) != first.view.id {
		t.Fatalf("f went over view %d's body, held or not its conversation's", taken(p))
	}
	e.end()
	f.end()
}

// taken is the view whose body p's table took last.
func taken(p *Reparser) uint64 {
	p.edited.mu.Lock()
	defer p.edited.mu.Unlock()
	return p.edited.taken
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
			text := []byte(es[3].text)
			text[1] ^= 1 // still letters: a token of the same length
			es[3] = QuoteString(string(text)).Replace(es[3].Start, es[3].End)
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
	cases["white space taken out"] = func() ([]byte, []Edit) { return a, cloneEdits(base) } // after spacedA
	for name, next := range cases {
		t.Run(name, func(t *testing.T) {
			p := NewReparser(32 << 20)
			first := editThrough(t, p, a, cloneEdits(base))
			if strings.HasSuffix(name, "same length") || strings.HasSuffix(name, "taken out") {
				first.end()
				first = editThrough(t, p, spacedA, editsOf(t, spacedA, shapedTag))
			}
			first.end()
			body, edits := next()
			over := p.edited.over.Load()
			c := editThrough(t, p, body, edits)
			if p.edited.over.Load() != over+1 || taken(p) != first.view.id {
				t.Errorf("the earlier body, back, was not written over (base %d same %d, first id %d)", c.view.base, c.view.same, first.view.id)
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
	lin := lineages{}
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
		lin.check(t, c.view)
		lin.check(t, c.edited)
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
	if lin.edited < 30 {
		t.Fatalf("%d of 120 edited bodies repeat an earlier one's first bytes (Lineage): the test checked little", lin.edited)
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
	next := against(truncated(t, seed, 132), first.view)
	if taken(p) != second.view.id {
		t.Fatalf("went over view %d's body, want the sibling's (%d), the only one back", taken(p), second.view.id)
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
	if taken(p) != sibling.view.id {
		t.Fatalf("went over view %d's body, want the sibling's (%d)", taken(p), sibling.view.id)
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
	var calls []editCall      // all sent at once: no body back for the next to take
	for c := range 40 {
		body := bytes.Replace(truncated(t, seed, 100), []byte("deepseek-reasoner"), fmt.Appendf(nil, "conversation-%04d", c), 1)
		calls = append(calls, editThrough(t, p, body, editsOf(t, body, shapedTag)))
	}
	for c, call := range calls {
		call.end()
		p.edited.mu.Lock()
		if p.edited.bytes > p.edited.max {
			t.Fatalf("conversation %d: the table holds %d bytes, over its bound %d", c, p.edited.bytes, p.edited.max)
		}
		p.edited.mu.Unlock()
	}
	p.edited.mu.Lock()
	kept := len(p.edited.free)
	p.edited.mu.Unlock()
	if kept == 0 || kept >= 40 {
		t.Fatalf("the table keeps %d of the 40 bodies, want some, not all", kept)
	}
	last := calls[len(calls)-1]
	next := bytes.Replace(truncated(t, seed, 100), []byte("deepseek-reasoner"), []byte("conversation-0039"), 1) // sent again
	c := editThrough(t, p, next, editsOf(t, next, shapedTag))
	if taken(p) != last.view.id {
		t.Fatalf("the latest conversation's next request went over view %d's body, want its own (%d)", taken(p), last.view.id)
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
	bigbuf.Release(first.out)
	p.edited.mu.Lock()
	kept := len(p.edited.free)
	p.edited.mu.Unlock()
	if kept != 0 {
		t.Fatalf("the forgotten body came to the table (it holds %d)", kept)
	}
	want := bytes.Clone(again.Body)
	bigbuf.Release(again.Body)
	p.edited.mu.Lock()
	defer p.edited.mu.Unlock()
	if len(p.edited.free) != 1 || p.edited.free[0].id != first.view.id || !bytes.Equal(p.edited.free[0].out, want) {
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

// TestApplyOverHeaderDiffers: a member before "messages" that differs in
// one byte, at the same length, past the bytes the Reparser finds the
// earlier request by: the body written over the earlier one takes the
// new member's bytes.
func TestApplyOverHeaderDiffers(t *testing.T) {
	seed := parseCopy(t, fixtures.SeedHistory())
	p := NewReparser(32 << 20)
	meta := `"metadata":{"note":"` + strings.Repeat("x", 3000) + `"},`
	mk := func(n int, c byte) []byte {
		h := strings.Replace(meta, `xxxxx"`, "xxxx"+string(c)+`"`, 1)
		return bytes.Replace(truncated(t, seed, n), []byte(`"stream":false,`), []byte(`"stream":false,`+h), 1)
	}
	a := mk(130, 'a')
	first := editThrough(t, p, a, editsOf(t, a, shapedTag))
	first.end()
	b := mk(132, 'b')
	c := editAgainst(t, p, b, editsOf(t, b, shapedTag), first.view)
	if taken(p) != first.view.id {
		t.Fatal("the earlier body was not written over: the test checked nothing")
	}
	c.end()
}

// TestApplyOverStraddle: an edit in both requests that spans the end of
// the last message the two share at their places (the separator to the
// next, which differs): it is not taken as shared.
func TestApplyOverStraddle(t *testing.T) {
	seed := parseCopy(t, fixtures.SeedHistory())
	p := NewReparser(32 << 20)
	a := truncated(t, seed, 130)
	ra := parseCopy(t, a)
	const k = 120
	straddle := func(r *Request) Edit {
		m, next := r.Messages[k-1], r.Messages[k]
		return Edit{Start: m.End - 1, End: next.Start + 1, Repl: []byte("}, {")}
	}
	first := editThrough(t, p, a, append(editsOf(t, a, shapedTag), straddle(ra)))
	first.end()
	b := bytes.Clone(a) // message k changed in place, its length kept
	m := ra.Messages[k]
	b[bytes.Index(b[m.Start:m.End], []byte(`"role":"`))+m.Start+8] ^= 0x20
	c := editAgainst(t, p, b, append(editsOf(t, b, shapedTag), straddle(parseCopy(t, b))), first.view)
	if taken(p) != first.view.id || c.view.same != ra.Messages[k-1].End {
		t.Fatalf("not written over the earlier body up to message %d (same %d): the test checked nothing", k-1, c.view.same)
	}
	c.end()
}

// TestApplyOverStress: conversations growing, cut back, read against
// earlier requests still open, with separators of other white space,
// bytes changed in place, blocks edited now one way now another,
// insertions after a replaced string, edits across a separator and of
// the model: every edited body is exactly ApplyEdits'.
func TestApplyOverStress(t *testing.T) {
	seed := parseCopy(t, fixtures.SeedHistory())
	var over int64
	for s := range 4 {
		rng := rand.New(rand.NewPCG(uint64(s), 99))
		p := NewReparser(16 << 20)
		n := 150
		var open []editCall
		for range 100 {
			switch rng.IntN(7) {
			case 0:
				n = max(120, n-rng.IntN(20))
			case 1, 2, 3:
				n = min(250, n+1+rng.IntN(3))
			}
			body := truncated(t, seed, n)
			if rng.IntN(5) == 0 {
				body = replaceAfter(body, rng.IntN(len(body)), `},{`, `}, {`)
			}
			if rng.IntN(6) == 0 { // a byte changed in place
				i := bytes.Index(body[len(body)/3:], []byte(`"content":"`))
				if k := len(body)/3 + i + 11; i >= 0 && body[k] != '"' && body[k] != '\\' {
					body[k] ^= 0x20
				}
			}
			var prev *Request
			if len(open) > 0 && rng.IntN(3) == 0 {
				prev = open[rng.IntN(len(open))].view
			}
			open = append(open, editAgainst(t, p, body, stressEdits(t, body, rng), prev))
			for len(open) > 0 && rng.IntN(3) > 0 {
				k := rng.IntN(len(open))
				open[k].end()
				open = append(open[:k], open[k+1:]...)
			}
		}
		for _, o := range open {
			o.end()
		}
		checkChainsGoDown(t, p.edited)
		over += p.edited.over.Load()
	}
	if over < 100 {
		t.Fatalf("%d of 400 edited bodies written over earlier ones: the test checked little", over)
	}
}

// stressEdits are TestApplyOverStress's edits of body, in no order.
func stressEdits(t *testing.T, body []byte, rng *rand.Rand) []Edit {
	r := parseCopy(t, body)
	var es []Edit
	variant := rng.IntN(3)
	for i, m := range r.Messages {
		if m.ReasoningStart >= 0 && m.ReasoningEnd-m.ReasoningStart > 300 && rng.IntN(10) > 0 {
			tag := shapedTag(i)
			switch {
			case variant == 1 && i%5 == 2:
				tag = strings.ToUpper(tag)
			case variant == 2 && i%3 == 0:
				tag += "!"
			}
			if variant == 0 || rng.IntN(20) > 0 { // as the shaper makes it (the edit carries its text), or as another transform may
				es = append(es, QuoteString(tag).Replace(m.ReasoningStart, m.ReasoningEnd))
			} else {
				es = append(es, Edit{Start: m.ReasoningStart, End: m.ReasoningEnd, Repl: quote(tag)})
			}
			if rng.IntN(6) == 0 { // an insertion just after the replaced string
				es = append(es, Edit{Start: m.ReasoningEnd, End: m.ReasoningEnd, Repl: []byte(" ")})
			}
		}
		if p := r.Messages[max(i-1, 0)]; i > 0 && rng.IntN(40) == 0 && body[p.End] == ',' && m.Start == p.End+1 {
			es = append(es, Edit{Start: p.End - 1, End: m.Start + 1, Repl: []byte("}, {")}) // across the separator
		}
	}
	if rng.IntN(3) == 0 { // the model
		i := bytes.Index(body, []byte(`"model":"`)) + 8
		j := bytes.IndexByte(body[i+1:], '"') + i + 2
		es = append(es, Edit{Start: i, End: j, Repl: quote([]string{"m1", "model-two"}[rng.IntN(2)])})
	}
	slices.SortStableFunc(es, byStart)
	out, end := es[:0], -1
	for _, e := range es { // no overlaps, one edit a place
		if e.Start < end || e.Start == end && len(out) > 0 && out[len(out)-1].Start == e.Start {
			continue
		}
		out, end = append(out, e), e.End
	}
	rng.Shuffle(len(out), func(i, j int) { out[i], out[j] = out[j], out[i] })
	return out
}

// TestApplyOverNotMuchLarger: a history cut far back does not take the
// long history's body, whose buffer is more than twice what it needs (the
// table counts a body back by its buffer, and would hold the long one's
// for a short one's).
func TestApplyOverNotMuchLarger(t *testing.T) {
	seed := parseCopy(t, fixtures.SeedHistory())
	p := NewReparser(32 << 20)
	long := truncated(t, seed, 400)
	first := editThrough(t, p, long, editsOf(t, long, shapedTag))
	first.end()
	// A history cut back less goes over it, the buffer larger than its
	// body: the table counts the buffer.
	cut := truncated(t, seed, 330)
	mid := editThrough(t, p, cut, editsOf(t, cut, shapedTag))
	if taken(p) != first.view.id || bigbuf.SizeOf(len(mid.out)) >= bigbuf.SizeOf(len(first.out)) {
		t.Fatalf("a body of %d bytes did not go over the long one's buffer, of another class (%d bytes)", len(mid.out), len(first.out))
	}
	mid.end()
	short := truncated(t, seed, 120)
	over := p.edited.over.Load()
	c := editThrough(t, p, short, editsOf(t, short, shapedTag))
	if len(first.out) <= 2*len(c.out) {
		t.Fatalf("edited bodies of %d and %d bytes: the test needs one more than twice the other", len(first.out), len(c.out))
	}
	if p.edited.over.Load() != over {
		t.Fatal("a short body went over a buffer more than twice its size")
	}
	c.end()
	p.edited.mu.Lock()
	defer p.edited.mu.Unlock()
	held := 0
	for _, k := range p.edited.free {
		held += cap(k.out)
	}
	if held > p.edited.bytes {
		t.Fatalf("the table counts %d bytes and holds buffers of %d", p.edited.bytes, held)
	}
}

// TestEditedBodyPoisonedAtRelease: an edited body that comes back to the
// table is, in a test binary, a copy: the buffer the call released is
// overwritten as any released buffer, so that a reader that kept it past
// its release still reads garbage.
func TestEditedBodyPoisonedAtRelease(t *testing.T) {
	seed := parseCopy(t, fixtures.SeedHistory())
	p := NewReparser(32 << 20)
	a := truncated(t, seed, 130)
	c := editThrough(t, p, a, editsOf(t, a, shapedTag))
	want := bytes.Clone(c.out)
	stale := c.out // a reader that forgot its hold
	c.end()
	if stale[0] != bigbuf.Poison || stale[len(stale)-1] != bigbuf.Poison {
		t.Fatalf("a released edited body not overwritten: starts %q", stale[:20])
	}
	p.edited.mu.Lock()
	defer p.edited.mu.Unlock()
	if len(p.edited.free) != 1 || !bytes.Equal(p.edited.free[0].out, want) {
		t.Fatal("the table does not hold the body's bytes")
	}
}

// TestEditedBodiesIdle: a body back that no request took within the
// table's idle time goes to bigbuf's free list, traffic or none.
func TestEditedBodiesIdle(t *testing.T) {
	seed := parseCopy(t, fixtures.SeedHistory())
	p := NewReparser(32 << 20)
	p.edited.idle = 20 * time.Millisecond
	for _, n := range []int{100, 130} { // two conversations' bodies, back one after the other
		body := bytes.Replace(truncated(t, seed, n), []byte("deepseek-reasoner"), fmt.Appendf(nil, "conversation-%04d", n), 1)
		editThrough(t, p, body, editsOf(t, body, shapedTag)).end()
	}
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		p.edited.mu.Lock()
		kept, held := len(p.edited.free), p.edited.bytes
		p.edited.mu.Unlock()
		if kept == 0 && held == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d bodies (%d bytes) still kept long after the idle time", kept, held)
		}
	}
}

// TestEditedBasesLetGo: once a request took a body of its conversation,
// the table keeps the latest few of its other earlier bodies (for the
// requests of the conversation sent at once) and lets the older go.
func TestEditedBasesLetGo(t *testing.T) {
	seed := parseCopy(t, fixtures.SeedHistory())
	p := NewReparser(32 << 20)
	var calls []editCall
	for n := 100; n < 107; n++ { // each read against the last, all held
		body := truncated(t, seed, n)
		calls = append(calls, editThrough(t, p, body, editsOf(t, body, shapedTag)))
	}
	for _, c := range calls[:6] {
		c.end()
	}
	next := truncated(t, seed, 107)
	c := editThrough(t, p, next, editsOf(t, next, shapedTag))
	p.edited.mu.Lock()
	kept := len(p.edited.free)
	p.edited.mu.Unlock()
	if taken(p) != calls[5].view.id || kept != spareBases {
		t.Fatalf("took view %d's body (want %d) and kept %d of the 5 others, want %d", taken(p), calls[5].view.id, kept, spareBases)
	}
	c.end()
	calls[6].end()
}

// TestEditedLinkAtParse: a request read against one that is still being
// edited (a conversation's requests sent at once) finds, through that
// one's link made at its parse, a body of their common base.
func TestEditedLinkAtParse(t *testing.T) {
	seed := parseCopy(t, fixtures.SeedHistory())
	p := NewReparser(32 << 20)
	root := editThrough(t, p, truncated(t, seed, 120), editsOf(t, truncated(t, seed, 120), shapedTag))
	root.end()
	// Parsed, not edited yet: its body not kept, only its link.
	mid := bigbuf.Make(len(truncated(t, seed, 120))) // the same request again
	copy(mid, truncated(t, seed, 120))
	if _, err := p.Parse(mid); err != nil {
		t.Fatal(err)
	}
	next := truncated(t, seed, 120) // and again
	c := editThrough(t, p, next, editsOf(t, next, shapedTag))
	p.edited.mu.Lock()
	lim := p.edited.tookLim
	p.edited.mu.Unlock()
	if taken(p) != root.view.id || lim == 0 {
		t.Fatalf("went over view %d's body sharing %d bytes, want the common base's (%d), sharing its messages", taken(p), lim, root.view.id)
	}
	c.end()
	bigbuf.Release(mid)
}

// TestReparserStats: what Stats counts is what happened — the requests
// read against an earlier one, the messages taken from it and parsed,
// the edited bodies written over an earlier one and made fresh.
func TestReparserStats(t *testing.T) {
	seed := parseCopy(t, fixtures.SeedHistory())
	p := NewReparser(32 << 20)
	a := truncated(t, seed, 120)
	first := editThrough(t, p, a, editsOf(t, a, shapedTag))
	if got := p.Stats(); got != (ReparseStats{New: 1, Parsed: 120, Fresh: 1, Written: int64(len(first.out))}) {
		t.Fatalf("after the first request: %+v", got)
	}
	room := cap(first.out)
	first.end() // its edited body is back, for the next request
	n := 120    // the next request: the longest that the body back holds
	for k := 121; k <= 125; k++ {
		if b := truncated(t, seed, k); len(ApplyEdits(b, editsOf(t, b, shapedTag))) <= room {
			n = k
		}
	}
	b := truncated(t, seed, n)
	second := editThrough(t, p, b, editsOf(t, b, shapedTag))
	defer second.end()
	// The first request's 120 messages parsed, the second's new ones; of
	// the second's edited bytes, the 120 messages the two share edited
	// alike were in place already (all of the first body but its end).
	got := p.Stats()
	if got.Kept+got.Written != int64(len(first.out)+len(second.out)) || got.Kept < int64(len(first.out))-64 || got.Kept >= int64(len(first.out)) {
		t.Fatalf("after the second request: %d bytes kept, %d written, of %d and %d edited", got.Kept, got.Written, len(first.out), len(second.out))
	}
	want := ReparseStats{New: 1, Repeated: 1, Reused: 120, Parsed: int64(n), WrittenOver: 1, Fresh: 1, Kept: got.Kept, Written: got.Written}
	if got != want {
		t.Fatalf("after the second request: %+v, want %+v", got, want)
	}
	if _, err := p.Parse([]byte(`{"model":"m","messages":[`)); err == nil {
		t.Fatal("a cut body parsed")
	}
	want.New++ // counted, with no message
	if got := p.Stats(); got != want {
		t.Fatalf("after a body that does not parse: %+v, want %+v", got, want)
	}
}

// TestReparserStatsNeverDown: read while requests are parsed, no count
// goes down — each is a counter of its own, as Prometheus needs (a
// difference of two read one after the other went down).
func TestReparserStatsNeverDown(t *testing.T) {
	seed := parseCopy(t, fixtures.SeedHistory())
	body := truncated(t, seed, 40)
	p := NewReparser(32 << 20)
	done := make(chan struct{})
	var wg sync.WaitGroup
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for k := 0; k < 300; k++ {
				if _, err := p.Parse(bytes.Clone(body)); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	go func() { wg.Wait(); close(done) }()
	var last ReparseStats
	for {
		s := p.Stats()
		if s.New < last.New || s.Repeated < last.Repeated || s.Reused < last.Reused || s.Parsed < last.Parsed {
			t.Fatalf("a count went down: %+v after %+v", s, last)
		}
		last = s
		select {
		case <-done:
			if s := p.Stats(); s.New+s.Repeated != 1200 {
				t.Fatalf("%+v: want 1200 requests in all", s)
			}
			return
		default:
		}
	}
}

// TestApplyOverKeyed: a request whose view has no base (its chain meets
// no other's) still writes over a body back in the table when the two
// views' keys show their first bytes the same — all of it for the same
// history, up to the first block that differs for another — and the
// result is exactly ApplyEdits'.
func TestApplyOverKeyed(t *testing.T) {
	seed := parseCopy(t, fixtures.SeedHistory())
	body := truncated(t, seed, 200)
	for _, c := range []struct {
		name  string
		other []byte
		whole bool
	}{
		{"the same history", bytes.Clone(body), true},
		{"a byte other in block 3", func() []byte { b := bytes.Clone(body); b[3*keyBlock+100] = ' '; return b }(), false},
	} {
		t.Run(c.name, func(t *testing.T) {
			p := NewReparser(32 << 20)
			keyed := func(body []byte, prev bool) editCall {
				b := bigbuf.Make(len(body))
				copy(b, body)
				var r *Request
				var err error
				if prev {
					r, err = p.ParseKeyed(b, keysOf(b))
				} else if r, err = parseKeyed(b, keysOf(b).keys, nil); err == nil { // no base
					r.edited, r.id = p.edited, viewIDs.Add(1)
				}
				if err != nil {
					t.Fatal(err)
				}
				edits := reasoningEdits(r, shapedTag)
				want := ApplyEdits(bytes.Clone(body), cloneEdits(edits))
				v, err := r.Apply(edits)
				if err != nil {
					t.Fatal(err)
				}
				if !bytes.Equal(v.Body, want) {
					t.Fatal("edited body differs from ApplyEdits")
				}
				return editCall{body: b, out: v.Body, view: r, edited: v}
			}
			first := keyed(body, true)
			first.end() // its edited body back in the table
			// Only a body back holds its view's keys: the links of views
			// parsed and never edited (up to maxKept) hold none.
			unedited, err := p.ParseKeyed(append(bytes.Clone(body), ' '), keysOf(body))
			if err != nil {
				t.Fatal(err)
			}
			p.edited.mu.Lock()
			linkKeys, backKeys := p.edited.byID[unedited.id].keys, p.edited.byID[first.view.id].keys
			p.edited.mu.Unlock()
			if linkKeys != nil || backKeys == nil {
				t.Fatalf("a link holds %d keys, a body back %d", len(linkKeys), len(backKeys))
			}
			kept := p.edited.kept.Load()
			next := keyed(c.other, false)
			defer next.end()
			if next.view.base != 0 {
				t.Fatal("the second view has a base")
			}
			if taken(p) != first.view.id {
				t.Fatalf("went over view %d's body, want %d's", taken(p), first.view.id)
			}
			// What is kept: the edited body up to where the client bodies'
			// keys stop agreeing (an edit across that point cut before it).
			lim := len(body) / keyBlock * keyBlock
			if !c.whole {
				lim = 3 * keyBlock
			}
			want := lim
			for _, e := range reasoningEdits(next.view, shapedTag) {
				switch {
				case e.End <= lim:
					want += len(e.Repl) - (e.End - e.Start)
				case e.Start < lim:
					want -= lim - e.Start
				}
			}
			if n := p.edited.kept.Load() - kept; n != int64(want) {
				t.Fatalf("%d bytes kept of %d, want %d", n, len(next.out), want)
			}
		})
	}
}

// checkChainsGoDown fails unless each chain the table knows goes down
// from its view's id, nearest base first, as shared's walk needs.
func checkChainsGoDown(t *testing.T, e *editedBodies) {
	t.Helper()
	e.mu.Lock()
	defer e.mu.Unlock()
	chains := 0
	for id, k := range e.byID {
		last := id
		for _, l := range k.chain {
			if l.id >= last {
				t.Fatalf("view %d's chain %v does not go down", id, k.chain)
			}
			last = l.id
		}
		if len(k.chain) > 1 {
			chains++
		}
	}
	if chains == 0 {
		t.Fatal("no chain of two bases or more to check")
	}
}

// TestSharedWalk: shared's one walk down two chains finds what looking
// up each base of one chain in the other finds.
func TestSharedWalk(t *testing.T) {
	slow := func(chain []link, k *keptBody) int {
		for _, l := range chain {
			if l.id == k.id {
				return l.lim
			}
		}
		for _, m := range k.chain {
			for _, l := range chain {
				if l.id == m.id {
					return min(l.lim, m.lim)
				}
			}
		}
		return 0
	}
	rng := rand.New(rand.NewPCG(5, 6))
	down := func(from uint64, n int) []link { // ids going down, some skipped
		var c []link
		for id := from - 1; id > 0 && len(c) < n; id-- {
			if rng.IntN(3) > 0 {
				c = append(c, link{id, 1 + rng.IntN(1<<20)})
			}
		}
		return c
	}
	found := 0
	for range 20000 {
		k := &keptBody{id: 1 + uint64(rng.IntN(40))}
		k.chain = down(k.id, rng.IntN(maxChain+1))
		chain := down(1+uint64(rng.IntN(40)), rng.IntN(maxChain+1))
		want := slow(chain, k)
		if got := shared(chain, k); got != want {
			t.Fatalf("chain %v, k %d with %v: %d, want %d", chain, k.id, k.chain, got, want)
		}
		if want > 0 {
			found++
		}
	}
	if found < 5000 {
		t.Fatalf("only %d of the random chains met", found)
	}
}

// TestApplyDerivesOverHead: the view Apply makes of a body written over
// an earlier one takes the earlier view's message array, its messages
// before where the two bodies agree not derived again — only when that
// view holds no string of a body (its request's strings its own, every
// edit's text given) — and reads as ParseRequest reads the body
// (editThrough checks every view).
func TestApplyDerivesOverHead(t *testing.T) {
	seed := parseCopy(t, fixtures.SeedHistory())
	plain := func(body []byte) []Edit { // edits without their texts, as a transform may make them
		es := editsOf(t, body, shapedTag)
		for i := range es {
			es[i] = Edit{Start: es[i].Start, End: es[i].End, Repl: es[i].Repl}
		}
		return es
	}
	known := func(body []byte) []Edit { return editsOf(t, body, shapedTag) }
	for _, c := range []struct {
		name   string
		n      int // messages of the first request
		edits  func([]byte) []Edit
		shared bool
	}{
		{"a long history, the shaper's edits", 100, known, true},
		{"edits without their texts", 100, plain, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			p := NewReparser(32 << 20)
			var last editCall
			for k := range 4 {
				body := truncated(t, seed, c.n+2*k)
				call := editThrough(t, p, body, c.edits(body))
				if k > 0 {
					same := unsafe.SliceData(call.edited.Messages) == unsafe.SliceData(last.edited.Messages)
					if same != c.shared {
						t.Fatalf("request %d: the earlier view's array taken %v, want %v", k, same, c.shared)
					}
				}
				call.end()
				last = call
			}
		})
	}
	// The earlier body's view is the head only as far as the two agree:
	// the same history with one reasoning shaped otherwise in the middle.
	p := NewReparser(32 << 20)
	body := truncated(t, seed, 120)
	es := editsOf(t, body, shapedTag)
	editThrough(t, p, body, es).end()
	mid := len(es) / 2
	es2 := cloneEdits(es)
	es2[mid] = QuoteString("shaped otherwise").Replace(es[mid].Start, es[mid].End)
	c := editThrough(t, p, body, es2) // its view checked against ParseRequest's
	if c.edited.Messages[len(c.edited.Messages)-1].Index != len(c.edited.Messages)-1 {
		t.Fatal("the view's last message is not its own")
	}
	c.end()
}

// TestApplyHeadNotTooLarge: a request of few messages whose edited body
// goes over a long history's (its bytes near the long one's: one long
// message) takes its first messages but not its array, whose room the
// view would hold.
func TestApplyHeadNotTooLarge(t *testing.T) {
	seed := parseCopy(t, fixtures.SeedHistory())
	p := NewReparser(32 << 20)
	long := truncated(t, seed, 300)
	first := editThrough(t, p, long, editsOf(t, long, shapedTag))
	first.end()
	short := truncated(t, seed, 40)
	cut := bytes.LastIndex(short, []byte(`],"tools"`))
	pad := len(first.out)*3/4 - len(short)
	body := append(append(bytes.Clone(short[:cut]), fmt.Sprintf(`,{"role":"user","content":%q}`, strings.Repeat("p", pad))...), short[cut:]...)
	c := editThrough(t, p, body, editsOf(t, body, shapedTag)) // checked against ParseRequest's view
	if taken(p) != first.view.id {
		t.Fatal("the short request did not go over the long one's body")
	}
	if n := len(c.edited.Messages); cap(c.edited.Messages) > 2*n+16 {
		t.Fatalf("a view of %d messages holds room for %d", n, cap(c.edited.Messages))
	}
	c.end()
}

// lineages checks views' Lineage against copies of the bodies it names:
// each body numbered once, and its first same bytes its base's (as that
// base was when its view was made: a later body may be written over
// it). edited counts the edited views found to repeat an earlier one.
type lineages struct {
	bodies map[uint64][]byte
	edited int
}

func (l *lineages) check(t *testing.T, v *Request) {
	t.Helper()
	if l.bodies == nil {
		l.bodies = map[uint64][]byte{}
	}
	body, base, same := v.Lineage()
	if body == 0 {
		t.Fatal("a view Apply or a Reparser made has no number (Lineage)")
	}
	if _, dup := l.bodies[body]; dup {
		t.Fatalf("body number %d given twice", body)
	}
	if old, ok := l.bodies[base]; ok && base != 0 {
		if same > len(old) || same > len(v.Body) || !bytes.Equal(old[:same], v.Body[:same]) {
			t.Fatalf("body %d repeats %d first bytes of body %d (%d bytes), which differ", body, same, base, len(old))
		}
		if v.id == 0 && same > 0 {
			l.edited++
		}
	}
	l.bodies[body] = bytes.Clone(v.Body)
}

// TestApplyLaterOwnsEdits: the view ApplyLater leaves to make is the one
// Apply makes at once, even when the caller's edits were overwritten in
// between (the shaper gives its array back to a pool before the proxy
// asks for the view).
func TestApplyLaterOwnsEdits(t *testing.T) {
	seed := fixtures.SeedHistory()
	edits := editsOf(t, seed, shapedTag)
	want, err := parseCopy(t, seed).Apply(cloneEdits(edits))
	if err != nil {
		t.Fatal(err)
	}
	mine := cloneEdits(edits)
	a := parseCopy(t, seed).ApplyLater(mine)
	other := cloneEdits(mine)
	for i := range mine { // the caller's array, reused for another request's edits
		j := (i + 1) % len(other)
		mine[i].Repl, mine[i].text, mine[i].known = other[j].Repl, other[j].text, other[j].known
	}
	got, err := a.View()
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(a.Body, want.Body) {
		t.Fatal("the edited bodies differ")
	}
	sameView(t, got, want)
}

// TestAgreedSameToken: where a kept body holds the very String's token the
// new edit puts at the same place, the two agree without a look at the
// bytes (a long history's shaped blocks, the memo's tokens, are hundreds
// of kilobytes of cold memory); another String of the same text, or an
// edit of plain bytes, is compared.
func TestAgreedSameToken(t *testing.T) {
	body := []byte(`{"messages":[{"role":"assistant","reasoning_content":"a long reasoning block","content":"x"}]}`)
	start := bytes.Index(body, []byte(`"a long`))
	end := start + len(`"a long reasoning block"`)
	tok := QuoteString("short")
	edit := tok.Replace(start, end)
	old := ApplyEdits(body, []Edit{edit})
	kept := []keptEdit{keptEditOf(&edit)}
	copy(old[start+1:], "SHORT") // what a look at the bytes would find: not the token
	for _, c := range []struct {
		name  string
		edit  Edit
		agree bool
	}{
		{"the same token", tok.Replace(start, end), true},
		{"another String of the same text", QuoteString("short").Replace(start, end), false},
		{"plain bytes", Edit{Start: start, End: end, Repl: []byte(`"short"`)}, false},
	} {
		q, w, j := agreed(old, kept, body, len(body), []Edit{c.edit})
		if got := q == len(body) && w == len(old) && j == 1; got != c.agree {
			t.Errorf("%s: agreed up to %d (%d in the kept body, edit %d), want agreeing: %v", c.name, q, w, j, c.agree)
		}
		if !c.agree && (q != start || w != start) {
			t.Errorf("%s: agreed up to %d/%d, want %d (the edit's start)", c.name, q, w, start)
		}
	}
	copy(old[start+1:], "short") // the bytes as written: compared, they agree
	if q, _, _ := agreed(old, kept, body, len(body), []Edit{{Start: start, End: end, Repl: []byte(`"short"`)}}); q != len(body) {
		t.Errorf("plain bytes the same as the kept body's: agreed up to %d, want %d", q, len(body))
	}
}
