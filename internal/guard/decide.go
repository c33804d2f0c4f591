package guard

import (
	"fmt"
	"hash/fnv"
	"slices"
	"strings"

	"github.com/shaperproxy/shaperproxy/conv"
	"github.com/tidwall/gjson"
)

// state is the guard's memory of one conversation, kept by the wiring
// between requests (MarshalBinary / UnmarshalBinary) under the
// conversation key. The zero state is a conversation the guard has not
// acted on. Decide and ObserveResponse take a state and return the next
// one; they never change the one they were given.
type state struct {
	// AckCallID is the id of the last call covered by the last ECHO
	// notice: that call and every call before it no longer count.
	// AckSeq is that call's position in call order (echo's call.Seq; -1
	// when unknown, in a state written before positions were kept): ids
	// can be reused, the position tells which call it was.
	AckCallID string
	AckSeq    int
	// StallReported is true while a STALL that was already reported
	// (observe) or scheduled (interrupt) continues; it clears when a
	// known measure is no longer stalled.
	StallReported bool
	// StallPending is true when an interrupt notice waits for a request
	// it can be placed in; Pending holds the measure it reports.
	StallPending bool
	Pending      stallCounts
	// StepDownLeft is the number of further requests whose reasoning
	// effort is lowered.
	StepDownLeft int
	// Notices are the notices placed so far, oldest first (at most
	// MaxNotices). Each is placed again, at the same message, in every
	// later request whose message there is unchanged, so that the model
	// keeps seeing the history it answered to and the request stays the
	// same from one retry to the next.
	Notices []notice
}

// stallCounts are the numbers a STALL notice or event reports.
type stallCounts struct {
	StepChars, TurnChars, Steps int
}

// maxNotices bounds State.Notices; the oldest notice is forgotten first.
const maxNotices = 16

// notice is a notice placed in a request.
type notice struct {
	Kind kind
	// Message is the index of the message the text was appended to.
	Message int
	// Hash is the FNV-1a 64 hash of that message's bytes (before the
	// notice): the notice is placed again only where it still matches.
	Hash uint64
	// Text is the notice, without separator.
	Text string
}

// placement asks the wiring to append Text to the content of message
// Message (see ApplyPlacements). Several placements may name one message;
// they are appended in order.
type placement struct {
	Message int
	Text    string
}

// kind names what happened.
type kind uint8

// The kinds of Event (and of Notice).
const (
	// echoNotice: an ECHO notice was placed in this request.
	echoNotice kind = iota + 1
	// stallObserved: a STALL was recorded (stall_action = "observe").
	stallObserved
	// stallInterrupted: a STALL notice was placed in this request and
	// the step-down window started (stall_action = "interrupt").
	stallInterrupted
)

// String returns "echo", "stall_observed" or "stall_interrupted", for
// metric labels and log lines.
func (k kind) String() string {
	switch k {
	case echoNotice:
		return "echo"
	case stallObserved:
		return "stall_observed"
	case stallInterrupted:
		return "stall_interrupted"
	}
	return fmt.Sprintf("kind(%d)", uint8(k))
}

// event is one thing for the wiring to log and count. It never holds
// reasoning or tool output text.
type event struct {
	Kind kind
	// Tool, Count and Sig describe an ECHO: the tool, how many times the
	// same call failed in a row, and the call's signature hash.
	Tool  string
	Count int
	Sig   sig
	// Stall is the STALL measure; Effort the request's reasoning effort
	// ("" when the request sets none).
	Stall  stall
	Effort string
}

// decision is what the guard does to one request.
type decision struct {
	// Placements: notices to append to message contents, in order.
	// Empty when there is nothing to say.
	Placements []placement
	// StepDown is true when the request's reasoning effort is to be
	// lowered (see StepDown).
	StepDown bool
	// Events happened while deciding.
	Events []event
}

