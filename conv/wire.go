package conv

import (
	"bytes"
	"slices"
	"unicode/utf8"

	"github.com/shaperproxy/shaperproxy/internal/bigbuf"
	"github.com/shaperproxy/shaperproxy/internal/jsonstr"
	"github.com/tidwall/gjson"
)

// ReasoningFields are the plain-text reasoning keys of history messages
// and stream deltas (PROTOCOLS.md rule 3), in the order of preference when
// more than one holds a string. This list is the one place that names
// them: the view, the assembler, shaping, the review and the guard all
// read it.
var ReasoningFields = [...]string{"reasoning_content", "reasoning"}

// pickReasoning returns the index in ReasoningFields of the value to
// take: preferred when it holds a string, else the first string, else the
// first that exists (a null reasoning key); -1 when none exists.
func pickReasoning(rs [len(ReasoningFields)]gjson.Result, preferred int) int {
	if preferred >= 0 && rs[preferred].Type == gjson.String {
		return preferred
	}
	first := -1
	for i, r := range rs {
		if r.Type == gjson.String {
			return i
		}
		if first < 0 && r.Exists() {
			first = i
		}
	}
	return first
}

// DeltaReasoning returns the reasoning text a stream delta (or a message)
// object carries, "" when it carries none.
func DeltaReasoning(delta gjson.Result) string {
	for _, f := range ReasoningFields {
		if v := delta.Get(f); v.Type == gjson.String {
			return v.Str
		}
	}
	return ""
}

// DeltaHasText reports whether a delta carries visible content or
// reasoning text.
func DeltaHasText(delta gjson.Result) bool {
	if v := delta.Get("content"); v.Type == gjson.String && v.Str != "" {
		return true
	}
	return DeltaReasoning(delta) != ""
}

// Finishes reports whether a stream chunk's data carries a non-null
// finish_reason in any choice: the chunk that ends a response.
func Finishes(data []byte) bool {
	if !bytes.Contains(data, []byte(`"finish_reason"`)) {
		return false
	}
	for _, f := range gjson.GetBytes(data, "choices.#.finish_reason").Array() {
		if f.Type == gjson.String {
			return true
		}
	}
	return false
}

// Edit replaces Body[Start:End] with Repl, offsets into a request body
// (the byte ranges of the view).
type Edit struct {
	Start, End int
	Repl       []byte

	// text is what Repl decodes to, when the edit came from a String
	// (known): Apply then neither validates nor decodes Repl.
	text  string
	known bool
	// token: Repl is a String's token (Replace), which no one changes:
	// the same token written at the same place is the same bytes, known
	// without a look at them (editedBodies.writeOver).
	token bool
}

// String is a JSON string token and the text it decodes to, made
// together by QuoteString, so that the pair is right by construction.
// An edit that puts it in place (Replace) hands Apply the text: a long
// history's shaped blocks are neither validated nor decoded again on
// every request. The zero String is the empty token (no bytes).
type String struct {
	tok   []byte
	text  string
	known bool
}

// QuoteString returns s as a JSON string token (jsonstr's encoding) with
// s as its text. Invalid UTF-8 in s is encoded as U+FFFD, so its token
// does not decode to s: such a String carries no text, and Apply decodes
// its token as it does any edit's.
func QuoteString(s string) String {
	return String{tok: jsonstr.Quote(s), text: s, known: utf8.ValidString(s)}
}

// Token returns the JSON string token (quotes included); callers must not
// modify it.
func (s String) Token() []byte { return s.tok }

// Replace returns the edit that replaces body[start:end] with the token.
func (s String) Replace(start, end int) Edit {
	return Edit{Start: start, End: end, Repl: s.tok, text: s.text, known: s.known, token: true}
}

// ApplyEdits returns a new body (never nil) with non-overlapping edits
// applied in one pass; body is not changed. Bytes outside the edits are
// kept as they are.
func ApplyEdits(body []byte, edits []Edit) []byte {
	sortEdits(edits)
	n, at := len(body), 0
	for _, e := range edits {
		n += len(e.Repl) - (e.End - e.Start)
	}
	// Every byte of out is written below: a buffer from bigbuf, not
	// cleared (a long history's edited body is a megabyte).
	out := bigbuf.Make(n)[:0]
	for _, e := range edits {
		out = append(append(out, body[at:e.Start]...), e.Repl...)
		at = e.End
	}
	return append(out, body[at:]...)
}

// quotedReasoningFields are ReasoningFields as JSON keys, for MentionsReasoning.
var quotedReasoningFields = func() (q [len(ReasoningFields)][]byte) {
	for i, f := range ReasoningFields {
		q[i] = []byte(`"` + f + `"`)
	}
	return q
}()

// MentionsReasoning reports whether data contains a reasoning key: a
// quick test before parsing a chunk for its reasoning.
func MentionsReasoning(data []byte) bool {
	for _, q := range quotedReasoningFields {
		if bytes.Contains(data, q) {
			return true
		}
	}
	return false
}

// byStart orders edits by where they start.
func byStart(a, b Edit) int { return a.Start - b.Start }

// sortEdits sorts edits by where they start. A transform makes them in
// body order (the shaper's hundreds for a long history), so a look that
// finds them sorted comes first: the sort's own check of a sorted run
// costs several times that.
func sortEdits(edits []Edit) {
	if !slices.IsSortedFunc(edits, byStart) {
		slices.SortFunc(edits, byStart) // sort.Slice would allocate
	}
}
