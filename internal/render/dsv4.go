package render

import (
	"sort"
	"strings"

	"github.com/tidwall/gjson"
)

// DeepSeek V4's special tokens and fixed texts, as its encoder writes
// them (checked against the golden vectors in
// fixtures/templates/deepseek-v4-tests).
const (
	v4User      = "<｜User｜>"
	v4Assistant = "<｜Assistant｜>"
	v4Reminder  = "<｜latest_reminder｜>"
	v4Think     = "<think>"
	v4EndThink  = "</think>"
	v4DSML      = "｜DSML｜"
	v4EffortMax = "Reasoning Effort: Absolute maximum with no shortcuts permitted.\n" +
		"You MUST be very thorough in your thinking and comprehensively decompose the problem to resolve the root cause, rigorously stress-testing your logic against all potential paths, edge cases, and adversarial scenarios.\n" +
		"Explicitly write out your entire deliberation process, documenting every intermediate step, considered alternative, and rejected hypothesis to ensure absolutely no assumption is left unchecked.\n\n"
	v4ToolsHead = "## Tools\n\nYou have access to a set of tools to help answer the user's question. You can invoke tools by writing a \"<" + v4DSML + "tool_calls>\" block like the following:\n\n" +
		"<" + v4DSML + "tool_calls>\n<" + v4DSML + "invoke name=\"$TOOL_NAME\">\n<" + v4DSML + "parameter name=\"$PARAMETER_NAME\" string=\"true|false\">$PARAMETER_VALUE</" + v4DSML + "parameter>\n...\n</" + v4DSML + "invoke>\n<" + v4DSML + "invoke name=\"$TOOL_NAME2\">\n...\n</" + v4DSML + "invoke>\n</" + v4DSML + "tool_calls>\n\n" +
		"String parameters should be specified as is and set `string=\"true\"`. For all other types (numbers, booleans, arrays, objects), pass the value in JSON format and set `string=\"false\"`.\n\n" +
		"If thinking_mode is enabled (triggered by <think>), you MUST output your complete reasoning inside <think>...</think> BEFORE any tool calls or final response.\n\n" +
		"Otherwise, output directly after </think> with tool calls or final response.\n\n### Available Tool Schemas\n\n"
	v4ToolsTail = "\n\nYou MUST strictly follow the above defined tool name and parameter schemas to invoke tool calls.\n"
)

// v4Encoder renders a request as DeepSeek V4's encoder does, called the
// way vLLM's wrapper and render.py call it (thinking mode on unless the
// request's chat_template_kwargs turn it off; the request's tools attached
// to its first system message, or to a system message put in front).
//
// The behaviour that matters for the proxy: tool results become user
// turns (<｜User｜><tool_result>…</tool_result>); when any message carries
// tools, every assistant message keeps its reasoning (<think> is opened
// after each user turn and closed with </think> after the reasoning);
// without tools, reasoning before the last user turn is dropped; a system
// message is written in place as raw text, with no role token.
type v4Encoder struct{}

// Name returns V4.
func (v4Encoder) Name() string { return V4 }

// v4Msg is one message of the encoder's merged list.
type v4Msg struct {
	role      string
	content   string
	reasoning *string
	tools     []gjson.Result // function definitions (system/developer)
	calls     []gjson.Result // OpenAI tool_calls
	blocks    []v4Block      // user content blocks (text, tool results)
	hasBlocks bool
}

type v4Block struct {
	tool   bool
	text   string
	callID string
}

// Render encodes body. opts.NoGenerationPrompt has no effect: the
// encoder always opens the assistant after a final user turn.
func (v4Encoder) Render(body []byte, opts Options) (string, error) {
	req := gjson.ParseBytes(body)
	thinking, effort := v4Mode(req, opts)
	msgs := v4Messages(req)
	drop := true
	if v, ok := kwarg(req, opts, "drop_thinking"); ok {
		drop = v.Bool()
	}
	for _, m := range msgs {
		if len(m.tools) > 0 {
			drop = false
		}
	}
	if thinking && drop {
		msgs = v4DropThinking(msgs)
	}
	last := v4LastUser(msgs)
	var b strings.Builder
	b.WriteString(dsBOS)
	for i := range msgs {
		v4Render(&b, msgs, i, last, thinking, drop, effort)
	}
	return b.String(), nil
}

