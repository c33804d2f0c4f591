package reqshape

import (
	"bytes"
	"context"
	"fmt"
	"maps"
	"math/rand/v2"
	"reflect"
	"slices"
	"sync"
	"testing"
	"unsafe"

	"github.com/shaperproxy/shaperproxy/conv"
	"github.com/shaperproxy/shaperproxy/fixtures"
	"github.com/shaperproxy/shaperproxy/internal/profile"
	"github.com/shaperproxy/shaperproxy/shaping"
	"github.com/tidwall/gjson"
	"github.com/tidwall/sjson"
)

// carrySequence is one conversation's requests: a history growing a step
// at a time and sent again as it is, then everything that changes what a
// message's place holds or how it goes out — a new user turn, a message
// edited in the middle, a new system prompt, a message taken out (every
// later one moves up a place), signed reasoning appended (shaping stops
// before it), an assistant prefill, an inline <think> block, first as
// a prefill, then as history, and the tools taken out and put back.
func carrySequence(t *testing.T) [][]byte {
	t.Helper()
	h := func(n int) []byte { return fixtures.AgentHistory(n, 700, 200) }
	set := func(body []byte, path string, raw string) []byte {
		out, err := sjson.SetRawBytes(body, path, []byte(raw))
		if err != nil {
			t.Fatal(err)
		}
		return bytes.Clone(out)
	}
	del := func(body []byte, path string) []byte {
		out, err := sjson.DeleteBytes(body, path)
		if err != nil {
			t.Fatal(err)
		}
		return bytes.Clone(out)
	}
	step := func(tag string) string {
		return fmt.Sprintf(`{"role":"assistant","content":"","reasoning_content":%q,"tool_calls":[{"id":"x_%s","type":"function","function":{"name":"bash","arguments":"{}"}}]}`, longThought(tag, 12), tag)
	}
	result := func(tag string) string {
		return fmt.Sprintf(`{"role":"tool","tool_call_id":"x_%s","content":"done %s"}`, tag, tag)
	}
	var seq [][]byte
	for _, n := range []int{24, 25, 27, 27, 30} {
		seq = append(seq, h(n))
	}
	b := set(h(30), "messages.-1", `{"role":"user","content":"now the other test"}`)
	seq = append(seq, b)
	b = set(set(b, "messages.-1", step("u2")), "messages.-1", result("u2"))
	seq = append(seq, b, b)
	b = set(b, "messages.10.content", `"an edited tool result"`)
	seq = append(seq, b)
	b = set(b, "messages.0.content", `"You are a careful coding agent."`)
	seq = append(seq, b)
	b = del(b, "messages.5")
	seq = append(seq, b)
	signed := `{"role":"assistant","content":"","reasoning_content":"signed step","reasoning_details":[{"type":"reasoning.encrypted","data":"abc"}],"tool_calls":[{"id":"x_s","type":"function","function":{"name":"bash","arguments":"{}"}}]}`
	b = set(set(b, "messages.-1", signed), "messages.-1", result("s"))
	seq = append(seq, b)
	b = set(set(b, "messages.-1", step("after")), "messages.-1", result("after"))
	seq = append(seq, b)
	prefill := set(b, "messages.-1", step("prefill"))
	seq = append(seq, prefill, b)
	think := fmt.Sprintf(`{"role":"assistant","content":%q}`, "<think>"+longThought("inline", 10)+"</think>The answer.")
	b = set(b, "messages.-1", think) // a prefill first: its block is not history yet
	seq = append(seq, b)
	b = set(set(b, "messages.-1", step("t2")), "messages.-1", result("t2"))
	seq = append(seq, b, b)
	b = set(b, "messages.-1", `{"role":"user","content":"and then?"}`)
	seq = append(seq, b, b)
	// A step without tool calls, rendered and not the last: the drop
	// operation cuts its field only while the request declares no tools.
	plain := fmt.Sprintf(`{"role":"assistant","content":"A","reasoning_content":%q}`, longThought("plain", 12))
	b = set(set(set(b, "messages.-1", plain), "messages.-1", step("p2")), "messages.-1", result("p2"))
	seq = append(seq, b, del(b, "tools"), b, del(b, "tools"))
	seq = append(seq, set(del(b, "tools"), "messages.-1", `{"role":"user","content":"more"}`))
	return seq
}

