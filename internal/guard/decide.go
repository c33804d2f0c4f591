package guard

import (
	"fmt"
	"hash/fnv"
	"slices"
	"strings"

	"github.com/shaperproxy/shaperproxy/conv"
	"github.com/tidwall/gjson"
)

// State is the guard's memory of one conversation, kept by the wiring
// between requests (MarshalBinary / UnmarshalBinary) under the
// conversation key. The zero State is a conversation the guard has not
// acted on. Decide and ObserveResponse take a State and return the next
// one; they never change the one they were given.
type State struct {
	// AckCallID is the id of the last call covered by the last ECHO
	// notice: that call and every call before it no longer count.
	AckCallID string
	// StallReported is true while a STALL that was already reported
	// (observe) or scheduled (interrupt) continues; it clears when a
	// known measure is no longer stalled.
	StallReported bool
	// StallPending is true when an interrupt notice waits for a request
	// it can be placed in; Pending holds the measure it reports.
	StallPending bool
	Pending      StallCounts
	// StepDownLeft is the number of further requests whose reasoning
	// effort is lowered.
	StepDownLeft int
	// Notices are the notices placed so far, oldest first (at most
	// MaxNotices). Each is placed again, at the same message, in every
	// later request whose message there is unchanged, so that the model
	// keeps seeing the history it answered to and the request stays the
	// same from one retry to the next.
	Notices []Notice
}

// StallCounts are the numbers a STALL notice or event reports.
type StallCounts struct {
	StepChars, TurnChars, Steps int
}

// MaxNotices bounds State.Notices; the oldest notice is forgotten first.
const MaxNotices = 16

// Notice is a notice placed in a request.
type Notice struct {
	Kind Kind
	// Message is the index of the message the text was appended to.
	Message int
	// Hash is the FNV-1a 64 hash of that message's bytes (before the
	// notice): the notice is placed again only where it still matches.
	Hash uint64
	// Text is the notice, without separator.
	Text string
}

// Placement asks the wiring to append Text to the content of message
// Message (see ApplyPlacements). Several placements may name one message;
// they are appended in order.
type Placement struct {
	Message int
	Text    string
}

// Kind names what happened.
type Kind uint8

// The kinds of Event (and of Notice).
const (
	// EchoNotice: an ECHO notice was placed in this request.
	EchoNotice Kind = iota + 1
	// StallObserved: a STALL was recorded (stall_action = "observe").
	StallObserved
	// StallInterrupted: a STALL notice was placed in this request and
	// the step-down window started (stall_action = "interrupt").
	StallInterrupted
)

// String returns "echo", "stall_observed" or "stall_interrupted", for
// metric labels and log lines.
func (k Kind) String() string {
	switch k {
	case EchoNotice:
		return "echo"
	case StallObserved:
		return "stall_observed"
	case StallInterrupted:
		return "stall_interrupted"
	}
	return fmt.Sprintf("kind(%d)", uint8(k))
}

// Event is one thing for the wiring to log and count. It never holds
// reasoning or tool output text.
type Event struct {
	Kind Kind
	// Tool, Count and Sig describe an ECHO: the tool, how many times the
	// same call failed in a row, and the call's signature hash.
	Tool  string
	Count int
	Sig   Sig
	// Stall is the STALL measure; Effort the request's reasoning effort
	// ("" when the request sets none).
	Stall  Stall
	Effort string
}

