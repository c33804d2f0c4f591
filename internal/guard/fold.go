package guard

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"hash/maphash"
	"strings"
	"unicode/utf8"

	"github.com/shaperproxy/shaperproxy/conv"
	"github.com/shaperproxy/shaperproxy/internal/runecut"
)

// Call states.
const (
	pending uint8 = iota
	succeeded
	failed
)

// callRec is one call of the history, in call order.
type callRec struct {
	id   string
	name string
	// sig is Signature when known, else rawSig: comparing two records'
	// (known, sig) tells whether two occurrences of an id agree.
	sig       sig
	known     bool
	untrusted bool
	// repeat: the call reuses the id of an earlier call that already had
	// its result, with the same tool and arguments. Until a result of its
	// own names it, it is taken for that call sent again (a repeated
	// message) and the run looks past it; once answered it is a call of
	// its own (providers such as Kimi reuse "functions.run_build:0" in
	// every step).
	repeat bool
	state  uint8
	result int32
}

// fold is the state of one pass over the messages, message by message.
// Its content after n messages depends only on those n messages, which is
// what lets a Projection continue it.
type fold struct {
	calls []callRec
	byID  map[string]int32

	// The open turn, by conv's rules (see conv/doc.go).
	inTurn       bool // a user message was seen
	steps        int  // assistant messages in the open turn
	turnChars    int
	lastChars    int
	lastKnown    bool // the newest step carries reasoning
	lastHasCalls bool // the newest step has tool calls: a tool loop
}

func (f *fold) init() {
	*f = fold{byID: make(map[string]int32)}
}

// add folds message m (whose bytes are body[m.Start:m.End]).
func (f *fold) add(g *Guard, body []byte, m *conv.Message) {
	switch m.Role {
	case conv.RoleUser:
		if !f.inTurn || !f.lastHasCalls {
			f.openTurn()
		}
	case conv.RoleAssistant:
		f.addCalls(m)
		if f.inTurn {
			f.addStep(m)
		}
	case conv.RoleTool:
		f.addResult(g, body, m)
	}
}

// openTurn starts a turn at a user message.
func (f *fold) openTurn() {
	f.inTurn = true
	f.steps, f.turnChars, f.lastChars = 0, 0, 0
	f.lastKnown, f.lastHasCalls = false, false
}

// addStep records assistant message m as the newest step of the open turn.
func (f *fold) addStep(m *conv.Message) {
	chars, known := messageReasoning(m)
	f.steps++
	f.turnChars += chars
	f.lastChars, f.lastKnown = chars, known
	f.lastHasCalls = len(m.ToolCalls) > 0
}

// addCalls records the tool calls of assistant message m in call order.
// A call is known by its id and its position: an id used again after the
// earlier call with it got its result names a new call.
func (f *fold) addCalls(m *conv.Message) {
	for _, tc := range m.ToolCalls {
		rec := callRec{id: kept(tc.ID), name: kept(tc.Name), result: -1}
		rec.sig, rec.known = signature(tc.Name, tc.Arguments)
		if !rec.known {
			rec.sig = rawSig(tc.Name, tc.Arguments)
		}
		if tc.ID == "" {
			// No identity: the call breaks the chain, nothing can
			// answer it.
			rec.untrusted = true
			f.calls = append(f.calls, rec)
			continue
		}
		if i, ok := f.byID[rec.id]; ok {
			prev := &f.calls[i]
			same := prev.name == rec.name && prev.known == rec.known && prev.sig == rec.sig
			switch {
			case prev.state == pending && same:
				continue // the same call again before its result: counted once
			case prev.state == pending:
				// One id, two different calls waiting for one result:
				// neither can be trusted, and the later one breaks the
				// chain where it was made.
				prev.untrusted = true
				f.calls = append(f.calls, callRec{untrusted: true, result: -1})
				continue
			}
			rec.repeat = same // the id reused after its result: a new call
		}
		f.byID[rec.id] = int32(len(f.calls))
		f.calls = append(f.calls, rec)
	}
}

// maxKept bounds the bytes of a call's id and name the fold keeps: the
// fold outlives the request (up to maxProjections conversations), and
// both come from the client.
const maxKept = 256

// kept returns s as the fold keeps it: a copy (the strings of a view
// share the request body's memory, and every body a call came in would
// stay alive with the conversation), or, past maxKept bytes, its first
// bytes and a hash of all of it — still told apart from any other, at a
// size of its own.
func kept(s string) string {
	if len(s) > maxKept {
		return keyOf(s)
	}
	return strings.Clone(s)
}

