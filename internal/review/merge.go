package review

import (
	"bytes"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/shaperproxy/shaperproxy/conv"
	"github.com/tidwall/gjson"
	"github.com/tidwall/sjson"
)

// Separator is the visible text between the draft and the continuation
// in the one assistant message the client sees. Insertion keys hash it
// (InsertionKey of MergedContent): changing it orphans the insertions
// recorded before.
const Separator = "\n\n---\n*Revised after an automatic review:*\n\n"

// reasoningSeparator joins the draft's reasoning and the continuation's
// when both are non-empty.
const reasoningSeparator = "\n\n"

// Joint says how a continuation joins its draft in the one assistant
// message the client sees.
type Joint struct {
	// Content goes between the draft's content and the continuation's:
	// always when ContentAlways (the review's visible Separator), else only
	// when the draft has content.
	Content       string
	ContentAlways bool
	// Reasoning goes between the two reasoning texts when both are
	// non-empty.
	Reasoning string
}

// reviewJoint is the masked review's: the visible Separator.
var reviewJoint = Joint{Content: Separator, ContentAlways: true, Reasoning: reasoningSeparator}

// contentSep is what goes between draftContent and the continuation.
func (j Joint) contentSep(draftContent string) string {
	if j.ContentAlways || draftContent != "" {
		return j.Content
	}
	return ""
}

// Contents joins the draft's content and the continuation's.
func (j Joint) Contents(draft, cont string) string { return draft + j.contentSep(draft) + cont }

// reasonings joins two reasoning texts.
func (j Joint) reasonings(draft, cont string) string {
	if draft == "" || cont == "" {
		return draft + cont
	}
	return draft + j.Reasoning + cont
}

// MergedContent is the visible content the client sees for a revised
// turn: draft, Separator, continuation.
func MergedContent(draftContent, contContent string) string {
	return reviewJoint.Contents(draftContent, contContent)
}

// mergeBodies merges the non-streamed draft and continuation bodies into
// the one chat.completion the client gets: the draft body's keys (id,
// created, model, system_fingerprint, …) with, in choices[0].message,
// content = MergedContent, the reasoning (under the draft's key, else the
// continuation's) joined with ReasoningSeparator, and tool_calls from the
// continuation (removed when it has none); choices[0].finish_reason from
// the continuation; usage from the continuation with every integer it
// shares with the draft's usage summed (see SumUsage). Only choice 0 is
// merged.
func mergeBodies(draftBody, contBody []byte) ([]byte, error) {
	return MergeBodies(draftBody, contBody, reviewJoint)
}

// MergeBodies is mergeBodies with the draft and the continuation joined
// by j.
func MergeBodies(draftBody, contBody []byte, j Joint) ([]byte, error) {
	d, err := assembleBody(draftBody)
	if err != nil {
		return nil, fmt.Errorf("review: draft: %w", err)
	}
	c, err := assembleBody(contBody)
	if err != nil {
		return nil, fmt.Errorf("review: continuation: %w", err)
	}
	msg := gjson.GetBytes(contBody, "choices.0.message")
	edits := []pathEdit{
		{"choices.0.message.content", quote(j.Contents(d.Content, c.Content))},
		{"choices.0.finish_reason", []byte(gjson.GetBytes(contBody, "choices.0.finish_reason").Raw)},
		{"choices.0.message.tool_calls", []byte(msg.Get("tool_calls").Raw)},
	}
	if field := reasoningField(d, c); field != "" {
		edits = append(edits, pathEdit{"choices.0.message." + field, quote(j.reasonings(d.Reasoning, c.Reasoning))})
	}
	out := bytes.Clone(draftBody)
	for _, e := range edits {
		if out, err = setOrDelete(out, e.path, e.raw); err != nil {
			return nil, fmt.Errorf("review: merge %s: %w", e.path, err)
		}
	}
	return mergeUsage(out, draftBody, contBody)
}

// assembleBody returns choice 0 of a non-streamed body.
func assembleBody(body []byte) (conv.Choice, error) {
	a := conv.NewAssembler()
	if err := a.AddBody(body); err != nil {
		return conv.Choice{}, err
	}
	r := a.Response()
	if len(r.Choices) == 0 || r.Choices[0].Index != 0 || !gjson.GetBytes(body, "choices.0.message").IsObject() {
		return conv.Choice{}, errors.New("no choices[0].message")
	}
	return r.Choices[0], nil
}

// reasoningField is the key the merged reasoning goes under: the draft's,
// else the continuation's, else none.
func reasoningField(d, c conv.Choice) string {
	if d.ReasoningField != "" {
		return d.ReasoningField
	}
	return c.ReasoningField
}

// pathEdit sets the value at path to raw (deletes it when raw is empty).
type pathEdit struct {
	path string
	raw  []byte
}

// setOrDelete sets path to raw, or deletes it when raw is empty.
func setOrDelete(body []byte, path string, raw []byte) ([]byte, error) {
	if len(raw) > 0 {
		return sjson.SetRawBytes(body, path, raw)
	}
	if !gjson.GetBytes(body, path).Exists() {
		return body, nil
	}
	return sjson.DeleteBytes(body, path)
}

// mergeUsage sets out's usage to the continuation's summed with the
// draft's, or to the continuation's alone.
func mergeUsage(out, draftBody, contBody []byte) ([]byte, error) {
	cu := gjson.GetBytes(contBody, "usage")
	if !cu.IsObject() {
		return out, nil
	}
	u, err := SumUsage([]byte(gjson.GetBytes(draftBody, "usage").Raw), []byte(cu.Raw))
	if err != nil {
		return nil, err
	}
	return sjson.SetRawBytes(out, "usage", u)
}

// SumUsage returns cont (a usage object) with every integer that draft
// holds at the same path added to it: prompt_tokens, completion_tokens,
// total_tokens, and nested or provider-specific counts such as
// completion_tokens_details.reasoning_tokens or DeepSeek's
// prompt_cache_hit_tokens. The result counts both upstream calls, which is
// what was billed. A key only in draft is not added; when draft is not an
// object, cont is returned as is. Key order and spelling are cont's.
func SumUsage(draft, cont []byte) ([]byte, error) {
	d := gjson.ParseBytes(draft)
	if !d.IsObject() || !conv.ValidJSON(cont) {
		return cont, nil
	}
	out := bytes.Clone(cont)
	var err error
	walkInts(gjson.ParseBytes(cont), "", func(path string, v int64) {
		dv := d.Get(path)
		if err != nil || dv.Type != gjson.Number || !isInt(dv.Raw) {
			return
		}
		out, err = sjson.SetRawBytes(out, path, []byte(strconv.FormatInt(v+dv.Int(), 10)))
	})
	if err != nil {
		return nil, fmt.Errorf("review: usage: %w", err)
	}
	return out, nil
}

// walkInts calls fn with the path of every integer inside object obj.
func walkInts(obj gjson.Result, prefix string, fn func(path string, v int64)) {
	obj.ForEach(func(k, v gjson.Result) bool {
		path := prefix + pathEscape(k.Str)
		switch {
		case v.IsObject():
			walkInts(v, path+".", fn)
		case v.Type == gjson.Number && isInt(v.Raw):
			fn(path, v.Int())
		}
		return true
	})
}

// isInt reports whether a JSON number is written as an integer.
func isInt(raw string) bool {
	return !strings.ContainsAny(raw, ".eE")
}