// Decide decides what to do to one request of a conversation, given the
// conversation's State and the request's Signals (from its Projection),
// and returns the next State. The wiring applies the Placements
// (ApplyPlacements), lowers the effort when StepDown is set, records the
// Events and stores the returned State.
//
// In order: notices placed before are placed again; an ECHO notice is
// placed when the calls made after the acknowledged one reach the
// threshold; the STALL measure of the history is noted (reported once per
// continuing stall); a pending STALL interrupt is placed; and one request
// of the step-down window is used up.
func (g *Guard) Decide(st state, req *conv.Request, sig signals) (decision, state) {
	var d decision
	if !g.Enabled() {
		return d, st
	}
	for _, n := range st.Notices {
		if g.anchored(req, n) && placeable(req, n.Message) {
			d.Placements = append(d.Placements, placement{n.Message, n.Text})
		}
	}
	g.decideEcho(&d, &st, req, sig.Echo)
	g.noteStall(&d, &st, req, sig.Stall)
	g.placeStall(&d, &st, req, sig)
	if st.StepDownLeft > 0 {
		d.StepDown = true
		st.StepDownLeft--
	}
	return d, st
}

// ObserveResponse notes the STALL measure of a response: c is a choice of
// the response to req, sig the Signals of req. In observe mode it returns
// a StallObserved event the first time a stall is seen; in interrupt mode
// it schedules the notice for the conversation's next request. It never
// touches ECHO.
func (g *Guard) ObserveResponse(st state, req *conv.Request, sig signals, c conv.Choice) ([]event, state) {
	return g.ObserveStep(st, req, sig, stepChars(c))
}

// ObserveStep is ObserveResponse for a caller that counted the response's
// reasoning characters as it streamed by (so it need not keep the text).
func (g *Guard) ObserveStep(st state, req *conv.Request, sig signals, stepChars int) ([]event, state) {
	if !g.Enabled() {
		return nil, st
	}
	var d decision
	g.noteStall(&d, &st, req, g.stall(true, stepChars, sig.Stall.TurnChars+stepChars, sig.Stall.Steps+1))
	return d.Events, st
}

// decideEcho places an ECHO notice at the result of the newest failed
// call when the run after the acknowledged call reaches the threshold.
func (g *Guard) decideEcho(d *decision, st *state, req *conv.Request, e echo) {
	c, ok := e.Newest()
	if !ok {
		return
	}
	n := e.countAfter(st.AckCallID, st.AckSeq)
	if n < g.threshold || len(c.ID) > maxIDLen || !placeable(req, c.Result) {
		return
	}
	g.place(d, st, req, echoNotice, c.Result, echoText(e.Tool, n))
	st.AckCallID, st.AckSeq = c.ID, c.Seq
	d.Events = append(d.Events, event{Kind: echoNotice, Tool: e.Tool, Count: n, Sig: e.Sig})
}

// noteStall applies a STALL measure to the report-once state.
func (g *Guard) noteStall(d *decision, st *state, req *conv.Request, s stall) {
	switch {
	case !s.Known:
	case !s.Stalled:
		st.StallReported = false
	case st.StallReported:
	case g.interrupt:
		st.StallReported = true
		st.StallPending = true
		st.Pending = stallCounts{s.StepChars, s.TurnChars, s.Steps}
	default:
		st.StallReported = true
		d.Events = append(d.Events, event{Kind: stallObserved, Stall: s, Effort: effort(req)})
	}
}

// placeStall places a pending interrupt at the end of the request: on its
// last message when that is a tool result, or a user message inside the
// open turn. A request that starts a new turn drops it: the stalled turn
// is over.
func (g *Guard) placeStall(d *decision, st *state, req *conv.Request, sig signals) {
	if !st.StallPending {
		return
	}
	if sig.NewTurn {
		st.StallPending = false
		return
	}
	last := len(req.Messages) - 1
	if last < 0 || !placeable(req, last) {
		return // wait for a request that ends with a tool result
	}
	p := st.Pending
	g.place(d, st, req, stallInterrupted, last, stallText(p.StepChars, p.TurnChars))
	st.StallPending = false
	st.StepDownLeft = g.stepDown
	s := g.stall(true, p.StepChars, p.TurnChars, p.Steps)
	d.Events = append(d.Events, event{Kind: stallInterrupted, Stall: s, Effort: effort(req)})
}