// TestCarryChangesNothing: a conversation's requests shaped with the carry
// of the request before give exactly what they give without one — the
// body, every block and why it went out so, the prints, the blocks shaped
// at a break and where the prompt broke — under each policy, on profiles
// that render differently, with the rule changed midway; and the carry
// is taken (the memo is asked less), its decisions too where the policy
// lets them be (settled.go).
func TestCarryChangesNothing(t *testing.T) {
	seq := carrySequence(t)
	keep := shapeRule{Shaping: shaping.Options{MaxChars: 80}, KeepRecent: 2}
	free := shapeRule{Shaping: shaping.Options{MaxChars: 80}, Policy: PolicyFreeOnly}
	wide := shapeRule{Shaping: shaping.Options{MaxChars: 120}, Policy: PolicyCacheAware}
	thinkRule := cacheAwareRule()
	thinkRule.ThinkTags = true
	drop := cacheAwareRule()
	drop.Shaping.Op = shaping.OpDrop
	recent := shapeRule{Shaping: shaping.Options{MaxChars: 80}, KeepRecent: 2, Policy: PolicyKeepRecent}
	for _, pname := range []string{"deepseek-v4", "dashscope", "qwen3", "glm-4.7", "unknown"} {
		for _, rules := range [][]shapeRule{{cacheAwareRule()}, {keep}, {recent}, {free}, {thinkRule}, {drop}, {cacheAwareRule(), wide, cacheAwareRule()}} {
			name := fmt.Sprintf("%s/%s/%s/%d", pname, rules[0].Policy, rules[0].Shaping.Op, len(rules))
			t.Run(name, func(t *testing.T) {
				settled, memoWith, memoWithout := shapeBothWays(t, seq, rules, prof(pname))
				// The decisions are taken where they can be: not under
				// keep-recent, nor with <think> blocks shaped (keep's
				// policy is unset, which shape takes as decided by the
				// profile).
				if can := rules[0].Policy != PolicyKeepRecent && !rules[0].ThinkTags; can != (settled > 0) {
					t.Fatalf("%d messages took their blocks as decided", settled)
				}
				if memoWith >= memoWithout || memoWithout == 0 {
					t.Fatalf("the memo was asked %d times with the carry, %d without: the carry was not taken", memoWith, memoWithout)
				}
			})
		}
	}
}

// shapeBooked is shape, which also fails when what the Shaper books of
// the request's blocks (Shaper.book: their counts by reason and the
// originals to queue), reading those taken as decided in the carry they
// came from, differs from the same made of the blocks made whole.
func shapeBooked(t *testing.T, req *conv.Request, rule shapeRule, memo *memo, in inputs) result {
	t.Helper()
	res := shapeLater(req, rule, memo, in)
	if res.Applied != nil {
		res.View, _ = res.Applied.View()
	}
	pre := res.Later.settledCands()
	if len(pre) > 0 && res.Later.request() != req {
		t.Fatal("the carry to be made is not the request's")
	}
	counts, other := reasonCounts(pre, res.Blocks)
	originals := entries(req, pre, res.Blocks, res.Shaped, 0, "c", 1)
	res.Blocks = res.Later.fill(res.Blocks)
	wantCounts, wantOther := reasonCounts(nil, res.Blocks)
	if counts != wantCounts || !slices.Equal(other, wantOther) {
		t.Fatalf("the blocks counted in place: %v %v; made whole: %v %v", counts, other, wantCounts, wantOther)
	}
	if want := entries(req, nil, res.Blocks, res.Shaped, 0, "c", 1); !reflect.DeepEqual(originals, want) {
		t.Fatalf("the originals queued of the blocks in place:\n%+v\nmade whole:\n%+v", originals, want)
	}
	res.Carry, res.Later = res.Later.carry(), nil
	return res
}

