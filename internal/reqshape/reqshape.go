// Package reqshape applies reasoning shaping to a whole chat completions
// request: it chooses the rule for the route and model, picks the
// reasoning blocks the rule may touch, shapes each with package shaping
// and edits the body in place.
//
// It keeps the protocol rules of ../shared/PROTOCOLS.md: only the plain
// string reasoning field of assistant messages is edited ("reasoning_content"
// or "reasoning", whichever is there), never renamed and never emptied;
// signed or encrypted reasoning and every message before it are left
// byte-identical; every byte outside the edited strings is kept.
//
// Apply is pure and deterministic: the same body and rules give the same
// bytes, so the upstream's prompt cache keeps hitting from one request to
// the next.
package reqshape

import (
	"bytes"
	"fmt"
	"path"
	"strings"

	"github.com/shaperproxy/shaperproxy/conv"
	"github.com/shaperproxy/shaperproxy/internal/jsonstr"
	"github.com/shaperproxy/shaperproxy/shaping"
	"github.com/tidwall/gjson"
)

// shapeRule chooses what happens to the reasoning of one route and model.
type shapeRule struct {
	// Route and Model are glob patterns (path.Match); "" matches all.
	Route string
	Model string
	// Shaping is the operation and its budget. OpDrop removes the field
	// only where the protocol lets it go (see Apply); elsewhere it
	// behaves as OpExtract.
	Shaping shaping.Options
	// KeepRecent is the number of latest assistant steps whose reasoning
	// is left as it is (default 1: the step whose tool results are being
	// returned now). Use a negative value to shape every step.
	KeepRecent int
	// ThinkTags opts in to shaping an inline <think>…</think> block at
	// the start of an assistant message's string content.
	ThinkTags bool
}

// rules are tried in order; the first whose patterns match applies. With
// no match the request is left alone.
type rules []shapeRule

// Match returns the first rule for route and model.
func (rs rules) Match(route, model string) (shapeRule, bool) {
	for _, r := range rs {
		if glob(r.Route, route) && glob(r.Model, model) {
			return r, true
		}
	}
	return shapeRule{}, false
}

func glob(pattern, s string) bool {
	if pattern == "" || pattern == "*" {
		return true
	}
	ok, err := path.Match(pattern, s)
	return err == nil && ok
}

// Validate checks every rule and names the first invalid one.
func (rs rules) Validate() error {
	for i, r := range rs {
		if _, err := path.Match(r.Route, ""); err != nil {
			return fmt.Errorf("rule %d: route pattern %q: %w", i, r.Route, err)
		}
		if _, err := path.Match(r.Model, ""); err != nil {
			return fmt.Errorf("rule %d: model pattern %q: %w", i, r.Model, err)
		}
		if err := r.Shaping.Validate(); err != nil {
			return fmt.Errorf("rule %d: %w", i, err)
		}
	}
	return nil
}

// block is one reasoning block the request carried.
type block struct {
	Message  int    // index in messages
	Field    string // "reasoning_content", "reasoning" or "content" (<think>)
	Original string
	Shaped   string // == Original when the block went out unchanged
	Changed  bool
}

// result is the outcome of Apply.
type result struct {
	// Body is the request to send; it is the input slice itself when
	// nothing changed.
	Body []byte
	// Blocks lists every non-empty reasoning block of assistant messages,
	// changed or not, in message order.
	Blocks []block
	// Shaped and Raw count the blocks that went out changed and as they
	// were.
	Shaped, Raw int
}

// apply shapes the reasoning of req (a view of its body) under rule.
func apply(req *conv.Request, rule shapeRule) result { return applyMemo(req, rule, nil) }

// applyMemo is Apply with shaped texts remembered in memo (nil: none).
func applyMemo(req *conv.Request, rule shapeRule, memo *memo) result {
	res := result{Body: req.Body}
	keep := keepFrom(req, rule.KeepRecent)
	floor := lastSigned(req)
	noTools := !hasTools(req.Body)
	var edits []conv.Edit
	for i := range req.Messages {
		m := &req.Messages[i]
		if m.Role != "assistant" {
			continue
		}
		editable := i > floor && i < keep && !m.Signed
		b, e := shapeReasoning(req.Body, m, rule, memo, editable, noTools)
		if b != nil {
			res.Blocks = append(res.Blocks, *b)
		}
		edits = append(edits, e...)
		if tb, te := shapeThink(req.Body, m, rule, memo, editable); tb != nil {
			res.Blocks = append(res.Blocks, *tb)
			edits = append(edits, te...)
		}
	}
	for _, b := range res.Blocks {
		if b.Changed {
			res.Shaped++
		} else {
			res.Raw++
		}
	}
	if len(edits) > 0 {
		res.Body = conv.ApplyEdits(req.Body, edits)
	}
	return res
}

