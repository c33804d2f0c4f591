package conv

import (
	"bytes"
	"errors"
	"fmt"
	"sort"
	"strings"

	"github.com/tidwall/gjson"
)

// ErrBadChunk is returned (wrapped) by Assembler.AddChunk and AddBody for a
// payload that is not a JSON object.
var ErrBadChunk = errors.New("conv: payload is not a json object")

// Response is a response rebuilt by an Assembler.
type Response struct {
	// ID and Model are the first non-empty "id" and "model" seen.
	ID, Model string
	// Choices holds one rebuilt choice per choice index, sorted by index.
	Choices []Choice
	// Usage is the raw JSON of the last non-null "usage" seen, whatever
	// the shape it came in (PROTOCOLS.md, "Streams"); nil when none.
	Usage []byte
	// Error is the raw JSON of the last non-null top-level "error" seen
	// (a provider error sent inside a stream); nil when none.
	Error []byte
	// Chunks counts the data payloads given to AddChunk, "[DONE]" aside
	// (invalid ones included).
	Chunks int
	// Done is true once a "[DONE]" payload was added.
	Done bool
}

// Choice is one choice of a rebuilt response.
type Choice struct {
	// Index is the choice's "index".
	Index int
	// Role is the first non-empty "role".
	Role string
	// ReasoningField is the field the reasoning came in
	// ("reasoning_content" or "reasoning"), or "".
	ReasoningField string
	// Reasoning is the concatenated reasoning text.
	Reasoning string
	// Content is the concatenated visible text.
	Content string
	// ToolCalls are the calls joined by index (sorted by index): id, type
	// and name from their first fragment carrying them, arguments
	// concatenated.
	ToolCalls []ToolCall
	// FinishReason is the last non-null "finish_reason".
	FinishReason string
	// HasSignedReasoning is true when a non-empty "reasoning_details"
	// array was seen (OpenRouter; may be signed or encrypted).
	HasSignedReasoning bool
}

// Assembler rebuilds a chat completion, choice by choice and field by
// field, from the data payloads of a chat.completion.chunk stream or from a
// non-streaming body. Reasoning deltas are joined with reasoning deltas,
// content with content, each tool call's arguments with its own; null
// values are ignored. The zero value is not ready: use NewAssembler. An
// Assembler is not safe for concurrent use.
type Assembler struct {
	resp    Response
	choices map[int]*choiceState
	max     int // > 0: the chunk data it assembles at most (NewBoundedAssembler)
	seen    int // chunk data given so far
	over    bool
}

// choiceState is the growing state of one choice.
type choiceState struct {
	c         Choice
	reasoning strings.Builder
	content   strings.Builder
	calls     map[int]*callState
	lastCall  int
}

// callState is the growing state of one tool call.
type callState struct {
	tc   ToolCall
	args strings.Builder
}

// NewAssembler returns an empty Assembler.
func NewAssembler() *Assembler {
	return &Assembler{choices: make(map[int]*choiceState)}
}

// NewBoundedAssembler returns an Assembler that assembles at most max
// bytes of chunk data (AddChunk's payloads, "[DONE]" aside): past them it
// lets go of what it assembled, so Response is empty, and only counts
// what it is given; Over then reports true. A response too long to read
// streams on without growing the memory of whoever assembles it.
func NewBoundedAssembler(max int) *Assembler {
	a := NewAssembler()
	a.max = max
	return a
}

// Over reports whether a bounded Assembler was given more than its bound.
func (a *Assembler) Over() bool { return a.over }

// AddChunk adds one SSE "data:" payload. "[DONE]" sets Done. A payload that
// is not a JSON object returns an error wrapping ErrBadChunk and changes
// nothing else; the Assembler stays usable. data is not retained.
func (a *Assembler) AddChunk(data []byte) error {
	if string(bytes.TrimSpace(data)) == "[DONE]" {
		a.resp.Done = true
		return nil
	}
	if a.max > 0 {
		if a.seen += len(data); a.seen > a.max {
			if !a.over { // let the assembled text go
				a.over, a.resp, a.choices = true, Response{}, make(map[int]*choiceState)
			}
			return nil
		}
	}
	a.resp.Chunks++
	obj, err := parseObject(data)
	if err != nil {
		return fmt.Errorf("chunk %d: %w", a.resp.Chunks, err)
	}
	a.add(obj, "delta")
	return nil
}

