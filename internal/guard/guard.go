package guard

import (
	"fmt"

	"github.com/shaperproxy/shaperproxy/conv"
	"github.com/shaperproxy/shaperproxy/internal/resolved"
)

// Guard is a compiled Config. It holds no per-conversation state (see
// Projection and State), never changes after New but for a memo of the
// notices' anchors, and is safe for concurrent use.
type Guard struct {
	cfg       Config
	rules     failureRules
	threshold int
	stepChars int
	turnChars int
	stepDown  int
	interrupt bool
	hashes    *resolved.Cache[conv.RawKey, uint64] // the notices' anchors by message (anchor)
}

// New validates c and compiles it. A disabled Config gives a Guard whose
// Update, Fold, Decide and ObserveResponse do nothing.
func New(c Config) (*Guard, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	g := &Guard{cfg: c, hashes: resolved.New[conv.RawKey, uint64](maxHashes)}
	if !c.Enabled {
		return g, nil
	}
	rules, err := newFailureRules(c)
	if err != nil {
		return nil, fmt.Errorf("guard.failure_lines: %w", err)
	}
	g.rules = rules
	g.threshold = int(c.EchoThreshold)
	g.stepChars = int(c.StallStepChars)
	g.turnChars = int(c.StallTurnChars)
	g.stepDown = int(c.StepDownRequests)
	g.interrupt = c.StallAction == StallInterrupt
	return g, nil
}

// Enabled reports whether the guard is on.
func (g *Guard) Enabled() bool { return g.cfg.Enabled }

// Config returns the configuration g was built from.
func (g *Guard) Config() Config { return g.cfg }

// Lowering returns the effort lowering of a route: its StepDownMap entry,
// else DefaultLowering(upstream).
func (g *Guard) Lowering(route, upstream string) Lowering {
	if l, ok := g.cfg.StepDownMap[route]; ok {
		return l
	}
	return defaultLowering(upstream)
}

// signals are what one fold of a request's history finds. A signals value
// depends only on the messages and the Guard's Config: a Projection's
// Update and Fold return equal values for the same request.
type signals struct {
	// Echo is the run of failed calls at the tail of the history.
	Echo echo
	// Stall is the reasoning measure of the open turn.
	Stall stall
	// NewTurn is true when the request starts a turn (conv's
	// StartsNewTurn): its open turn has no assistant message yet.
	NewTurn bool
}

// echo is the tail run of failures of one signature, in call order. It
// ignores acknowledgement; Count applies it.
type echo struct {
	// Chain holds the calls of the run, oldest first; nil when the newest
	// call of the history is not a trusted failure with known arguments.
	Chain []call
	// Tool is the tool name of the run.
	Tool string
	// Sig is the signature hash shared by the run.
	Sig sig
}

// call is one call of an ECHO chain.
type call struct {
	// ID is the call's tool_call_id.
	ID string
	// Seq is the call's position in call order (0 = the first call of the
	// history).
	Seq int
	// Result is the message index of the call's first result.
	Result int
}

// Count returns the number of calls in the run made after the call ackID
// (the last call covered by the previous notice), that id at any
// position. When ackID is not in the run, every call of the run counts:
// the acknowledged call is older than the run (or gone from the history).
func (e echo) Count(ackID string) int { return e.countAfter(ackID, -1) }

// countAfter is Count for the call acknowledged at call position ackSeq
// (-1: unknown, any position). An id can name several calls of the run
// (ids reused across steps): the acknowledged one is the newest with the
// id at or before ackSeq; calls with the id made after it count. A
// history shortened at the front only moves calls to lower positions, so
// the acknowledged call is still found.
func (e echo) countAfter(ackID string, ackSeq int) int {
	n := 0
	for i := len(e.Chain) - 1; i >= 0; i-- {
		c := e.Chain[i]
		if ackID != "" && c.ID == ackID && (ackSeq < 0 || c.Seq <= ackSeq) {
			break
		}
		n++
	}
	return n
}

// Newest returns the newest call of the run; ok is false when the run is
// empty.
func (e echo) Newest() (c call, ok bool) {
	if len(e.Chain) == 0 {
		return call{}, false
	}
	return e.Chain[len(e.Chain)-1], true
}

// stall is the reasoning measure of a step and of the open turn.
type stall struct {
	// Known is false when the measure cannot be judged: the request has
	// no user message, or the newest step of the open turn carries no
	// reasoning field (a client that does not send reasoning back). A
	// measure that is not Known neither reports nor clears a STALL.
	Known bool
	// Stalled is OverStep || OverTurn.
	Stalled bool
	// OverStep: StepChars reached the step threshold.
	OverStep bool
	// OverTurn: TurnChars reached the turn threshold.
	OverTurn bool
	// StepChars is the reasoning length of the newest step, in characters
	// (runes), before any visible content or tool call.
	StepChars int
	// TurnChars is the reasoning length across the steps of the open turn.
	TurnChars int
	// Steps is the number of steps (assistant messages) of the open turn.
	Steps int
}

// stall fills the thresholds into a measure.
func (g *Guard) stall(known bool, step, turn, steps int) stall {
	s := stall{Known: known, StepChars: step, TurnChars: turn, Steps: steps}
	s.OverStep = g.stepChars > 0 && step >= g.stepChars
	s.OverTurn = g.turnChars > 0 && turn >= g.turnChars
	s.Stalled = s.OverStep || s.OverTurn
	return s
}

// Fold folds the whole history of req once and returns its signals. It is
// the reference for Projection.Update.
func (g *Guard) Fold(req *conv.Request) signals {
	if !g.Enabled() {
		return signals{}
	}
	var f fold
	f.init()
	for i := range req.Messages {
		f.add(g, req.Body, &req.Messages[i])
	}
	return f.signals(g)
}