// keyOf returns what the fold keeps of s without a copy of a short s
// (to look it up).
func keyOf(s string) string {
	if len(s) <= maxKept {
		return s
	}
	sum := sha256.Sum256([]byte(s))
	// The prefix, "~" and the hash: a new string, not the body's memory.
	return runecut.Prefix(s, maxKept-1-2*len(sum)) + "~" + hex.EncodeToString(sum[:])
}

// addResult records the first result that names a known call: the
// latest call with its id made before it.
func (f *fold) addResult(g *Guard, body []byte, m *conv.Message) {
	if m.ToolCallID == "" {
		return // orphan
	}
	i, ok := f.byID[keyOf(m.ToolCallID)]
	if !ok {
		return // orphan: no call made before it has this id
	}
	c := &f.calls[i]
	if c.state != pending {
		return // a duplicate result: the latest call with the id has one
	}
	c.result = int32(m.Index)
	c.state = succeeded
	if g.rules.failed(body[m.Start:m.End], m.Content) {
		c.state = failed
	}
}

// signals computes the Signals of the messages folded so far.
func (f *fold) signals(g *Guard) signals {
	s := signals{Echo: f.echo(), NewTurn: f.inTurn && f.steps == 0}
	known := f.inTurn && (f.steps == 0 || f.lastKnown)
	s.Stall = g.stall(known, f.lastChars, f.turnChars, f.steps)
	return s
}

// echo returns the tail run: from the newest call backwards in call
// order, while calls are trusted failures with known arguments and the
// newest call's signature. A repeat still waiting for its result is
// looked past (see callRec.repeat).
func (f *fold) echo() echo {
	var run []int // positions in f.calls, newest first
	for j := len(f.calls) - 1; j >= 0; j-- {
		c := &f.calls[j]
		if c.repeat && c.state == pending {
			continue
		}
		if !c.failing() || (len(run) > 0 && c.sig != f.calls[run[0]].sig) {
			break
		}
		run = append(run, j)
	}
	if len(run) == 0 {
		return echo{}
	}
	last := &f.calls[run[0]]
	e := echo{Tool: last.name, Sig: last.sig, Chain: make([]call, 0, len(run))}
	for k := len(run) - 1; k >= 0; k-- {
		c := &f.calls[run[k]]
		e.Chain = append(e.Chain, call{ID: c.id, Seq: run[k], Result: int(c.result)})
	}
	return e
}

func (c *callRec) failing() bool {
	return c.known && !c.untrusted && c.state == failed
}

// messageReasoning returns the reasoning length of an assistant message
// in characters, and whether the message carries reasoning at all (a
// reasoning key, or an inline <think> block at the start of its content).
func messageReasoning(m *conv.Message) (int, bool) {
	if m.HasReasoningKey {
		return utf8.RuneCountInString(m.Reasoning), true
	}
	if t, ok := thinkBlock(m.Content); ok {
		return utf8.RuneCountInString(t), true
	}
	return 0, false
}

// thinkBlock returns the text of a <think>…</think> block at the start of
// content (to its end when the block is not closed).
func thinkBlock(content string) (string, bool) {
	s := strings.TrimLeft(content, " \t\r\n")
	if !strings.HasPrefix(s, "<think>") {
		return "", false
	}
	s = s[len("<think>"):]
	if i := strings.Index(s, "</think>"); i >= 0 {
		s = s[:i]
	}
	return s, true
}

// stepChars measures one step of a response: the characters (runes) of
// reasoning it produced before any visible content or tool call. All
// reasoning deltas come before content and tool calls (PROTOCOLS.md,
// "Streams"), so this is the whole reasoning of the choice; for an inline
// <think> block it is the block's text.
func stepChars(c conv.Choice) int {
	if c.Reasoning != "" {
		return utf8.RuneCountInString(c.Reasoning)
	}
	t, _ := thinkBlock(c.Content)
	return utf8.RuneCountInString(t)
}

// turnSteps returns the reasoning length, in characters, of each step of
// req's open turn, oldest first (nil without a user message). It walks
// conv's turns and is meant for logs and tests, not for every request:
// Signals.Stall has the newest step and the sum.
func turnSteps(req *conv.Request) []int {
	t, ok := req.OpenTurn()
	if !ok {
		return nil
	}
	out := make([]int, 0, len(t.Steps))
	for _, s := range t.Steps {
		n, _ := messageReasoning(&req.Messages[s.Assistant])
		out = append(out, n)
	}
	return out
}