// kwarg finds a template variable in opts.Kwargs, then in the request's
// chat_template_kwargs.
func kwarg(req gjson.Result, opts Options, name string) (gjson.Result, bool) {
	if v, ok := opts.Kwargs[name]; ok {
		if b, isBool := v.(bool); isBool {
			if b {
				return gjson.Result{Type: gjson.True}, true
			}
			return gjson.Result{Type: gjson.False}, true
		}
	}
	v := req.Get("chat_template_kwargs." + name)
	return v, v.Exists()
}

// v4Mode returns whether thinking is on and the reasoning effort ("max",
// "high" or "") as render.py's render_dsv4 decides them.
func v4Mode(req gjson.Result, opts Options) (bool, string) {
	thinking := true
	t, okT := kwarg(req, opts, "thinking")
	e, okE := kwarg(req, opts, "enable_thinking")
	if okT || okE {
		thinking = t.Bool() || e.Bool()
	}
	effort := req.Get("reasoning_effort")
	if !effort.Exists() {
		effort = req.Get("chat_template_kwargs.reasoning_effort")
	}
	switch {
	case effort.Type != gjson.String:
		if thinking {
			return true, "high"
		}
		return false, ""
	case effort.Str == "none":
		return false, ""
	case effort.Str == "max":
		return thinking, "max"
	}
	return thinking, "high"
}

// v4Messages converts the request's messages: tools attached to the first
// system message (or a new one in front), tool messages merged into user
// turns, tool results sorted by the order of the calls that asked for them.
func v4Messages(req gjson.Result) []v4Msg {
	var in []v4Msg
	for _, m := range req.Get("messages").Array() {
		in = append(in, v4Message(m))
	}
	if tools := req.Get("tools").Array(); len(tools) > 0 {
		var fns []gjson.Result
		for _, t := range tools {
			fns = append(fns, t.Get("function"))
		}
		if len(in) > 0 && (in[0].role == "system" || in[0].role == "developer") {
			in[0].tools = fns
		} else {
			in = append([]v4Msg{{role: "system", tools: fns}}, in...)
		}
	}
	return v4SortResults(v4Merge(in))
}

func v4Message(m gjson.Result) v4Msg {
	out := v4Msg{role: m.Get("role").Str, content: textOf(m.Get("content")), calls: m.Get("tool_calls").Array()}
	if r, ok := reasoningOf(m); ok {
		out.reasoning = &r
	}
	if out.role == "tool" {
		out.blocks = []v4Block{{tool: true, text: out.content, callID: m.Get("tool_call_id").Str}}
	}
	return out
}

// textOf is a content value as text: a string, or the text parts joined.
func textOf(c gjson.Result) string {
	if c.Type == gjson.String {
		return c.Str
	}
	var parts []string
	for _, p := range c.Array() {
		if p.Get("type").Str == "text" {
			parts = append(parts, p.Get("text").Str)
		}
	}
	return strings.Join(parts, "\n\n")
}

// v4Merge turns tool messages into user turns with tool_result blocks; a
// user message right after them joins the same turn as a text block.
func v4Merge(in []v4Msg) []v4Msg {
	var out []v4Msg
	for _, m := range in {
		prevUser := len(out) > 0 && out[len(out)-1].role == "user" && out[len(out)-1].hasBlocks
		switch m.role {
		case "tool":
			if prevUser {
				out[len(out)-1].blocks = append(out[len(out)-1].blocks, m.blocks...)
				continue
			}
			out = append(out, v4Msg{role: "user", blocks: m.blocks, hasBlocks: true})
		case "user":
			b := v4Block{text: m.content}
			if prevUser {
				out[len(out)-1].blocks = append(out[len(out)-1].blocks, b)
				continue
			}
			m.blocks, m.hasBlocks = []v4Block{b}, true
			out = append(out, m)
		default:
			out = append(out, m)
		}
	}
	return out
}

// v4SortResults orders the tool results of each user turn as the calls
// of the assistant message before them.
func v4SortResults(msgs []v4Msg) []v4Msg {
	order := map[string]int{}
	for i := range msgs {
		m := &msgs[i]
		if m.role == "assistant" && len(m.calls) > 0 {
			order = map[string]int{}
			for j, c := range m.calls {
				if id := c.Get("id").Str; id != "" {
					order[id] = j
				}
			}
			continue
		}
		if m.role != "user" || len(order) == 0 {
			continue
		}
		var tools []v4Block
		for _, b := range m.blocks {
			if b.tool {
				tools = append(tools, b)
			}
		}
		if len(tools) < 2 {
			continue
		}
		sort.SliceStable(tools, func(a, b int) bool { return order[tools[a].callID] < order[tools[b].callID] })
		k := 0
		for j := range m.blocks {
			if m.blocks[j].tool {
				m.blocks[j] = tools[k]
				k++
			}
		}
	}
	return msgs
}

