package deliberate

import (
	"fmt"
	"strings"

	"github.com/shaperproxy/shaperproxy/conv"
	"github.com/shaperproxy/shaperproxy/internal/review"
)

// child is one branch's request.
type child struct {
	Branch Branch
	Body   []byte
	// Seed is the number of the primary's messages the child carries byte
	// for byte (fork: all; mid-fork: those before the first masked step;
	// fresh: none).
	Seed int
	// Requested and Projected are masked-review's K: asked and clamped to
	// the complete steps there are.
	Requested, Projected int
}

// buildChild builds the request of one branch from the primary request
// (the one whose response called deliberate). model "" keeps the
// primary's.
func buildChild(primary *conv.Request, a Args, b Branch, model string, maxSnapshot int) (child, error) {
	c := child{Branch: b}
	var text string
	switch b.Role {
	case RoleAlternative:
		text = alternativeTask(a)
	case RoleAudit:
		c.Seed = len(primary.Messages)
		text = auditTask(a)
	case RoleMasked:
		from, k := recentSteps(primary, b.RecentSteps)
		c.Requested, c.Projected = b.RecentSteps, k
		if k == 0 {
			return c, fmt.Errorf("no completed step to review yet")
		}
		p := review.ProjectMessages(primary, from, fmt.Sprintf("projection of the actor's last %d completed steps, reasoning hidden", k))
		if p.Chars > maxSnapshot {
			return c, fmt.Errorf("the snapshot of the last %d steps has %d characters (the limit is %d)", k, p.Chars, maxSnapshot)
		}
		c.Seed = from
		text = maskedTask(a, k) + "\n\n" + p.Text
	}
	body, err := review.ChildRequest(primary, c.Seed, text, model)
	if err != nil {
		return c, err
	}
	c.Body = body
	return c, nil
}

// recentSteps returns the index of the earliest of the last k complete
// steps of req and how many there are (k clamped). A step is an assistant
// message whose tool calls all have a result in the request; the step
// calling deliberate is not in the request, so it is never one.
func recentSteps(req *conv.Request, k int) (from, n int) {
	answered := map[string]bool{}
	for _, m := range req.Messages {
		if m.Role == conv.RoleTool && m.ToolCallID != "" {
			answered[m.ToolCallID] = true
		}
	}
	from = len(req.Messages)
	for i := len(req.Messages) - 1; i >= 0 && n < k; i-- {
		m := req.Messages[i]
		if m.Role != conv.RoleAssistant || !complete(m, answered) {
			continue
		}
		from, n = i, n+1
	}
	return from, n
}

func complete(m conv.Message, answered map[string]bool) bool {
	for _, c := range m.ToolCalls {
		if !answered[c.ID] {
			return false
		}
	}
	return true
}

// The branch tasks. Each says who asks (the proxy, for the agent), what
// the branch sees, what to look for, and the packet's shape (it mentions
// JSON, which DeepSeek's json_object mode requires of the prompt).
func alternativeTask(a Args) string {
	var b strings.Builder
	b.WriteString("Independent second opinion, requested by the proxy on behalf of an agent (this is not a message from a user).\n\n")
	b.WriteString("You see only the goal and the context below: not the agent's conversation and not its plan, so that your answer does not follow its path. ")
	b.WriteString("Work out how you would reach the goal: the approach you would take, the risks and unknowns you see, and what you would check first. Do not call tools.\n\n")
	fmt.Fprintf(&b, "Goal:\n%s\n", a.Goal)
	if strings.TrimSpace(a.Context) != "" {
		fmt.Fprintf(&b, "\nContext:\n%s\n", a.Context)
	}
	b.WriteString("\n" + packetSpec(RoleAlternative))
	return b.String()
}

func auditTask(a Args) string {
	var b strings.Builder
	b.WriteString("Trajectory audit, requested by the proxy on behalf of the agent whose conversation is above (this is not a message from the user).\n\n")
	b.WriteString("The agent is about to commit to the plan or answer below (the incumbent). Audit it against the conversation: ")
	b.WriteString("errors, conclusions the evidence does not support, unchecked assumptions, steps it skipped, a better alternative. Do not redo the work, do not call tools. Finding nothing is a good answer.\n\n")
	fmt.Fprintf(&b, "Goal:\n%s\n\nIncumbent:\n%s\n", a.Goal, a.Incumbent)
	b.WriteString("\n" + packetSpec(RoleAudit))
	return b.String()
}

func maskedTask(a Args, k int) string {
	var b strings.Builder
	b.WriteString("Masked review, requested by the proxy on behalf of the agent whose conversation is above (this is not a message from the user).\n\n")
	fmt.Fprintf(&b, "The messages above are the real conversation up to the agent's last %d completed steps. ", k)
	b.WriteString("Below, between the SNAPSHOT markers, the proxy wrote those steps without the agent's reasoning: its visible text (its claims, which may be wrong), its tool calls and the tool results. ")
	b.WriteString("Look at what was done without the rationale behind it and find what matters that the agent may have missed. Do not redo the work, do not call tools. Finding nothing is a good answer.\n\n")
	fmt.Fprintf(&b, "The agent's goal:\n%s\n\n", a.Goal)
	b.WriteString(packetSpec(RoleMasked))
	return b.String()
}

// packetSpec tells the branch the packet's shape (seed 003 §10).
func packetSpec(r Role) string {
	return `Reply with one JSON object and nothing else:
{"role":"` + string(r) + `","status":"update" or "no_update","items":[{"kind":"…","certainty":"…","content":"…"}]}
- status "no_update" when you have nothing that should change the agent's course; then omit "items".
- status "update" with 1 to 8 items otherwise.
- kind: "observation", "conclusion", "assumption", "unknown", "possible_error" or "suggestion" (an action such as running a test: you cannot run anything).
- certainty: "certain", "likely" or "uncertain", your own estimate.
- content: one or two plain sentences, specific enough to act on; no duplicates; at most 4000 characters over all items.`
}