// keepFrom returns the index of the first assistant message whose
// reasoning is kept (len(messages) when none is).
func keepFrom(req *conv.Request, keepRecent int) int {
	if keepRecent == 0 {
		keepRecent = 1
	}
	if keepRecent < 0 {
		return len(req.Messages)
	}
	seen := 0
	for i := len(req.Messages) - 1; i >= 0; i-- {
		if req.Messages[i].Role == "assistant" {
			seen++
			if seen == keepRecent {
				return i
			}
		}
	}
	return 0
}

// lastSigned returns the index of the last message carrying signed
// reasoning, or -1: nothing up to it may change (PROTOCOLS.md rule 2).
func lastSigned(req *conv.Request) int {
	for i := len(req.Messages) - 1; i >= 0; i-- {
		if req.Messages[i].Signed {
			return i
		}
	}
	return -1
}

func hasTools(body []byte) bool {
	return bytes.Contains(body, []byte(`"tools"`))
}

// shapeReasoning handles the reasoning field of one assistant message.
func shapeReasoning(body []byte, m *conv.Message, rule shapeRule, memo *memo, editable, noTools bool) (*block, []conv.Edit) {
	if m.ReasoningStart < 0 || m.Reasoning == "" {
		return nil, nil
	}
	b := &block{Message: m.Index, Field: m.ReasoningField, Original: m.Reasoning, Shaped: m.Reasoning}
	if !editable {
		return b, nil
	}
	opts := rule.Shaping
	if opts.Op == shaping.OpDrop {
		if noTools && len(m.ToolCalls) == 0 {
			if e, ok := dropField(body, m); ok {
				b.Shaped, b.Changed = "", true
				return b, []conv.Edit{e}
			}
		}
		opts.Op = shaping.OpExtract // the protocol needs the field: keep it, shaped
	}
	out, changed := memo.Shape(m.Reasoning, opts)
	if !changed || out == "" {
		return b, nil
	}
	b.Shaped, b.Changed = out, true
	return b, []conv.Edit{{Start: m.ReasoningStart, End: m.ReasoningEnd, Repl: jsonstr.Quote(out)}}
}

// dropField removes `"field": value` and one adjacent comma from the
// message object. It refuses (false) when the layout is not the plain one
// it can cut safely.
func dropField(body []byte, m *conv.Message) (conv.Edit, bool) {
	key := []byte(`"` + m.ReasoningField + `"`)
	i := skipSpaceBack(body, m.ReasoningStart-1)
	if i < 0 || body[i] != ':' {
		return conv.Edit{}, false
	}
	i = skipSpaceBack(body, i-1)
	keyStart := i + 1 - len(key)
	if keyStart < m.Start || !bytes.Equal(body[keyStart:i+1], key) {
		return conv.Edit{}, false
	}
	j := skipSpaceBack(body, keyStart-1)
	switch {
	case j >= m.Start && body[j] == ',':
		return conv.Edit{Start: j, End: m.ReasoningEnd}, true
	case j >= m.Start && body[j] == '{':
		k := skipSpace(body, m.ReasoningEnd)
		if k < m.End && body[k] == ',' {
			return conv.Edit{Start: keyStart, End: skipSpace(body, k+1)}, true
		}
	}
	return conv.Edit{}, false
}

func skipSpaceBack(b []byte, i int) int {
	for i >= 0 && isSpace(b[i]) {
		i--
	}
	return i
}

func skipSpace(b []byte, i int) int {
	for i < len(b) && isSpace(b[i]) {
		i++
	}
	return i
}

func isSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' }

// shapeThink shapes an inline <think>…</think> block at the start of the
// string content, when the rule opts in.
func shapeThink(body []byte, m *conv.Message, rule shapeRule, memo *memo, editable bool) (*block, []conv.Edit) {
	if !rule.ThinkTags || !m.ContentIsString {
		return nil, nil
	}
	c := gjson.GetBytes(body[m.Start:m.End], "content")
	if c.Type != gjson.String || c.Index == 0 {
		return nil, nil
	}
	cStart := m.Start + c.Index
	cEnd := cStart + len(c.Raw)
	const open, close = "<think>", "</think>"
	trimmed := strings.TrimLeft(m.Content, " \t\r\n")
	if !strings.HasPrefix(trimmed, open) {
		return nil, nil
	}
	lead := m.Content[:len(m.Content)-len(trimmed)]
	inner, rest, ok := strings.Cut(trimmed[len(open):], close)
	if !ok || strings.TrimSpace(inner) == "" {
		return nil, nil
	}
	b := &block{Message: m.Index, Field: "content", Original: inner, Shaped: inner}
	if !editable {
		return b, nil
	}
	opts := rule.Shaping
	if opts.Op == shaping.OpDrop {
		opts.Op = shaping.OpExtract
	}
	out, changed := memo.Shape(inner, opts)
	if !changed || out == "" {
		return b, nil
	}
	b.Shaped, b.Changed = out, true
	content := lead + open + out + close + rest
	return b, []conv.Edit{{Start: cStart, End: cEnd, Repl: jsonstr.Quote(content)}}
}