// v4LastUser is the index of the last user or developer message, or -1.
func v4LastUser(msgs []v4Msg) int {
	for i := len(msgs) - 1; i >= 0; i-- {
		if msgs[i].role == "user" || msgs[i].role == "developer" {
			return i
		}
	}
	return -1
}

// v4DropThinking removes the reasoning of assistant messages before the
// last user turn and drops developer messages there.
func v4DropThinking(msgs []v4Msg) []v4Msg {
	last := v4LastUser(msgs)
	var out []v4Msg
	for i, m := range msgs {
		switch {
		case i >= last || m.role != "assistant" && m.role != "developer":
			out = append(out, m)
		case m.role == "assistant":
			m.reasoning = nil
			out = append(out, m)
		}
	}
	return out
}

// v4Render writes message i and the transition after it.
func v4Render(b *strings.Builder, msgs []v4Msg, i, last int, thinking, drop bool, effort string) {
	m := msgs[i]
	if i == 0 && thinking && effort == "max" {
		b.WriteString(v4EffortMax)
	}
	switch m.role {
	case "system":
		b.WriteString(m.content)
		v4Tools(b, m.tools)
	case "developer":
		b.WriteString(v4User + m.content)
		v4Tools(b, m.tools)
	case "user":
		b.WriteString(v4User)
		v4UserText(b, m)
	case "latest_reminder":
		b.WriteString(v4Reminder + m.content)
	case "assistant":
		if thinking && (!drop || i > last) {
			if m.reasoning != nil {
				b.WriteString(*m.reasoning)
			}
			b.WriteString(v4EndThink)
		}
		b.WriteString(m.content)
		v4Calls(b, m.calls)
		b.WriteString(dsEOS)
	default: // the encoder raises on an unknown role; render it as raw text
		b.WriteString(m.content)
	}
	if i+1 < len(msgs) && msgs[i+1].role != "assistant" && msgs[i+1].role != "latest_reminder" {
		return
	}
	if m.role == "user" || m.role == "developer" {
		b.WriteString(v4Assistant)
		if thinking && (!drop || i >= last) {
			b.WriteString(v4Think)
		} else {
			b.WriteString(v4EndThink)
		}
	}
}

func v4Tools(b *strings.Builder, fns []gjson.Result) {
	if len(fns) == 0 {
		return
	}
	b.WriteString("\n\n" + v4ToolsHead)
	for i, f := range fns {
		if i > 0 {
			b.WriteByte('\n')
		}
		pyJSON(b, f)
	}
	b.WriteString(v4ToolsTail)
}

func v4UserText(b *strings.Builder, m v4Msg) {
	if !m.hasBlocks {
		b.WriteString(m.content)
		return
	}
	for i, blk := range m.blocks {
		if i > 0 {
			b.WriteString("\n\n")
		}
		if blk.tool {
			b.WriteString("<tool_result>" + blk.text + "</tool_result>")
		} else {
			b.WriteString(blk.text)
		}
	}
}

// v4Calls writes an assistant's tool calls as a DSML block: each argument
// a parameter, strings as they are, other values as JSON.
func v4Calls(b *strings.Builder, calls []gjson.Result) {
	if len(calls) == 0 {
		return
	}
	b.WriteString("\n\n<" + v4DSML + "tool_calls>\n")
	for i, c := range calls {
		if i > 0 {
			b.WriteByte('\n')
		}
		b.WriteString("<" + v4DSML + "invoke name=\"" + c.Get("function.name").Str + "\">\n")
		args := c.Get("function.arguments")
		if args.Type == gjson.String {
			args = gjson.Parse(args.Str)
		}
		first := true
		args.ForEach(func(k, v gjson.Result) bool {
			if !first {
				b.WriteByte('\n')
			}
			first = false
			isStr := v.Type == gjson.String
			b.WriteString("<" + v4DSML + "parameter name=\"" + k.Str + "\" string=\"" + map[bool]string{true: "true", false: "false"}[isStr] + "\">")
			if isStr {
				b.WriteString(v.Str)
			} else {
				pyJSON(b, v)
			}
			b.WriteString("</" + v4DSML + "parameter>")
			return true
		})
		b.WriteString("\n</" + v4DSML + "invoke>")
	}
	b.WriteString("\n</" + v4DSML + "tool_calls>")
}