// projection is the fold of one conversation kept between requests.
// Agent histories only grow, so Update folds only the messages appended
// since the last request, after checking that the messages folded before
// are unchanged; a history that was edited, reordered or shortened is
// folded again from the start. The result always equals Guard.Fold.
//
// The check hashes every message's key (conv.RawKey, 128 bits of its
// bytes) with hash/maphash (a seed per projection) and compares the count
// and the hash of the prefix. The keys come with the view, computed once
// per message; the check costs 16 bytes of hashing per message instead of
// parsing failures and canonical JSON for every call again. When the
// proxy's Reparser read the request against the very view folded last
// and found its messages repeated (conv.Request.Repeats), there is
// nothing to check: the hash of the prefix goes on from where it was.
//
// A projection belongs to the Guard that made it: a changed Config needs
// new Projections. It is not safe for concurrent use.
type projection struct {
	g    *Guard
	f    fold
	n    int          // messages folded
	h    maphash.Hash // of their keys (its state: the next request's go on from it)
	view uint64       // the view they were read from (conv.Request.ID; 0: not known)
	seed maphash.Seed
	// back is n, h and view as they were before the last Update: the
	// Reparser reads a request against the older of two views alike, and
	// a conversation whose request was sent twice at once has each later
	// request read against the one two before (internal/bench/HISTORY.md, Session BH). The
	// hash of such a request's first back.n messages is back.h; only the
	// messages from there to n are hashed for the prefix check.
	back struct {
		n    int
		h    maphash.Hash
		view uint64
	}
}

// NewProjection returns an empty Projection for one conversation.
func (g *Guard) NewProjection() *projection {
	p := &projection{g: g, seed: maphash.MakeSeed()}
	p.f.init()
	return p
}

// stats tell what an Update did.
type stats struct {
	// Messages is the number of messages in the request.
	Messages int
	// Processed is the number of messages folded by this Update.
	Processed int
	// Refold is true when the folded prefix did not match and the
	// history was folded again from the start.
	Refold bool
	// Repeated is true when the prefix was known to match without a
	// hash: the request was read against the view folded last.
	Repeated bool
	// Back is true when the prefix was hashed on from the state of the
	// view folded before the last one, which the request was read
	// against (projection.back): only the messages after that view's
	// were hashed.
	Back bool
}

// Update brings the projection to req's history and returns its signals.
func (p *projection) Update(req *conv.Request) (signals, stats) {
	msgs := req.Messages
	st := stats{Messages: len(msgs)}
	if !p.g.Enabled() {
		return signals{}, st
	}
	var h maphash.Hash
	h.SetSeed(p.seed)
	start := 0
	switch {
	case p.n > 0 && req.Repeats(p.view, p.n):
		h, start = p.h, p.n // a copy of the state: p.h stays as it is until the end
		st.Repeated = true
	case p.n > 0 && len(msgs) >= p.n:
		from := 0
		if b := &p.back; b.view != 0 && b.n <= p.n && req.Repeats(b.view, b.n) {
			h, from = b.h, b.n // the first b.n messages are that view's: their hash is its
			st.Back = true
		}
		hashMessages(&h, msgs[from:p.n])
		if h.Sum64() == p.h.Sum64() {
			start = p.n
		}
	}
	if start == 0 {
		st.Refold = p.n > 0
		p.f.init()
		h.Reset()
	}
	for i := start; i < len(msgs); i++ {
		p.f.add(p.g, req.Body, &msgs[i])
	}
	hashMessages(&h, msgs[start:])
	p.back.n, p.back.h, p.back.view = p.n, p.h, p.view
	p.n, p.h, p.view = len(msgs), h, req.ID()
	st.Processed = len(msgs) - start
	return p.f.signals(p.g), st
}

// hashMessages writes each message's key (conv.RawKey: 128 bits of its
// bytes, computed when the message was first parsed and carried by the
// Reparser, so a history is not hashed again on every request).
//
// The keys go to h eight at a time: a write per key cost more than the
// hashing (a history of hundreds is hashed again whenever a conversation's
// requests interleave), and the sum of a Hash does not depend on how its
// bytes were split between writes.
func hashMessages(h *maphash.Hash, msgs []conv.Message) {
	var buf [8 * 16]byte
	n := 0
	for i := range msgs {
		k := msgs[i].RawKey()
		binary.LittleEndian.PutUint64(buf[n:], k[0])
		binary.LittleEndian.PutUint64(buf[n+8:], k[1])
		if n += 16; n == len(buf) {
			h.Write(buf[:])
			n = 0
		}
	}
	h.Write(buf[:n])
}
