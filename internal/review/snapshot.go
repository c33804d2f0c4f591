package review

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/shaperproxy/shaperproxy/conv"
	"github.com/tidwall/gjson"
)

// snapshot is the projection of the open turn that the child reviews.
type snapshot struct {
	text            string // the delimited snapshot, markers included
	chars           int    // characters (runes) of text
	images          int    // image references
	reasoningMasked int    // reasoning blocks left out
	proseMasked     int    // assistant visible texts left out (action-only)
}

// projector writes the entries of a snapshot.
type projector struct {
	req        *conv.Request
	actionOnly bool
	b          strings.Builder
	entries    int
	step       int
	calls      map[string]string // tool call id -> function name, within the turn
	snap       snapshot
}

// project builds the snapshot of turn t of req, with draft as its last
// step. Nothing is truncated: the caller checks the size.
func project(req *conv.Request, t conv.Turn, draft Draft, actionOnly bool) snapshot {
	p := &projector{req: req, actionOnly: actionOnly, calls: make(map[string]string)}
	for i := t.Start; i < t.End; i++ {
		p.message(req.Messages[i])
	}
	p.draft(draft)
	return p.finish("projection of the current turn, reasoning hidden")
}

// finish frames the entries between SNAPSHOT markers named by a nonce of
// their content.
func (p *projector) finish(title string) snapshot {
	body := p.b.String()
	sum := sha256.Sum256([]byte(body))
	nonce := hex.EncodeToString(sum[:6])
	p.snap.text = fmt.Sprintf("=== SNAPSHOT %s: %s ===\n%s=== END SNAPSHOT %s ===", nonce, title, body, nonce)
	p.snap.chars = utf8.RuneCountInString(p.snap.text)
	return p.snap
}

// Projection is messages of a request as the review's snapshot shows
// them: inputs by source, the actor's visible text as its claims, tool
// calls with their arguments, tool results; no reasoning.
type Projection struct {
	Text            string // the framed snapshot
	Chars           int    // characters of Text
	Images          int    // image references
	ReasoningMasked int    // reasoning blocks left out
}

// ProjectMessages projects messages [from, end) of req the way the
// automatic review projects the open turn (the deliberate tool's
// masked-review branch uses it); title says what they are.
func ProjectMessages(req *conv.Request, from int, title string) Projection {
	p := &projector{req: req, calls: make(map[string]string)}
	for i := from; i < len(req.Messages); i++ {
		p.message(req.Messages[i])
	}
	s := p.finish(title)
	return Projection{Text: s.text, Chars: s.chars, Images: s.images, ReasoningMasked: s.reasoningMasked}
}

// entry starts entry header and writes text as its body.
func (p *projector) entry(header, text string) {
	p.entries++
	fmt.Fprintf(&p.b, "[%d] %s\n%s\n\n", p.entries, header, text)
}

// message projects one message of the turn.
func (p *projector) message(m conv.Message) {
	switch m.Role {
	case conv.RoleAssistant:
		p.assistant(m)
	case conv.RoleTool:
		p.toolResult(m)
	default:
		p.input(m)
	}
}

// source names who a turn input came from.
func source(role string) string {
	switch role {
	case conv.RoleUser, conv.RoleSystem, conv.RoleDeveloper:
		return role
	}
	return fmt.Sprintf("other (role %q)", role)
}

// input projects a user, system, developer or other message.
func (p *projector) input(m conv.Message) {
	text := p.parts(m, false)
	p.entry(fmt.Sprintf("input from %s (message %d):", source(m.Role), m.Index), text)
}

// assistant projects one step of the actor: its visible text (unless
// action-only), its images and its tool calls. Reasoning is never read.
func (p *projector) assistant(m conv.Message) {
	p.step++
	if (m.HasReasoningKey && m.Reasoning != "") || m.Signed {
		p.snap.reasoningMasked++
	}
	if p.actionOnly {
		if strings.TrimSpace(m.Content) != "" || m.Images > 0 {
			p.snap.proseMasked++
		}
	} else if text := p.parts(m, true); strings.TrimSpace(text) != "" {
		p.entry(fmt.Sprintf("actor, step %d, visible text (the actor's claims; they may be wrong) (message %d):", p.step, m.Index), text)
	}
	p.toolCalls(m.ToolCalls, fmt.Sprintf("message %d", m.Index))
}

