package conv

// Turn is one user turn of a conversation: the user message that opened it
// and everything up to the next turn's opener (see the package doc for the
// rules).
type Turn struct {
	// Ordinal is the 1-based turn number within the request.
	Ordinal int
	// Start is the index of the message that opened the turn.
	Start int
	// End is the index one past the turn's last message.
	End int
	// Steps holds one step per assistant message of the turn, in order.
	Steps []Step
	// Inputs holds the indexes of the turn's other messages: the opening
	// user message, users or systems injected later, and tool results
	// that match no step.
	Inputs []int
}

// Step is one model response within a turn.
type Step struct {
	// Assistant is the index of the assistant message.
	Assistant int
	// ToolResults are the indexes of the tool messages answering the
	// step's tool calls, in message order.
	ToolResults []int
}

// Contains reports whether message index i lies within the turn.
func (t Turn) Contains(i int) bool { return i >= t.Start && i < t.End }

// inToolLoop reports whether the turn's last step has tool calls, so a user
// message arriving now belongs to the turn (PROTOCOLS.md rule 4).
func (t *Turn) inToolLoop(msgs []Message) bool {
	n := len(t.Steps)
	return n > 0 && len(msgs[t.Steps[n-1].Assistant].ToolCalls) > 0
}

// Turns splits the request's messages into turns. Messages before the
// first user message belong to no turn. The result is computed once per
// Request and shared: callers must not modify it.
func (r *Request) Turns() []Turn {
	r.turnsOnce.Do(func() {
		var b turnBuilder
		for i := range r.Messages {
			b.add(r.Messages, i)
		}
		r.turns = b.finish(len(r.Messages))
	})
	return r.turns
}

// OpenTurn returns the last turn, the one the request continues or starts.
// ok is false when the request has no user message.
func (r *Request) OpenTurn() (t Turn, ok bool) {
	turns := r.Turns()
	if len(turns) == 0 {
		return Turn{}, false
	}
	return turns[len(turns)-1], true
}

// TurnCount returns len(r.Turns()) and r.StartsNewTurn() without building
// the turns (their steps, inputs and tool results): what a caller that
// needs only these pays for a long history.
func (r *Request) TurnCount() (n int, startsNew bool) {
	n, _, last := r.scanTurns()
	return n, n > 0 && last < 0
}

// OpenTurnStart returns the Start of OpenTurn's turn without building the
// turns (0 and false when the request has no user message).
func (r *Request) OpenTurnStart() (start int, ok bool) {
	n, start, _ := r.scanTurns()
	return start, n > 0
}

// scanTurns follows the turn rules of Turns: n turns, the last opened at
// message start, whose last assistant message is last (-1: none).
// They were folded in as the messages were placed (tally).
func (r *Request) scanTurns() (n, start, last int) {
	t := r.tallied()
	return t.turns, t.turnStart, t.turnLast
}

// StartsNewTurn reports whether the request starts a turn: its open turn
// has no assistant message yet. It is false when there is no user message.
func (r *Request) StartsNewTurn() bool {
	t, ok := r.OpenTurn()
	return ok && len(t.Steps) == 0
}

// LastAssistant returns the index of the last assistant message, or -1.
func (r *Request) LastAssistant() int {
	for i := len(r.Messages) - 1; i >= 0; i-- {
		if r.Messages[i].Role == RoleAssistant {
			return i
		}
	}
	return -1
}

// ToolCallsPending reports whether the last assistant message has tool
// calls that the tool messages after it do not all answer. A tool message
// answers the call with its tool_call_id; a tool message whose id matches
// no call (or is empty) answers one of the calls left over.
func (r *Request) ToolCallsPending() bool {
	a := r.LastAssistant()
	if a < 0 {
		return false
	}
	open := make(map[string]int)
	for _, c := range r.Messages[a].ToolCalls {
		open[c.ID]++
	}
	left, anonymous := len(r.Messages[a].ToolCalls), 0
	for _, m := range r.Messages[a+1:] {
		if m.Role != RoleTool {
			continue
		}
		if open[m.ToolCallID] > 0 {
			open[m.ToolCallID]--
			left--
		} else {
			anonymous++
		}
	}
	return left > anonymous
}

// turnBuilder accumulates turns message by message.
type turnBuilder struct {
	turns []Turn
	cur   *Turn
	// callStep maps a tool call id of the current turn to the index in
	// cur.Steps of the latest step that made the call.
	callStep map[string]int
}

// add places message i.
func (b *turnBuilder) add(msgs []Message, i int) {
	m := msgs[i]
	switch {
	case m.Role == RoleUser && (b.cur == nil || !b.cur.inToolLoop(msgs)):
		b.open(i)
		b.cur.Inputs = append(b.cur.Inputs, i)
	case b.cur == nil:
		// prelude: belongs to no turn
	case m.Role == RoleAssistant:
		b.addStep(m)
	case m.Role == RoleTool:
		b.addToolResult(m)
	default:
		b.cur.Inputs = append(b.cur.Inputs, i)
	}
}

// open starts a new turn at message i.
func (b *turnBuilder) open(i int) {
	if b.cur != nil {
		b.cur.End = i
		b.turns = append(b.turns, *b.cur)
	}
	b.cur = &Turn{Ordinal: len(b.turns) + 1, Start: i}
	b.callStep = make(map[string]int)
}

// addStep records assistant message m as a new step.
func (b *turnBuilder) addStep(m Message) {
	b.cur.Steps = append(b.cur.Steps, Step{Assistant: m.Index})
	for _, c := range m.ToolCalls {
		if c.ID != "" {
			b.callStep[c.ID] = len(b.cur.Steps) - 1
		}
	}
}

// addToolResult attaches tool message m to the step whose call it answers,
// else to the latest step, else to the turn's inputs.
func (b *turnBuilder) addToolResult(m Message) {
	s, ok := b.callStep[m.ToolCallID]
	if !ok {
		s = len(b.cur.Steps) - 1
	}
	if s < 0 {
		b.cur.Inputs = append(b.cur.Inputs, m.Index)
		return
	}
	b.cur.Steps[s].ToolResults = append(b.cur.Steps[s].ToolResults, m.Index)
}

// finish closes the open turn at message count n and returns all turns.
func (b *turnBuilder) finish(n int) []Turn {
	if b.cur != nil {
		b.cur.End = n
		b.turns = append(b.turns, *b.cur)
	}
	return b.turns
}