// Decision is what the guard does to one request.
type Decision struct {
	// Placements: notices to append to message contents, in order.
	// Empty when there is nothing to say.
	Placements []Placement
	// StepDown is true when the request's reasoning effort is to be
	// lowered (see StepDown).
	StepDown bool
	// Events happened while deciding.
	Events []Event
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
func (g *Guard) Decide(st State, req *conv.Request, sig Signals) (Decision, State) {
	var d Decision
	if !g.Enabled() {
		return d, st
	}
	for _, n := range st.Notices {
		if anchored(req, n) && placeable(req, n.Message) {
			d.Placements = append(d.Placements, Placement{n.Message, n.Text})
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
func (g *Guard) ObserveResponse(st State, req *conv.Request, sig Signals, c conv.Choice) ([]Event, State) {
	return g.ObserveStep(st, req, sig, StepChars(c))
}

// ObserveStep is ObserveResponse for a caller that counted the response's
// reasoning characters as it streamed by (so it need not keep the text).
func (g *Guard) ObserveStep(st State, req *conv.Request, sig Signals, stepChars int) ([]Event, State) {
	if !g.Enabled() {
		return nil, st
	}
	var d Decision
	g.noteStall(&d, &st, req, g.stall(true, stepChars, sig.Stall.TurnChars+stepChars, sig.Stall.Steps+1))
	return d.Events, st
}

// decideEcho places an ECHO notice at the result of the newest failed
// call when the run after the acknowledged call reaches the threshold.
func (g *Guard) decideEcho(d *Decision, st *State, req *conv.Request, e Echo) {
	c, ok := e.Newest()
	if !ok {
		return
	}
	n := e.Count(st.AckCallID)
	if n < g.threshold || len(c.ID) > maxIDLen || !placeable(req, c.Result) {
		return
	}
	g.place(d, st, req, EchoNotice, c.Result, EchoText(e.Tool, n))
	st.AckCallID = c.ID
	d.Events = append(d.Events, Event{Kind: EchoNotice, Tool: e.Tool, Count: n, Sig: e.Sig})
}

// noteStall applies a STALL measure to the report-once state.
func (g *Guard) noteStall(d *Decision, st *State, req *conv.Request, s Stall) {
	switch {
	case !s.Known:
	case !s.Stalled:
		st.StallReported = false
	case st.StallReported:
	case g.interrupt:
		st.StallReported = true
		st.StallPending = true
		st.Pending = StallCounts{s.StepChars, s.TurnChars, s.Steps}
	default:
		st.StallReported = true
		d.Events = append(d.Events, Event{Kind: StallObserved, Stall: s, Effort: Effort(req.Body)})
	}
}

// placeStall places a pending interrupt at the end of the request: on its
// last message when that is a tool result, or a user message inside the
// open turn. A request that starts a new turn drops it: the stalled turn
// is over.
func (g *Guard) placeStall(d *Decision, st *State, req *conv.Request, sig Signals) {
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
	g.place(d, st, req, StallInterrupted, last, StallText(p.StepChars, p.TurnChars))
	st.StallPending = false
	st.StepDownLeft = g.stepDown
	s := g.stall(true, p.StepChars, p.TurnChars, p.Steps)
	d.Events = append(d.Events, Event{Kind: StallInterrupted, Stall: s, Effort: Effort(req.Body)})
}

// place adds a placement and remembers it as a notice.
func (g *Guard) place(d *Decision, st *State, req *conv.Request, k Kind, i int, text string) {
	d.Placements = append(d.Placements, Placement{i, text})
	n := Notice{Kind: k, Message: i, Hash: messageHash(req, i), Text: text}
	st.Notices = append(slices.Clip(st.Notices), n)
	if len(st.Notices) > MaxNotices {
		st.Notices = st.Notices[len(st.Notices)-MaxNotices:]
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
	c := gjson.GetBytes(req.Body[m.Start:m.End], "content")
	return !c.Exists() || c.Type == gjson.Null || c.Type == gjson.String || c.IsArray()
}

func anchored(req *conv.Request, n Notice) bool {
	return n.Message >= 0 && n.Message < len(req.Messages) && messageHash(req, n.Message) == n.Hash
}

func messageHash(req *conv.Request, i int) uint64 {
	m := &req.Messages[i]
	h := fnv.New64a()
	h.Write(req.Body[m.Start:m.End])
	return h.Sum64()
}

// Effort returns the request's reasoning effort: the top-level
// "reasoning_effort" string, else "reasoning.effort" (OpenRouter), else "".
// It reads the body once; Decide calls it only for an Event.
func Effort(body []byte) string {
	var top, nested string
	gjson.ParseBytes(body).ForEach(func(k, v gjson.Result) bool {
		switch {
		case k.Str == "reasoning_effort" && v.Type == gjson.String:
			top = v.Str
		case k.Str == "reasoning" && v.IsObject():
			if e := v.Get("effort"); e.Type == gjson.String {
				nested = e.Str
			}
		}
		return true
	})
	if top != "" {
		return top
	}
	return nested
}

// EchoText is the ECHO notice for a tool whose same call failed count
// times in a row.
func EchoText(tool string, count int) string {
	return fmt.Sprintf("Note from the shaperproxy guard: the same call to the tool %q, with the same arguments, "+
		"has now failed %d times in a row. Repeating it unchanged is unlikely to help; "+
		"change the arguments or the approach.", cleanName(tool), count)
}

// StallText is the STALL notice for a step of stepChars characters of
// reasoning in a turn of turnChars.
func StallText(stepChars, turnChars int) string {
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