// shapeBothWays shapes seq as one conversation twice, with each request
// taking the carry of the one before and without, rules spread over it
// in order, under profile p (resolved once, as the Shaper resolves a
// route's), and fails when a request's body, blocks or result differ. It
// returns how many messages took their blocks as decided, and how often
// each run asked its memo.
//
// With stale (staleFrom, stalePrints or both), every third request takes
// the carry of the request before the last, as one read against that
// request's view does (carries.get), or reads that request's prints, as
// one does when a request of its conversation sent meanwhile was recorded
// after the one it repeats, or both.
func shapeBothWays(t *testing.T, seq [][]byte, rules []shapeRule, p *profile.Profile, stale ...int) (settled int, memoWith, memoWithout uint64) {
	t.Helper()
	type run struct {
		memo            *memo
		from, olderFrom *carry
		prev, older     prints
		batched         map[blockKey]bool
	}
	with, without := &run{memo: newMemo(4096)}, &run{memo: newMemo(4096)}
	// Every request's prints, as made: the arrays are shared along the
	// conversation (prints.extend), and no later request may change them.
	type made struct{ p, values prints }
	var all []made
	defer func() {
		for i, m := range all {
			if !samePrints(m.p, m.values) {
				t.Fatalf("request %d's prints changed after it was made", i)
			}
		}
	}()
	for i, body := range seq {
		rule := rules[i*len(rules)/len(seq)]
		var got [2]result
		var blocks [2][]block
		for k, r := range []*run{with, without} {
			in := inputs{prof: p, track: true, prev: r.prev, batched: r.batched, carry: r == with, from: r.from}
			if len(stale) > 0 && i%3 == 2 {
				if stale[0]&stalePrints != 0 {
					in.prev = r.older
				}
				if stale[0]&staleFrom != 0 && r.olderFrom != nil {
					in.from = r.olderFrom
				}
			}
			res := shapeBooked(t, view(t, body), rule, r.memo, in)
			r.olderFrom.release()
			r.olderFrom, r.from = r.from, res.Carry
			r.older, r.prev = r.prev, res.Prints
			all = append(all, made{res.Prints, prints{head: res.Prints.head, msgs: slices.Clone(res.Prints.msgs)}})
			if len(res.Batched) > 0 {
				r.batched = maps.Clone(r.batched)
				if r.batched == nil {
					r.batched = map[blockKey]bool{}
				}
				for _, b := range res.Batched {
					r.batched[b] = true
				}
			}
			blocks[k] = append([]block(nil), res.Blocks...)
			putBlocks(res.Blocks)
			if r == with {
				settled += res.Settled
			}
			res.Blocks, res.View, res.Applied, res.Carry, res.Settled = nil, nil, nil, nil, 0
			got[k] = res
		}
		if !bytes.Equal(got[0].Body, got[1].Body) {
			t.Fatalf("request %d: the body differs with the carry", i)
		}
		if !reflect.DeepEqual(blocks[0], blocks[1]) {
			t.Fatalf("request %d: the blocks differ with the carry:\n%+v\n%+v", i, blocks[0], blocks[1])
		}
		if !samePrints(got[0].Prints, got[1].Prints) {
			t.Fatalf("request %d: the prints differ with the carry", i)
		}
		got[0].Body, got[1].Body = nil, nil
		got[0].Prints, got[1].Prints = prints{}, prints{} // compared: their arrays' bookkeeping differs
		if !reflect.DeepEqual(got[0], got[1]) {
			t.Fatalf("request %d: the result differs with the carry:\n%+v\n%+v", i, got[0], got[1])
		}
	}
	with.from.release()
	with.olderFrom.release()
	wh, wm := with.memo.Stats()
	oh, om := without.memo.Stats()
	return settled, uint64(wh + wm), uint64(oh + om)
}

