package review

import (
	"bytes"
	"errors"
	"fmt"

	"github.com/shaperproxy/shaperproxy/conv"
	"github.com/shaperproxy/shaperproxy/sse"
	"github.com/tidwall/gjson"
	"github.com/tidwall/sjson"
)

// StreamMerger turns the continuation's SSE events into the events the
// client gets after the draft's, so that the client assembles one
// assistant message: the draft's content, Separator, the continuation's
// content (and the reasoning of both, joined by ReasoningSeparator).
//
// Before the continuation's first data event it emits a content delta
// holding Separator. It drops the continuation's role-only first chunk
// (a delta with "role" and no non-empty value besides it), rewrites "id",
// "created" and "model" of every chunk to the draft's, and passes
// everything else as it came: reasoning, content and tool call deltas,
// the finish chunk, a usage chunk, "[DONE]" and comment lines
// (": keep-alive"). Chunks are edited with sjson, never re-marshalled.
//
// A StreamMerger is not safe for concurrent use; use one per continuation.
type StreamMerger struct {
	// DraftUsage, when set to the draft's raw usage object, is added into
	// every usage object of the continuation (SumUsage), as MergeBodies
	// does; nil passes the continuation's usage as it is.
	DraftUsage []byte

	keys           [][2]string // "id", "created", "model" and the draft's raw values
	template       []byte      // the draft's first chunk
	reasoningField string
	draftReasoning bool
	joint          Joint
	contentSep     string

	started bool // the separator went out
	joined  bool // the reasoning separator went out
}

// newStreamMerger returns a merger for the continuation of draft.
// draftFirstChunk is the data payload (JSON) of the draft's first chunk:
// its id, created and model are given to every continuation chunk, and
// the synthetic chunks are made from it.
func newStreamMerger(draftFirstChunk []byte, draft Draft) (*StreamMerger, error) {
	return NewStreamMerger(draftFirstChunk, draft, reviewJoint)
}

// NewStreamMerger is newStreamMerger with the draft and the continuation
// joined by j (the deliberate tool's continuation joins without a
// visible separator).
func NewStreamMerger(draftFirstChunk []byte, draft Draft, j Joint) (*StreamMerger, error) {
	if !conv.ValidJSON(draftFirstChunk) || !gjson.ParseBytes(draftFirstChunk).IsObject() {
		return nil, errors.New("review: draft chunk is not a json object")
	}
	m := &StreamMerger{
		template:       bytes.Clone(draftFirstChunk),
		reasoningField: draft.ReasoningField,
		draftReasoning: draft.Reasoning != "" && draft.ReasoningField != "",
		joint:          j,
		contentSep:     j.contentSep(draft.Content),
	}
	for _, k := range []string{"id", "created", "model"} {
		if v := gjson.GetBytes(draftFirstChunk, k); v.Exists() {
			m.keys = append(m.keys, [2]string{k, v.Raw})
		}
	}
	return m, nil
}

// Next returns the bytes to send to the client for raw, one SSE event of
// the continuation (the whole event, its blank line included; several
// events are handled in turn): nothing, the event rewritten, or synthetic
// events followed by it. An event that is not a JSON chunk (a comment,
// "[DONE]", an event without data) passes unchanged, after the separator
// when it carries data.
func (m *StreamMerger) Next(raw []byte) ([]byte, error) {
	r := sse.NewReader(bytes.NewReader(raw))
	var out []byte
	for {
		ev, err := r.Next()
		if err != nil {
			return out, nil // io.EOF; a bytes.Reader has no other error
		}
		if out, err = m.event(out, ev); err != nil {
			return nil, err
		}
	}
}

// event appends to out what the client gets for ev.
func (m *StreamMerger) event(out []byte, ev sse.Event) ([]byte, error) {
	if ev.Comment || !ev.HasData {
		return append(out, ev.Raw...), nil
	}
	var err error
	if !m.started {
		m.started = true
		if m.contentSep != "" {
			sep, err := m.synthetic(`{"content":` + string(quote(m.contentSep)) + `}`)
			if err != nil {
				return nil, err
			}
			out = append(out, sep...)
		}
	}
	data := ev.Data
	if ev.IsDone() || !conv.ValidJSON(data) || !gjson.ParseBytes(data).IsObject() {
		return append(out, ev.Raw...), nil
	}
	if roleOnly(data) {
		return out, nil
	}
	if out, err = m.joinReasoning(out, data); err != nil {
		return nil, err
	}
	if data, err = m.rewrite(data); err != nil {
		return nil, err
	}
	return append(out, withData(ev.Raw, data)...), nil
}