// AddBody adds a non-streaming chat.completion body (choices[].message).
// It does not count as a chunk. body is not retained.
func (a *Assembler) AddBody(body []byte) error {
	obj, err := parseObject(body)
	if err != nil {
		return fmt.Errorf("body: %w", err)
	}
	a.add(obj, "message")
	return nil
}

// parseObject parses data (copied) as a JSON object. ValidJSON judges as
// json.Valid does, several times faster.
func parseObject(data []byte) (gjson.Result, error) {
	if !ValidJSON(data) {
		return gjson.Result{}, fmt.Errorf("%w: invalid json", ErrBadChunk)
	}
	obj := gjson.ParseBytes(data)
	if !obj.IsObject() {
		return gjson.Result{}, ErrBadChunk
	}
	return obj, nil
}

// add merges one chunk or body; part names the per-choice object holding
// the fields ("delta" or "message").
//
// Each object is read in one pass (firstKeys) for the values a lookup by
// key would find: a body or chunk is read once, not once per key.
func (a *Assembler) add(obj gjson.Result, part string) {
	k := firstKeys(obj, responseKeys...)
	setFirst(&a.resp.ID, k.get("id"))
	setFirst(&a.resp.Model, k.get("model"))
	if u := k.get("usage"); present(u) {
		a.resp.Usage = []byte(u.Raw)
	}
	if e := k.get("error"); present(e) {
		a.resp.Error = []byte(e.Raw)
	}
	forEachElem(k.get("choices"), func(k, c gjson.Result) bool {
		a.addChoice(int(k.Num), c, part)
		return true
	})
}

// The keys add and addChoice read.
var (
	responseKeys = []string{"id", "model", "usage", "error", "choices"}
	choiceKeys   = []string{"index", "finish_reason", "delta", "message"}
	partKeys     = append([]string{"role", "content", "reasoning_details", "tool_calls"}, ReasoningFields[:]...)
)

// addChoice merges choice c found at position pos of a choices array.
func (a *Assembler) addChoice(pos int, c gjson.Result, part string) {
	if !c.IsObject() {
		return
	}
	ck := firstKeys(c, choiceKeys...)
	idx := pos
	if n := ck.get("index"); n.Type == gjson.Number {
		idx = int(n.Int())
	}
	st := a.choice(idx)
	if f := ck.get("finish_reason"); f.Type == gjson.String && f.Str != "" {
		st.c.FinishReason = f.Str
	}
	d := ck.get(part)
	if !d.IsObject() {
		return
	}
	k := firstKeys(d, partKeys...)
	setFirst(&st.c.Role, k.get("role"))
	st.addReasoning(&k)
	st.addContent(k.get("content"))
	if nonEmptyArray(k.get("reasoning_details")) {
		st.c.HasSignedReasoning = true
	}
	forEachElem(k.get("tool_calls"), func(k, tc gjson.Result) bool {
		st.addCall(int(k.Num), tc)
		return true
	})
}

// firstKeys returns the first value of each wanted key of object obj,
// which obj.Get(key) finds, in one pass over obj (at most maxWanted
// keys).
func firstKeys(obj gjson.Result, wanted ...string) keyVals {
	out := keyVals{names: wanted[:min(len(wanted), maxWanted)]}
	var found [maxWanted]bool
	obj.ForEach(func(k, v gjson.Result) bool {
		for i, w := range out.names {
			if !found[i] && k.Str == w {
				out.vals[i], found[i] = v, true
			}
		}
		return true
	})
	return out
}