// TestCarryOnlySameBytes: a carry is taken for a message only with the
// same bytes at the same place, never for a view whose messages carry no
// key (made by hand), and not at all under another rule.
func TestCarryOnlySameBytes(t *testing.T) {
	a := view(t, fixtures.AgentHistory(12, 700, 200))
	c := carryOf(a, cacheAwareRule(), candsOf(a, cacheAwareRule(), newMemo(64)), nil, prints{}, profile.Rendering{}, nil, 0)
	defer c.release()
	b := view(t, bytes.Replace(a.Body, []byte(`"call_1"`), []byte(`"call_9"`), 1)) // message 3 (the call) and 4 (its result) differ
	for i := range b.Messages {
		pc := c.at(i, &b.Messages[i])
		differs := gjson.Get(string(b.Body), fmt.Sprintf("messages.%d", i)).Raw != gjson.Get(string(a.Body), fmt.Sprintf("messages.%d", i)).Raw
		if (pc == nil) != differs {
			t.Fatalf("message %d: carried %v, differs %v", i, pc != nil, differs)
		}
	}
	byHand := &carry{msgs: make([]carried, 1)} // a carry of a view made by hand: no keys
	if byHand.at(0, &conv.Message{Role: "assistant"}) != nil {
		t.Fatal("a message without a key was taken from the carry")
	}
	memo := newMemo(64)
	other := cacheAwareRule()
	other.Shaping.MaxChars = 200
	in := inputs{prof: prof("deepseek-v4"), track: true, from: c, carry: true}
	res := shape(a, other, memo, in)
	defer res.Carry.release()
	putBlocks(res.Blocks)
	if h, m := memo.Stats(); h+m == 0 {
		t.Fatal("a carry made under another rule was taken")
	}
}

// TestShaperCarries: through the hook, a conversation's repeated request
// takes its history from the carry (the memo is not asked), and the
// carries stay within their bound.
func TestShaperCarries(t *testing.T) {
	s := NewShaper(DefaultConfig(), Options{Profiles: profile.NewTable(nil, map[string]string{"ds": "https://api.deepseek.com"})})
	s.carries = newCarries(100)
	body := fixtures.AgentHistory(40, 700, 200)
	send := func(conversation string, body []byte) []byte {
		c := call(t, body, conversation)
		out, err := s.TransformRequest(context.Background(), c, body)
		if err != nil {
			t.Fatal(err)
		}
		c.RunBeside() // as the proxy runs it once the request went upstream
		c.RunAfter()  // and once the client has the answer
		return out
	}
	// The carry is made once the client has the answer, not before.
	if before, beside, after := carryMade(t, s, body, "c0"); before || beside || !after {
		t.Fatalf("a carry before the request went upstream: %v, beside its trip: %v, after its answer: %v", before, beside, after)
	}
	first := send("c1", body)
	h0, m0 := s.memo.Stats()
	if again := send("c1", body); !bytes.Equal(again, first) {
		t.Fatal("the repeated request went out otherwise")
	}
	if h, m := s.memo.Stats(); h != h0 || m != m0 {
		t.Fatalf("the repeated request asked the memo %d times", h+m-h0-m0)
	}
	for i := range 5 {
		send(fmt.Sprintf("other %d", i), body)
	}
	s.carries.mu.Lock()
	if s.carries.msgs > 100 || len(s.carries.by) > 2 {
		t.Fatalf("the carries hold %d messages of %d conversations, bound 100", s.carries.msgs, len(s.carries.by))
	}
	s.carries.mu.Unlock()
	// A request too long to carry leaves its conversation none: not the
	// carry of an earlier request of it; a short one makes none.
	send("other 4", fixtures.AgentHistory(120, 700, 200))
	send("short", fixtures.AgentHistory(15, 700, 200)) // under minCarried
	s.carries.mu.Lock()
	defer s.carries.mu.Unlock()
	if c := s.carries.by["other 4"][0]; c != nil {
		t.Fatalf("a conversation whose request was too long to carry kept a carry of %d messages", len(c.msgs))
	}
	if c := s.carries.by["short"][0]; c != nil {
		t.Fatalf("a request of %d messages made a carry", len(c.msgs))
	}
}