// synthetic renders an event made from the draft's first chunk with one
// choice holding delta (raw JSON).
func (m *StreamMerger) synthetic(delta string) ([]byte, error) {
	c, err := sjson.SetRawBytes(bytes.Clone(m.template), "choices", []byte(`[{"index":0,"delta":`+delta+`,"finish_reason":null}]`))
	if err == nil {
		if u := gjson.GetBytes(c, "usage"); u.Exists() && u.Type != gjson.Null {
			c, err = sjson.SetRawBytes(c, "usage", []byte("null"))
		}
	}
	if err != nil {
		return nil, fmt.Errorf("review: synthetic chunk: %w", err)
	}
	return renderData(c), nil
}

// joinReasoning appends a reasoning delta of ReasoningSeparator before
// the continuation's first reasoning when the draft had reasoning.
func (m *StreamMerger) joinReasoning(out, data []byte) ([]byte, error) {
	if !m.draftReasoning || m.joined || m.joint.Reasoning == "" || !hasReasoning(data) {
		return out, nil
	}
	m.joined = true
	ev, err := m.synthetic(`{` + string(quote(m.reasoningField)) + `:` + string(quote(m.joint.Reasoning)) + `}`)
	return append(out, ev...), err
}

// rewrite gives data the draft's id, created and model (where data has
// the key) and sums its usage with DraftUsage.
func (m *StreamMerger) rewrite(data []byte) ([]byte, error) {
	data = bytes.Clone(data)
	var err error
	for _, kv := range m.keys {
		if gjson.GetBytes(data, kv[0]).Exists() {
			if data, err = sjson.SetRawBytes(data, kv[0], []byte(kv[1])); err != nil {
				return nil, fmt.Errorf("review: rewrite %s: %w", kv[0], err)
			}
		}
	}
	if u := gjson.GetBytes(data, "usage"); m.DraftUsage != nil && u.IsObject() {
		s, err := SumUsage(m.DraftUsage, []byte(u.Raw))
		if err != nil {
			return nil, err
		}
		if data, err = sjson.SetRawBytes(data, "usage", s); err != nil {
			return nil, fmt.Errorf("review: rewrite usage: %w", err)
		}
	}
	return data, nil
}

// hasReasoning reports whether a chunk carries a non-empty reasoning delta.
func hasReasoning(data []byte) bool {
	found := false
	gjson.GetBytes(data, "choices").ForEach(func(_, c gjson.Result) bool {
		found = conv.DeltaReasoning(c.Get("delta")) != ""
		return !found
	})
	return found
}

// roleOnly reports whether a chunk is a stream's opening chunk with
// nothing in it: choices whose delta has "role" and no other non-empty
// value, no finish_reason, and no usage.
func roleOnly(data []byte) bool {
	c := gjson.ParseBytes(data)
	choices := c.Get("choices")
	if !choices.IsArray() || len(choices.Array()) == 0 || nonEmpty(c.Get("usage")) {
		return false
	}
	only := true
	choices.ForEach(func(_, ch gjson.Result) bool {
		d := ch.Get("delta")
		only = d.Get("role").Exists() && !nonEmpty(ch.Get("finish_reason"))
		d.ForEach(func(k, v gjson.Result) bool {
			if k.Str != "role" && nonEmpty(v) {
				only = false
			}
			return only
		})
		return only
	})
	return only
}

// nonEmpty reports whether v is present and not null, "", [] or {}.
func nonEmpty(v gjson.Result) bool {
	switch {
	case !v.Exists() || v.Type == gjson.Null:
		return false
	case v.Type == gjson.String:
		return v.Str != ""
	case v.IsArray():
		return len(v.Array()) > 0
	case v.IsObject():
		return len(v.Map()) > 0
	}
	return true
}

// withData returns event raw with its data replaced by data: in place
// when the event has one data line, otherwise re-rendered as data lines.
func withData(raw, data []byte) []byte {
	start, end, n := -1, -1, 0
	for off := 0; off < len(raw); {
		line := raw[off:]
		if i := bytes.IndexByte(line, '\n'); i >= 0 {
			line = line[:i+1]
		}
		if v, ok := bytes.CutPrefix(line, []byte("data:")); ok {
			n++
			start = off + 5
			if len(v) > 0 && v[0] == ' ' {
				start++
			}
			end = off + len(bytes.TrimRight(line, "\r\n"))
		}
		off += len(line)
	}
	if n != 1 || bytes.Contains(data, []byte("\n")) {
		return renderData(data)
	}
	out := make([]byte, 0, len(raw)-(end-start)+len(data))
	return append(append(append(out, raw[:start]...), data...), raw[end:]...)
}

// renderData renders data as one event: a "data: " line per line of data.
func renderData(data []byte) []byte {
	var out []byte
	for line := range bytes.Lines(data) {
		out = append(append(out, "data: "...), bytes.TrimRight(line, "\r\n")...)
		out = append(out, '\n')
	}
	return append(out, '\n')
}