// choice returns the state of choice idx, creating it.
func (a *Assembler) choice(idx int) *choiceState {
	st, ok := a.choices[idx]
	if !ok {
		st = &choiceState{c: Choice{Index: idx}, calls: make(map[int]*callState), lastCall: -1}
		a.choices[idx] = st
	}
	return st
}

// addReasoning appends one delta's reasoning. When a delta carries
// several fields as strings (some servers mirror one into the other) only
// one is taken: the field already chosen, else the first of
// ReasoningFields.
func (st *choiceState) addReasoning(d *keyVals) {
	var rs [len(ReasoningFields)]gjson.Result
	chosen := -1
	for i, f := range ReasoningFields {
		rs[i] = d.get(f)
		if f == st.c.ReasoningField {
			chosen = i
		}
	}
	i := pickReasoning(rs, chosen)
	if i < 0 || rs[i].Type != gjson.String {
		return
	}
	if st.c.ReasoningField == "" {
		st.c.ReasoningField = ReasoningFields[i]
	}
	st.reasoning.WriteString(rs[i].Str)
}

// addContent appends a content string, or the text parts of a content
// array joined with "\n".
func (st *choiceState) addContent(c gjson.Result) {
	switch {
	case c.Type == gjson.String:
		st.content.WriteString(c.Str)
	case c.IsArray():
		text, _ := partsText(c)
		st.content.WriteString(text)
	}
}

// addCall merges one tool call fragment found at position pos.
func (st *choiceState) addCall(pos int, f gjson.Result) {
	if !f.IsObject() {
		return
	}
	cs := st.call(st.callIndex(pos, f))
	setFirst(&cs.tc.ID, f.Get("id"))
	setFirst(&cs.tc.Type, f.Get("type"))
	setFirst(&cs.tc.Name, f.Get("function.name"))
	cs.args.WriteString(arguments(f.Get("function.arguments")))
}

// callIndex returns the index a fragment belongs to: its "index"; without
// one, the call with the same id, a new call when the id is new, else the
// latest call (or pos when there is none).
func (st *choiceState) callIndex(pos int, f gjson.Result) int {
	if n := f.Get("index"); n.Type == gjson.Number {
		return int(n.Int())
	}
	id := str(f.Get("id"))
	if id == "" {
		if st.lastCall >= 0 {
			return st.lastCall
		}
		return pos
	}
	next := pos
	for i, cs := range st.calls {
		if cs.tc.ID == id {
			return i
		}
		next = max(next, i+1)
	}
	return next
}

// call returns the state of tool call idx, creating it.
func (st *choiceState) call(idx int) *callState {
	cs, ok := st.calls[idx]
	if !ok {
		cs = &callState{tc: ToolCall{Index: idx}}
		st.calls[idx] = cs
	}
	st.lastCall = idx
	return cs
}

// Response returns a snapshot of the response rebuilt so far. It may be
// called at any time; later additions do not change a returned snapshot.
func (a *Assembler) Response() Response {
	r := a.resp
	r.Usage = bytes.Clone(a.resp.Usage)
	r.Error = bytes.Clone(a.resp.Error)
	r.Choices = make([]Choice, 0, len(a.choices))
	for _, st := range a.choices {
		r.Choices = append(r.Choices, st.snapshot())
	}
	sort.Slice(r.Choices, func(i, j int) bool { return r.Choices[i].Index < r.Choices[j].Index })
	return r
}

// snapshot returns the choice rebuilt so far.
func (st *choiceState) snapshot() Choice {
	c := st.c
	c.Reasoning = st.reasoning.String()
	c.Content = st.content.String()
	c.ToolCalls = nil
	for _, cs := range st.calls {
		tc := cs.tc
		tc.Arguments = cs.args.String()
		c.ToolCalls = append(c.ToolCalls, tc)
	}
	sort.Slice(c.ToolCalls, func(i, j int) bool { return c.ToolCalls[i].Index < c.ToolCalls[j].Index })
	return c
}

// setFirst sets *dst to v's string value when *dst is empty.
func setFirst(dst *string, v gjson.Result) {
	if *dst == "" && v.Type == gjson.String {
		*dst = v.Str
	}
}