// TestCarryOwnsItsTexts: a carry outlives its request's body (a buffer the
// next request may be read into), so none of its texts may be the body's
// memory — also where shaping keeps a single sentence, which it returns as
// a slice of the text it was given.
func TestCarryOwnsItsTexts(t *testing.T) {
	const kept = "Hmm, wait. The fix is to stream the body through a bounded buffer and nothing else at all here."
	if out, _ := shaping.Shape(kept, shaping.Options{MaxChars: 80}); !within(out, kept) {
		t.Fatal("shaping no longer returns a slice of its text here: the test checks nothing")
	}
	for _, memo := range []*memo{newMemo(64), nil} {
		v := view(t, history(kept, kept+" Two.", "A last step."))
		res := shape(v, shapeRule{Shaping: shaping.Options{MaxChars: 80}}, memo, inputs{carry: true})
		putBlocks(res.Blocks)
		shaped := 0
		for i, e := range res.Carry.msgs {
			if e.shaped == nil {
				continue
			}
			if within(e.shaped.out, unsafe.String(unsafe.SliceData(v.Body), len(v.Body))) {
				t.Fatalf("message %d: the carried text is the body's memory", i)
			}
			if e.shaped.changed {
				shaped++
			}
		}
		if memo != nil && shaped != 2 || memo == nil && shaped != 0 { // without a memo, nothing is carried
			t.Fatalf("the carry holds %d shaped texts (memo %v)", shaped, memo != nil)
		}
		res.Carry.release()
	}
}

// within reports whether s is a slice of the memory of text.
func within(s, text string) bool {
	if s == "" || text == "" {
		return false
	}
	p, o := uintptr(unsafe.Pointer(unsafe.StringData(s))), uintptr(unsafe.Pointer(unsafe.StringData(text)))
	return p >= o && p < o+uintptr(len(text))
}

// TestShaperCarriesConcurrent: requests of one conversation shaped at
// once, each taking the carry another just put (under -race in CI), go out
// as each goes out alone.
func TestShaperCarriesConcurrent(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Policy = PolicyKeepRecent // each body's result its own: no history decides
	profiles := profile.NewTable(nil, map[string]string{"ds": "https://api.deepseek.com"})
	bodies := [][]byte{fixtures.AgentHistory(30, 700, 200), fixtures.AgentHistory(33, 700, 200), fixtures.AgentHistory(36, 700, 200)}
	want := make([][]byte, len(bodies))
	msgs := make([]int, len(bodies))
	for i, b := range bodies {
		out, err := NewShaper(cfg, Options{Profiles: profiles}).TransformRequest(context.Background(), call(t, b, "c"), b)
		if err != nil {
			t.Fatal(err)
		}
		want[i], msgs[i] = bytes.Clone(out), len(view(t, b).Messages)
	}
	s := NewShaper(cfg, Options{Profiles: profiles})
	sendAtOnce(t, s, bodies, func(i int, out []byte) bool { return bytes.Equal(out, want[i]) })
	// Each request carries 9 blocks or more (2,160 in all); the bodies
	// share their first 30 messages at their places.
	h, m := s.memo.Stats()
	t.Logf("the memo was asked %d times", h+m)
	if h+m >= 2160/4 {
		t.Fatalf("the memo was asked %d times: the carries were not taken", h+m)
	}
	// Under the default policy, whose prints and breaks depend on the
	// order the requests come in, the carries' prints and parts are
	// taken at once too (what -race checks here): each body still goes
	// out valid, its messages in place.
	s = NewShaper(DefaultConfig(), Options{Profiles: profiles})
	sendAtOnce(t, s, bodies, func(i int, out []byte) bool {
		return gjson.ValidBytes(out) && len(gjson.GetBytes(out, "messages").Array()) == msgs[i]
	})
}

