package guard

import (
	"bytes"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"

	"github.com/shaperproxy/shaperproxy/conv"
	"github.com/tidwall/gjson"
	"github.com/tidwall/sjson"
)

// errNotPlaceable is wrapped by ApplyPlacements when a placement names a
// message it cannot append to (see Decide's placement rules).
var errNotPlaceable = errors.New("guard: notice cannot be placed")

// noticeSep separates a notice from the content before it.
const noticeSep = "\n\n"

// applyPlacements returns a copy of req.Body with each placement's text
// appended to its message's content; req.Body is not changed. Only the
// content value of the named messages changes, and only at its end:
//
//   - a string gets "\n\n" and the text before its closing quote (no
//     separator when it is empty); its original escapes are kept;
//   - an array of parts gets a new {"type":"text","text":...} part;
//   - null, or no content key, becomes the text.
//
// Texts for one message are joined with "\n\n". With no placements the
// body is returned as it is. On error (ErrNotPlaceable) the body is
// returned unchanged and nothing should be sent differently.
func applyPlacements(req *conv.Request, ps []placement) ([]byte, error) {
	if len(ps) == 0 {
		return req.Body, nil
	}
	edits, err := placementEdits(req, ps)
	if err != nil {
		return req.Body, err
	}
	return conv.ApplyEdits(req.Body, edits), nil
}

// placementEdits returns applyPlacements' changes as edits of req.Body,
// one per message, each inside its message (so conv.Request.Apply derives
// the new view without parsing the body again).
func placementEdits(req *conv.Request, ps []placement) ([]conv.Edit, error) {
	texts := map[int][]string{}
	for _, p := range ps {
		if !placeable(req, p.Message) {
			return nil, fmt.Errorf("%w: message %d", errNotPlaceable, p.Message)
		}
		texts[p.Message] = append(texts[p.Message], p.Text)
	}
	idx := make([]int, 0, len(texts))
	for i := range texts {
		idx = append(idx, i)
	}
	sort.Ints(idx)
	edits := make([]conv.Edit, 0, len(idx))
	for _, i := range idx {
		e, err := appendToContent(req.Body, req.Messages[i], strings.Join(texts[i], noticeSep))
		if err != nil {
			return nil, err
		}
		edits = append(edits, e)
	}
	return edits, nil
}

// appendToContent returns the edit of body that appends text to the
// content of message m; it lies inside the message's braces. The content
// is found where the view says it lies (Message.ContentStart), not decoded
// again: a tool result of 40 KB would be unescaped for nothing.
func appendToContent(body []byte, m conv.Message, text string) (conv.Edit, error) {
	if m.ContentStart < 0 {
		raw := body[m.Start:m.End]
		edited, err := sjson.SetBytes(append([]byte(nil), raw...), "content", text)
		if err != nil {
			return conv.Edit{}, fmt.Errorf("%w: %w", errNotPlaceable, err)
		}
		// The same bytes as replacing the message, as an edit inside it.
		pre, suf := commonEnds(raw, edited)
		return conv.Edit{Start: m.Start + pre, End: m.End - suf, Repl: edited[pre : len(edited)-suf]}, nil
	}
	c := body[m.ContentStart:m.ContentEnd]
	var at, cut int // where to splice in body, and the bytes replaced there
	var ins []byte  // bytes inserted
	switch c[0] {
	case '"':
		add := text
		if m.Content != "" { // the decoded string
			add = noticeSep + text
		}
		q := appendString(nil, add)
		at, ins = m.ContentEnd-1, q[1:len(q)-1]
	case '[':
		part := appendString([]byte(`{"type":"text","text":`), text)
		part = append(part, '}')
		if bytes.TrimLeft(c[1:], " \t\r\n")[0] != ']' { // parts before it
			part = append([]byte{','}, part...)
		}
		at, ins = m.ContentEnd-1, part
	case 'n':
		at, cut, ins = m.ContentStart, len(c), appendString(nil, text)
	default:
		return conv.Edit{}, fmt.Errorf("%w: message %d content", errNotPlaceable, m.Index)
	}
	return conv.Edit{Start: at, End: at + cut, Repl: ins}, nil
}

// commonEnds returns the length of the prefix a and b share and of the
// suffix they share after it.
func commonEnds(a, b []byte) (pre, suf int) {
	for pre < len(a) && pre < len(b) && a[pre] == b[pre] {
		pre++
	}
	for suf < len(a)-pre && suf < len(b)-pre && a[len(a)-1-suf] == b[len(b)-1-suf] {
		suf++
	}
	return pre, suf
}

// stepDown lowers the reasoning effort of a request body by one step of
// the route's lowering when active is true: the string at l.Path is
// replaced by l.Values[value], and each numeric budget of l (see
// Lowering.Budgets) is halved, not below MinBudget. A key is left alone
// when it is absent, not of its type (a string effort with a mapping; a
// budget written as a whole number), or repeated on its path (gjson and
// sjson would read the first, the upstream the last). changed is false
// when nothing was lowered. The edits are made in place with sjson:
// every other byte, key order and spelling are kept; body itself is not
// modified.
func stepDown(body []byte, l Lowering, active bool) (out []byte, changed bool) {
	if !active {
		return body, false
	}
	out, changed = lowerEffort(body, l)
	for _, path := range l.budgets() {
		var c bool
		out, c = lowerBudget(out, path)
		changed = changed || c
	}
	return out, changed
}

// lowerEffort maps the effort string at l.Path one step down.
func lowerEffort(body []byte, l Lowering) ([]byte, bool) {
	if l.Path == "" || repeatedOnPath(body, l.Path) {
		return body, false
	}
	v := gjson.GetBytes(body, l.Path)
	to, ok := l.Values[v.Str]
	if v.Type != gjson.String || !ok || to == v.Str {
		return body, false
	}
	return setRaw(body, l.Path, appendString(nil, to))
}

// maxBudget bounds the budgets lowerBudget reads (far beyond any model's).
const maxBudget = 1 << 40

// lowerBudget halves the whole-number budget at path, not below MinBudget.
func lowerBudget(body []byte, path string) ([]byte, bool) {
	if !bytes.Contains(body, []byte(path[strings.LastIndexByte(path, '.')+1:])) || repeatedOnPath(body, path) {
		return body, false
	}
	v := gjson.GetBytes(body, path)
	if v.Type != gjson.Number {
		return body, false
	}
	n, err := strconv.ParseInt(v.Raw, 10, 64)
	if err != nil || n <= MinBudget || n > maxBudget {
		return body, false
	}
	return setRaw(body, path, strconv.AppendInt(nil, max(n/2, MinBudget), 10))
}

// setRaw replaces the value at path with raw.
func setRaw(body []byte, path string, raw []byte) ([]byte, bool) {
	edited, err := sjson.SetRawBytes(body, path, raw)
	if err != nil {
		return body, false
	}
	return edited, true
}

// repeatedOnPath reports whether a key of the dotted path appears twice
// in its object.
func repeatedOnPath(body []byte, path string) bool {
	obj := gjson.ParseBytes(body)
	for _, key := range strings.Split(path, ".") {
		if !obj.IsObject() {
			return false
		}
		var next gjson.Result
		seen := 0
		obj.ForEach(func(k, v gjson.Result) bool {
			if k.Str == key {
				seen++
				next = v
			}
			return seen < 2
		})
		if seen > 1 {
			return true
		}
		obj = next
	}
	return false
}