// place adds a placement and remembers it as a notice.
func (g *Guard) place(d *decision, st *state, req *conv.Request, k kind, i int, text string) {
	d.Placements = append(d.Placements, placement{i, text})
	n := notice{Kind: k, Message: i, Hash: g.anchor(req, i), Text: text}
	st.Notices = append(slices.Clip(st.Notices), n)
	if len(st.Notices) > maxNotices {
		st.Notices = st.Notices[len(st.Notices)-maxNotices:]
	}
}

// placeable reports whether a notice can be appended to message i: a tool
// or user message whose content is a string, an array of parts, null or
// absent, in a body without repeated keys (where an edit by path could hit
// the wrong one).
func placeable(req *conv.Request, i int) bool {
	if i < 0 || i >= len(req.Messages) || req.DuplicateKeys {
		return false
	}
	m := &req.Messages[i]
	if m.Role != conv.RoleTool && m.Role != conv.RoleUser {
		return false
	}
	if m.ContentStart < 0 {
		return true // no content: it becomes the text
	}
	switch req.Body[m.ContentStart] { // the kind of the value, not its decoded text
	case '"', '[', 'n':
		return true
	}
	return false
}

// anchored reports whether notice n's message is still the one it was
// placed on.
func (g *Guard) anchored(req *conv.Request, n notice) bool {
	return n.Message >= 0 && n.Message < len(req.Messages) && g.anchor(req, n.Message) == n.Hash
}

// messageHash is the FNV-64a of message i's bytes: the anchor a notice
// keeps in the stored state (stable across restarts, unlike conv.RawKey,
// whose seed is the process's).
func messageHash(req *conv.Request, i int) uint64 {
	m := &req.Messages[i]
	h := fnv.New64a()
	h.Write(req.Body[m.Start:m.End])
	return h.Sum64()
}

// maxHashes bounds the anchors a Guard remembers by message (past it, it
// starts again).
const maxHashes = 1 << 12

// anchor returns messageHash(req, i), remembered by the message's
// conv.RawKey, made when it was parsed: a notice is checked against its
// message on every later request of the conversation, and a tool result
// of 40 KB costs ~50 µs to hash.
func (g *Guard) anchor(req *conv.Request, i int) uint64 {
	k := req.Messages[i].RawKey()
	if g.hashes == nil || k == (conv.RawKey{}) {
		return messageHash(req, i)
	}
	return g.hashes.Get(k, func() uint64 { return messageHash(req, i) })
}

// effort returns the request's reasoning effort: the top-level
// "reasoning_effort" string, else "reasoning.effort" (OpenRouter), else ""
// (of a repeated member, the last). It reads only those members' values,
// where the view says they lie: not the history before or after them.
func effort(req *conv.Request) string {
	var top, nested string
	for _, f := range req.Fields() {
		switch f.Key {
		case "reasoning_effort", "reasoning":
		default:
			continue
		}
		v := gjson.ParseBytes(req.Body[f.Start:f.End])
		switch {
		case f.Key == "reasoning_effort" && v.Type == gjson.String:
			top = v.Str
		case f.Key == "reasoning" && v.IsObject():
			if e := v.Get("effort"); e.Type == gjson.String {
				nested = e.Str
			}
		}
	}
	if top != "" {
		return top
	}
	return nested
}

// echoText is the ECHO notice for a tool whose same call failed count
// times in a row.
func echoText(tool string, count int) string {
	return fmt.Sprintf("Note from the shaperproxy guard: the same call to the tool %q, with the same arguments, "+
		"has now failed %d times in a row. Repeating it unchanged is unlikely to help; "+
		"change the arguments or the approach.", cleanName(tool), count)
}

// stallText is the STALL notice for a step of stepChars characters of
// reasoning in a turn of turnChars.
func stallText(stepChars, turnChars int) string {
	return fmt.Sprintf("Note from the shaperproxy guard: the last step reasoned for %d characters before any output, "+
		"and this turn for %d characters so far. Stop deliberating and act on what you have: "+
		"make the next tool call or give your answer.", stepChars, turnChars)
}

// cleanName keeps a tool name printable and short in a notice.
func cleanName(name string) string {
	name = strings.Map(func(r rune) rune {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', strings.ContainsRune("_-.:/", r):
			return r
		}
		return '_'
	}, name)
	if len(name) > 64 {
		name = name[:64]
	}
	if name == "" {
		return "unnamed"
	}
	return name
}