// sendAtOnce sends bodies through s from 8 goroutines, 30 requests each,
// as one conversation, and fails when ok says a body went out wrong.
func sendAtOnce(t *testing.T, s *Shaper, bodies [][]byte, ok func(i int, out []byte) bool) {
	t.Helper()
	var wg sync.WaitGroup
	errs := make(chan string, 8)
	for g := range 8 {
		wg.Go(func() {
			for k := range 30 {
				i := (g + k) % len(bodies)
				c := call(t, bodies[i], "c")
				out, err := s.TransformRequest(context.Background(), c, bodies[i])
				c.RunBeside()
				c.RunAfter()
				if err != nil || !ok(i, out) {
					errs <- fmt.Sprintf("goroutine %d, request %d: body %d went out wrong (%v)", g, k, i, err)
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Fatal(e)
	}
}

// TestSettledOnlyAlike: a request takes the decisions of its
// conversation's last request only when what they depended on besides
// the messages is the same — the profile, the set of blocks shaped at
// breaks (the very set), the prints being made, the policy deciding by
// the profile — and goes out as it would without them either way.
func TestSettledOnlyAlike(t *testing.T) {
	p, r := fixtures.AgentHistory(30, 700, 200), fixtures.AgentHistory(33, 700, 200)
	v4, qwen := prof("deepseek-v4"), prof("qwen3")
	never := *v4 // renders as V4 does; no re-send pays for a shaped block
	never.Resends = 0
	recent := shapeRule{Shaping: shaping.Options{MaxChars: 80}, KeepRecent: 2, Policy: PolicyKeepRecent}
	set := map[blockKey]bool{}
	for _, tc := range []struct {
		name       string
		rule       shapeRule
		first, now inputs
		taken      bool
	}{
		{"alike", cacheAwareRule(), inputs{prof: v4, track: true}, inputs{prof: v4, track: true}, true},
		{"another profile", cacheAwareRule(), inputs{prof: qwen, track: true}, inputs{prof: v4, track: true}, false},
		{"another profile rendering alike", cacheAwareRule(), inputs{prof: &never, track: true}, inputs{prof: v4, track: true}, false},
		{"another set", cacheAwareRule(), inputs{prof: v4, track: true}, inputs{prof: v4, track: true, batched: set}, false},
		{"the same set", cacheAwareRule(), inputs{prof: v4, track: true, batched: set}, inputs{prof: v4, track: true, batched: set}, true},
		{"prints not made before", cacheAwareRule(), inputs{prof: v4}, inputs{prof: v4, track: true}, false},
		{"keep-recent", recent, inputs{prof: v4, track: true}, inputs{prof: v4, track: true}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			first := tc.first
			first.carry = true
			a := shape(view(t, p), tc.rule, newMemo(4096), first)
			putBlocks(a.Blocks)
			defer a.Carry.release()
			if keeps := a.Carry.settled != nil; keeps != (tc.rule.Policy != PolicyKeepRecent) {
				t.Fatalf("decisions kept: %v", keeps)
			}
			now := tc.now
			now.prev, now.from, now.carry = a.Prints, a.Carry, true
			got := shape(view(t, r), tc.rule, newMemo(4096), now)
			defer got.Carry.release()
			defer putBlocks(got.Blocks)
			now.from, now.carry = nil, false
			want := shape(view(t, r), tc.rule, newMemo(4096), now)
			defer putBlocks(want.Blocks)
			if !bytes.Equal(got.Body, want.Body) || !reflect.DeepEqual(got.Blocks, want.Blocks) || !samePrints(got.Prints, want.Prints) {
				t.Fatal("the request went out otherwise with its conversation's decisions")
			}
			if (got.Settled > 0) != tc.taken {
				t.Fatalf("%d messages took their blocks as decided", got.Settled)
			}
		})
	}
	// After a break that shaped blocks, the request's decisions are not
	// kept: the set its next request reads is another.
	v := view(t, p)
	cands := candsOf(v, cacheAwareRule(), newMemo(64))
	defer putCands(cands)
	if s := settleOf(v, cacheAwareRule(), inputs{prof: v4}, v4.Of(v), nil, 0, cands, []blockKey{{1}}); s != nil {
		t.Fatal("decisions kept after a break shaped blocks")
	}
}

// TestCarryRandomConversations: conversations made of random steps —
// a tool step, the same request again, a new user turn, a message edited
// or taken out anywhere, the tools taken out or put back, signed
// reasoning, a prefill that becomes history or not — shaped with the carry of the request
// before and without give the same bodies, blocks and results, under the
// default policy, free-only and the drop operation, on profiles that
// render differently, also when some requests read an older request's
// prints (a break before the messages taken); and the decisions are
// taken on the way.
func TestCarryRandomConversations(t *testing.T) {
	rules := [][]shapeRule{{cacheAwareRule()}, {{Shaping: shaping.Options{MaxChars: 80}, Policy: PolicyFreeOnly}}}
	drop := cacheAwareRule()
	drop.Shaping.Op = shaping.OpDrop
	rules = append(rules, []shapeRule{drop})
	settled := 0
	for seed := range 8 {
		seq := randomConversation(t, rand.New(rand.NewPCG(uint64(seed), 7)), 18)
		for _, pname := range []string{"deepseek-v4", "dashscope", "qwen3", "glm-4.7", "unknown"} {
			for _, rs := range rules {
				t.Run(fmt.Sprintf("%d/%s/%s/%s", seed, pname, rs[0].Policy, rs[0].Shaping.Op), func(t *testing.T) {
					for _, stale := range []int{0, stalePrints, staleFrom, stalePrints | staleFrom} {
						n, _, _ := shapeBothWays(t, seq, rs, prof(pname), stale)
						settled += n
					}
				})
			}
		}
	}
	if settled == 0 {
		t.Fatal("no message took its blocks as decided: the test compares nothing new")
	}
}

// What shapeBothWays takes of the request before the last.
const (
	stalePrints = 1 << iota
	staleFrom
)

// randomConversation returns n requests of one conversation, each made
// from the one before by a random step.
func randomConversation(t *testing.T, r *rand.Rand, n int) [][]byte {
	t.Helper()
	must := func(b []byte, err error) []byte {
		if err != nil {
			t.Fatal(err)
		}
		return bytes.Clone(b)
	}
	tools := gjson.GetBytes(fixtures.AgentHistory(20, 700, 200), "tools").Raw
	body := fixtures.AgentHistory(20, 700, 200)
	step := func(tag string, signed bool) string {
		extra := ""
		if signed {
			extra = `,"reasoning_details":[{"type":"reasoning.encrypted","data":"abc"}]`
		}
		return fmt.Sprintf(`{"role":"assistant","content":"","reasoning_content":%q%s,"tool_calls":[{"id":"x_%s","type":"function","function":{"name":"bash","arguments":"{}"}}]}`, longThought(tag, 8+r.IntN(8)), extra, tag)
	}
	result := func(tag string) string {
		return fmt.Sprintf(`{"role":"tool","tool_call_id":"x_%s","content":"done %s"}`, tag, tag)
	}
	var seq [][]byte
	for i := range n {
		tag := fmt.Sprint(i)
		msgs := int(gjson.GetBytes(body, "messages.#").Int())
		sent := body
		switch k := r.IntN(10); {
		case k < 4: // a tool step
			body = must(sjson.SetRawBytes(body, "messages.-1", []byte(step(tag, false))))
			body = must(sjson.SetRawBytes(body, "messages.-1", []byte(result(tag))))
			sent = body
		case k == 4: // the same request again
		case k == 5: // a new user turn
			body = must(sjson.SetRawBytes(body, "messages.-1", fmt.Appendf(nil, `{"role":"user","content":"next %s"}`, tag)))
			sent = body
		case k == 6 && msgs > 4: // a message edited or taken out
			at := 1 + r.IntN(msgs-1)
			if r.IntN(2) == 0 {
				body = must(sjson.SetBytes(body, fmt.Sprintf("messages.%d.content", at), "edited "+tag))
			} else {
				body = must(sjson.DeleteBytes(body, fmt.Sprintf("messages.%d", at)))
			}
			sent = body
		case k == 7: // the tools out, or back
			if gjson.GetBytes(body, "tools").Exists() {
				body = must(sjson.DeleteBytes(body, "tools"))
			} else {
				body = must(sjson.SetRawBytes(body, "tools", []byte(tools)))
			}
			sent = body
		case k == 8 && r.IntN(3) == 0: // signed reasoning: nothing before it is shaped again
			body = must(sjson.SetRawBytes(body, "messages.-1", []byte(step(tag, true))))
			body = must(sjson.SetRawBytes(body, "messages.-1", []byte(result(tag))))
			sent = body
		default: // a prefill, which the next request has as history or not
			sent = must(sjson.SetRawBytes(body, "messages.-1", []byte(step("prefill"+tag, false))))
			if r.IntN(2) == 0 {
				body = must(sjson.SetRawBytes(sent, "messages.-1", []byte(result("prefill"+tag))))
			}
		}
		seq = append(seq, sent)
	}
	return seq
}

// TestSettledPrefixRepeated: for views the Reparser read against the
// carry's own, settledPrefix counts from how many messages the view says
// it repeats (conv.Request.Repeated) and gives what it gives comparing
// each message's key, along a conversation's requests where messages are
// added, sent again, edited and taken out.
func TestSettledPrefixRepeated(t *testing.T) {
	seq := carrySequence(t)
	seq = append(seq, randomConversation(t, rand.New(rand.NewPCG(3, 7)), 24)...)
	rp := conv.NewReparser(32 << 20)
	memo := newMemo(4096)
	p := prof("deepseek-v4")
	var from *carry
	var prev prints
	shortcut := 0
	for i, body := range seq {
		v, err := rp.Parse(body)
		if err != nil {
			t.Fatal(err)
		}
		in := inputs{prof: p, track: true, carry: true, prev: prev, from: from}
		if from != nil && from.decided() != nil {
			rd := p.Of(v)
			got := settledPrefix(v, in, rd, from, true)
			view := from.view
			from.view = 0 // message by message
			want := settledPrefix(v, in, rd, from, true)
			from.view = view
			if got != want {
				t.Fatalf("request %d: %d messages taken as decided, %d comparing each", i, got, want)
			}
			if v.Repeated(view) > 0 && got > 0 {
				shortcut++
			}
		}
		res := shape(v, cacheAwareRule(), memo, in)
		from.release()
		from, prev = res.Carry, res.Prints
		putBlocks(res.Blocks)
	}
	from.release()
	if shortcut == 0 {
		t.Fatal("no request counted from the messages it repeats: the test compares nothing")
	}
}

// TestCarriesTwoDeep: a conversation keeps the carries of its last two
// requests and gives the one made from the view a request was read
// against (its newest for any other), the older going with a third; the
// two count against the bound, the older going first when both do not fit.
func TestCarriesTwoDeep(t *testing.T) {
	made := func(view uint64, n int) *carry {
		c := newCarry(shapeRule{}, n)
		c.view = view
		return c
	}
	got := func(tb *carries, base uint64) uint64 {
		c := tb.get("c", base)
		if c == nil {
			return 0
		}
		defer c.release()
		return c.view
	}
	tb := newCarries(100)
	tb.put("c", made(1, 30))
	tb.put("c", made(2, 30))
	for _, w := range []struct{ base, want uint64 }{{1, 1}, {2, 2}, {0, 2}, {7, 2}} {
		if v := got(tb, w.base); v != w.want {
			t.Fatalf("read against view %d: the carry of view %d given, want %d", w.base, v, w.want)
		}
	}
	tb.put("c", made(3, 30))
	if v := got(tb, 1); v != 3 {
		t.Fatalf("the carry of view 1 is still given (%d) after two newer", v)
	}
	if v := got(tb, 2); v != 2 {
		t.Fatalf("read against view 2: %d given", v)
	}
	// 60 and 50 do not fit in 100: the conversation keeps only its newest,
	// and another conversation's go first.
	tb.put("d", made(9, 30))
	tb.put("c", made(4, 50))
	tb.mu.Lock()
	if two := tb.by["c"]; two[0] == nil || two[0].view != 4 || two[1] == nil || two[1].view != 3 || tb.by["d"][0] != nil || tb.msgs != 80 {
		t.Fatalf("after a carry of 50: c keeps %v, d %v, %d messages held", two, tb.by["d"], tb.msgs)
	}
	tb.mu.Unlock()
	tb.put("c", made(5, 60))
	tb.mu.Lock()
	if two := tb.by["c"]; two[0].view != 5 || two[1] != nil || tb.msgs != 60 {
		t.Fatalf("after a carry of 60: c keeps %v, %d messages held", two, tb.msgs)
	}
	tb.mu.Unlock()
	tb.put("c", made(6, 101)) // too long: the conversation keeps none
	tb.mu.Lock()
	defer tb.mu.Unlock()
	if len(tb.by) != 0 || tb.msgs != 0 {
		t.Fatalf("after a carry over the bound: %d conversations, %d messages held", len(tb.by), tb.msgs)
	}
}
