package reqshape

import (
	"bytes"
	"reflect"
	"runtime"
	"strings"
	"testing"

	"github.com/shaperproxy/shaperproxy/conv"
	"github.com/shaperproxy/shaperproxy/fixtures"
	"github.com/shaperproxy/shaperproxy/internal/bigbuf"
	"github.com/tidwall/gjson"
	"github.com/tidwall/sjson"
)

// seedCase is the seed's real case in size: 631 messages, ~856k chars.
func seedCase() []byte { return fixtures.SeedHistory() }

func TestSeedCaseShape(t *testing.T) {
	body := seedCase()
	v := view(t, body)
	chars := 0
	for _, m := range v.Messages {
		chars += len([]rune(m.Content)) + len([]rune(m.Reasoning))
	}
	if len(v.Messages) != 631 || chars < 800_000 || chars > 920_000 {
		t.Fatalf("seed case has %d messages and %d characters", len(v.Messages), chars)
	}
	res := apply(v, shapeRule{})
	if res.Shaped < 180 {
		t.Fatalf("shaped %d blocks", res.Shaped)
	}
	memo := newMemo(4096)
	for i := 0; i < 2; i++ {
		if got := applyMemo(v, shapeRule{}, memo); !bytes.Equal(got.Body, res.Body) {
			t.Fatalf("memo run %d differs from a plain run", i)
		}
	}
	if hits, _ := memo.Stats(); hits < uint64(res.Shaped) {
		t.Fatalf("second run hit the memo %d times", hits)
	}
}

// BenchmarkSeedCase shapes the seed's 631-message, 856k-character request
// from scratch (target: ≤ 5 ms on one core).
func BenchmarkSeedCase(b *testing.B) {
	body := seedCase()
	v := view(b, body)
	b.SetBytes(int64(len(body)))
	b.ResetTimer()
	for b.Loop() {
		apply(v, shapeRule{})
	}
}

// BenchmarkSeedCaseWarm is the common case: the history was shaped by the
// previous request and the memo answers (parse included).
func BenchmarkSeedCaseWarm(b *testing.B) {
	body := seedCase()
	memo := newMemo(4096)
	applyMemo(view(b, body), shapeRule{}, memo)
	b.SetBytes(int64(len(body)))
	b.ResetTimer()
	for b.Loop() {
		applyMemo(view(b, body), shapeRule{}, memo)
	}
}

// BenchmarkParseOnly is the floor: the conversation model's parse that
// every chat request pays anyway.
func BenchmarkParseOnly(b *testing.B) {
	body := seedCase()
	b.SetBytes(int64(len(body)))
	for b.Loop() {
		view(b, body)
	}
}

// BenchmarkSeedShapeWarm is a conversation's repeated request as the
// proxy's shaper sees it: the view made once, the memos warm, the
// cache-aware policy on DeepSeek V4 with the previous request's prints —
// the shaper's own cost a request, parse aside — without the carry.
func BenchmarkSeedShapeWarm(b *testing.B) { benchSeedShape(b, false) }

// BenchmarkSeedShapeCarried is BenchmarkSeedShapeWarm as the hook runs
// it: each request takes the carry of the one before (carry.go), the
// shaper's cost a request when the history comes again at its places.
func BenchmarkSeedShapeCarried(b *testing.B) { benchSeedShape(b, true) }

func benchSeedShape(b *testing.B, carried bool) {
	v := view(b, seedCase())
	memo := newMemo(4096)
	in := inputs{prof: prof("deepseek-v4"), track: true, carry: carried}
	first := shape(v, cacheAwareRule(), memo, in)
	in.prev, in.from = first.Prints, first.Carry
	b.SetBytes(int64(len(v.Body)))
	b.ResetTimer()
	for b.Loop() {
		res := shape(v, cacheAwareRule(), memo, in)
		if res.View == nil || res.Shaped == 0 {
			b.Fatal("the seed's request was not shaped")
		}
		in.from.release()
		in.from = res.Carry // nil without the carry
		res.View.Recycle()  // as the proxy gives a call's views and bodies back
		bigbuf.Release(res.Body)
		putBlocks(res.Blocks)
	}
	in.from.release()
}

// TestPooledArraysIndependent: a request shaped right after a long one
// (whose candidates, edits, blocks and print parts went back to the
// pools) gives what it gives with the pools emptied by collections, and
// so does the long one after a short one.
func TestPooledArraysIndependent(t *testing.T) {
	long := view(t, seedCase())
	short := view(t, []byte(`{"model":"m","messages":[{"role":"user","content":"q"},{"role":"assistant","reasoning_content":"Okay, so the user wants a number. I think the answer is 42 because the spec says so and nothing else fits. Let me double-check the spec once more to be sure about it. Yes, 42.","content":"42"},{"role":"user","content":"why?"}]}`))
	memo := newMemo(4096)
	in := inputs{prof: prof("deepseek-v4"), track: true}
	run := func(v *conv.Request) (string, []block, prints) {
		res := shape(v, cacheAwareRule(), memo, in)
		blocks := append([]block(nil), res.Blocks...)
		putBlocks(res.Blocks)
		return string(res.Body), blocks, res.Prints
	}
	for _, order := range [][2]*conv.Request{{long, short}, {short, long}} {
		run(order[0])
		body, blocks, prints := run(order[1])
		runtime.GC()
		runtime.GC() // the pools are empty after two
		wbody, wblocks, wprints := run(order[1])
		if body != wbody || !reflect.DeepEqual(blocks, wblocks) || !reflect.DeepEqual(prints, wprints) {
			t.Fatalf("a request shaped after another (%d messages) differs from one shaped with empty pools", len(order[0].Messages))
		}
		if len(blocks) == 0 {
			t.Fatal("no blocks")
		}
	}
}

// BenchmarkSeedShapeGrowing is an agent's tool loop as the shaper sees
// it: each request the one before with the next two messages of the
// seed's history (its last 130 messages added two at a time, then from
// the start again), the memos warm, the cache-aware policy on DeepSeek V4
// with the previous request's prints; "carried" takes the carry of the
// request before (what follows from the messages' bytes, and how its
// blocks were decided: settled.go), "anew" decides every block again.
func BenchmarkSeedShapeGrowing(b *testing.B) {
	seed := seedCase()
	msgs := gjson.GetBytes(seed, "messages").Array()
	var views []*conv.Request
	for n := len(msgs) - 130; n <= len(msgs); n += 2 {
		raw := make([]string, n)
		for i := range raw {
			raw[i] = msgs[i].Raw
		}
		body, err := sjson.SetRawBytes(seed, "messages", []byte("["+strings.Join(raw, ",")+"]"))
		if err != nil {
			b.Fatal(err)
		}
		views = append(views, view(b, body))
	}
	p := prof("deepseek-v4")
	for _, carried := range []bool{true, false} {
		name := map[bool]string{true: "carried", false: "anew"}[carried]
		b.Run(name, func(b *testing.B) {
			memo := newMemo(4096)
			var in inputs
			for i := 0; b.Loop(); i++ {
				v := views[i%len(views)]
				in = inputs{prof: p, track: true, carry: carried, prev: in.prev, from: in.from}
				res := shape(v, cacheAwareRule(), memo, in)
				if res.Shaped == 0 {
					b.Fatal("nothing shaped")
				}
				in.from.release()
				in.from, in.prev = res.Carry, res.Prints
				res.View.Recycle() // as the proxy gives a call's views and bodies back
				bigbuf.Release(res.Body)
				putBlocks(res.Blocks)
			}
			in.from.release()
		})
	}
}