// draft projects the draft as the turn's last step.
func (p *projector) draft(d Draft) {
	p.step++
	if d.Reasoning != "" {
		p.snap.reasoningMasked++
	}
	text, hadThink := stripThink(d.Content)
	if hadThink {
		p.snap.reasoningMasked++
	}
	if p.actionOnly {
		if strings.TrimSpace(text) != "" {
			p.snap.proseMasked++
		}
	} else if strings.TrimSpace(text) != "" {
		p.entry(fmt.Sprintf("actor, step %d (the draft it is about to end the turn with), visible text (the actor's claims; they may be wrong):", p.step), text)
	}
	p.toolCalls(d.ToolCalls, "the draft")
}

// toolCalls projects the calls of one step, arguments verbatim.
func (p *projector) toolCalls(calls []conv.ToolCall, where string) {
	for i, c := range calls {
		if c.ID != "" {
			p.calls[c.ID] = c.Name
		}
		p.entry(fmt.Sprintf("actor, step %d, tool call %d: %s (id %q, %s), arguments:", p.step, i+1, c.Name, c.ID, where), c.Arguments)
	}
}

// toolResult projects a tool message: its content (result or error text).
func (p *projector) toolResult(m conv.Message) {
	name := m.Name
	if name == "" {
		name = p.calls[m.ToolCallID]
	}
	header := fmt.Sprintf("tool result for call id %q", m.ToolCallID)
	if name != "" {
		header += " (" + name + ")"
	}
	p.entry(fmt.Sprintf("%s (message %d):", header, m.Index), p.parts(m, false))
}

// parts returns the visible content of message m: the string, or each
// content part in order (text as is, images and other media as references).
// For assistant messages, an inline <think> block and reasoning parts are
// left out and images are dropped in action-only mode.
func (p *projector) parts(m conv.Message, assistant bool) string {
	c := gjson.GetBytes(p.req.Body[m.Start:m.End], "content")
	if !c.IsArray() {
		text := m.Content
		if assistant {
			var hadThink bool
			if text, hadThink = stripThink(text); hadThink {
				p.snap.reasoningMasked++
			}
		}
		return text
	}
	var out []string
	c.ForEach(func(_, part gjson.Result) bool {
		if s, ok := p.part(m, part, assistant); ok {
			out = append(out, s)
		}
		return true
	})
	return strings.Join(out, "\n")
}

// part renders one content part of message m.
func (p *projector) part(m conv.Message, part gjson.Result, assistant bool) (string, bool) {
	typ := str(part.Get("type"))
	switch typ {
	case "text", "input_text", "output_text":
		t := part.Get("text")
		if t.Type != gjson.String {
			return "", false
		}
		if assistant {
			s, _ := stripThink(t.Str)
			return s, true
		}
		return t.Str, true
	case "image_url", "input_image", "image":
		if assistant && p.actionOnly {
			return "", false
		}
		p.snap.images++
		return fmt.Sprintf("[image %d: %s part of message %d]", p.snap.images, typ, m.Index), true
	case "thinking", "redacted_thinking", "reasoning":
		return "", false
	}
	if typ == "" {
		typ = "untyped"
	}
	return fmt.Sprintf("[%s part of message %d, not shown]", typ, m.Index), true
}

// stripThink removes an inline <think>…</think> block at the start of s
// (Qwen-style reasoning inside content). Without a closing tag all of s
// is reasoning.
func stripThink(s string) (string, bool) {
	t := strings.TrimLeftFunc(s, unicode.IsSpace)
	if !strings.HasPrefix(t, "<think>") {
		return s, false
	}
	_, after, ok := strings.Cut(t, "</think>")
	if !ok {
		return "", true
	}
	return strings.TrimLeftFunc(after, unicode.IsSpace), true
}
