package review

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"fmt"
	"strings"

	"github.com/shaperproxy/shaperproxy/conv"
	"github.com/shaperproxy/shaperproxy/internal/resolved"
	"github.com/tidwall/gjson"
	"github.com/tidwall/sjson"
)

// Insertion is what the proxy put into one turn's history that the client
// never saw as such: the draft, the notice and the continuation, as raw
// messages, keyed by InsertionKey of the merged content the client got.
// ledger.Insertion has the same fields, so one converts to the other.
type Insertion struct {
	Key          [32]byte
	Draft        []byte // the draft as an assistant message (Draft.Message)
	Notice       []byte // the notice message (NoticeMessage)
	Continuation []byte // the continuation as an assistant message (Draft.Message)
}

// NewInsertion records a revised turn: draft, notice (NoticeMessage) and
// continuation, keyed by the content the client sees.
func NewInsertion(draft Draft, notice []byte, cont Draft) Insertion {
	return Insertion{
		Key:          insertionKey(MergedContent(draft.Content, cont.Content)),
		Draft:        draft.Message(),
		Notice:       bytes.Clone(notice),
		Continuation: cont.Message(),
	}
}

// insertionKey is the sha256 of a merged assistant content
// (MergedContent). Insertions are matched by content, not by bytes or
// position: clients rebuild the history they send (key order, escaping,
// reasoning kept or dropped), but send back the visible text they got.
// A client that edits that text (trims it, say) gets no restoration, and
// its history keeps the merged message.
func insertionKey(mergedContent string) [32]byte {
	return sha256.Sum256([]byte(mergedContent))
}

// Restore puts back what the model actually saw in the history of req:
// each assistant message whose visible content (Message.Content) contains
// Separator and whose InsertionKey lookup finds is replaced by three
// messages, in their real order: the draft, the notice and the
// continuation. The continuation is the client's message with its content
// replaced by the continuation's and, when the client's message has a
// reasoning key, that key set to the continuation's reasoning; so the
// client's tool_calls and other keys stay. The draft carries its
// reasoning only when the client's message has a reasoning key. Every
// other byte of req.Body is kept.
//
// body is always usable: req.Body itself when nothing was restored. err
// reports an insertion that could not be used (that message is left as it
// is) or a request that repeats a key (left alone). A restored request
// does not match again: none of its messages holds the merged content.
func Restore(req *conv.Request, lookup func(key [32]byte) (Insertion, bool)) (body []byte, restored int, err error) {
	return restore(req, lookup, nil)
}

// restore is Restore with the messages already searched remembered in
// seen (nil: none).
func restore(req *conv.Request, lookup func(key [32]byte) (Insertion, bool), seen *resolved.Cache[conv.RawKey, bool]) (body []byte, restored int, err error) {
	body, restored, _, err = restoreFrom(req, 0, lookup, seen)
	return body, restored, err
}

// restoreFrom is restore over the messages from index from on (those
// before are known to hold no merged turn); clean is the index of the
// first message that holds one (len(req.Messages): none does).
func restoreFrom(req *conv.Request, from int, lookup func(key [32]byte) (Insertion, bool), seen *resolved.Cache[conv.RawKey, bool]) (body []byte, restored, clean int, err error) {
	clean = len(req.Messages)
	if req.DuplicateKeys {
		clean = 0 // left alone, not searched
	}
	body, restored, err = replaceAssistantsFrom(req, from, func(m *conv.Message) ([]byte, bool, error) {
		if !merged(seen, m) {
			return nil, false, nil
		}
		clean = min(clean, m.Index)
		ins, ok := lookup(insertionKey(m.Content))
		if !ok {
			return nil, false, nil
		}
		repl, err := restoreOne(req, *m, ins)
		return repl, err == nil, err
	})
	return body, restored, clean, err
}

// merged reports whether m's content holds the Separator. seen, when not
// nil, remembers the answer by the message's conv.RawKey: a conversation
// sends its whole history with every request, and most turns are never
// revised, so each message's text is searched once in its life instead
// of on every request (232 µs a request for 300 turns of 2 KB; the
// answer cannot change for the same bytes, and an insertion recorded
// later is still looked up for a message that holds the Separator).
func merged(seen *resolved.Cache[conv.RawKey, bool], m *conv.Message) bool {
	k := m.RawKey()
	if seen == nil || len(m.Content) < len(Separator) || k == (conv.RawKey{}) {
		return strings.Contains(m.Content, Separator) // short: cheaper than a lookup
	}
	return seen.Get(k, func() bool { return strings.Contains(m.Content, Separator) })
}

// maxScanned bounds the messages a Restorer remembers (past it, it
// starts again: forgetting costs a search more).
const maxScanned = 1 << 16

// ReplaceAssistants returns req.Body with every assistant message for
// which repl gives a replacement replaced by it, in one pass, the number
// replaced, and the errors of the messages repl could not replace (left as
// they are). A request that repeats a key is left alone. The review's
// Restore and the deliberate tool's restoration use it.
func ReplaceAssistants(req *conv.Request, repl func(m *conv.Message) ([]byte, bool, error)) (body []byte, replaced int, err error) {
	return replaceAssistantsFrom(req, 0, repl)
}

// replaceAssistantsFrom is ReplaceAssistants over the messages from index
// from on.
func replaceAssistantsFrom(req *conv.Request, from int, repl func(m *conv.Message) ([]byte, bool, error)) (body []byte, replaced int, err error) {
	if req.DuplicateKeys {
		return req.Body, 0, errors.New("restore: the request repeats a key")
	}
	var edits []conv.Edit
	var errs []error
	for i := from; i < len(req.Messages); i++ {
		m := &req.Messages[i] // not copied: a long history has hundreds, and repl reads them only
		if m.Role != conv.RoleAssistant {
			continue
		}
		b, ok, err := repl(m)
		if err != nil {
			errs = append(errs, fmt.Errorf("restore message %d: %w", m.Index, err))
		}
		if ok {
			edits = append(edits, conv.Edit{Start: m.Start, End: m.End, Repl: b})
		}
	}
	if len(edits) == 0 {
		return req.Body, 0, errors.Join(errs...)
	}
	return conv.ApplyEdits(req.Body, edits), len(edits), errors.Join(errs...)
}

// restoreOne returns the three messages that replace merged message m.
func restoreOne(req *conv.Request, m conv.Message, ins Insertion) ([]byte, error) {
	return RestoreMessage(req.Body[m.Start:m.End], m, [][]byte{ins.Draft, ins.Notice}, ins.Continuation)
}

// RestoreMessage returns the messages that replace merged message m (raw
// its bytes): before (stored raw messages, the draft first), then the
// final step (stored) edited from m: m with its content replaced by the
// final step's and, when m has a reasoning key, that key set to the final
// step's reasoning, so the client's tool_calls and other keys stay.
// Assistant messages of before carry their reasoning only when m has a
// reasoning key, or when they carry tool calls (a tool-pair notice's
// draft: DeepSeek, Kimi and GLM answer 400 to a tool-call message without
// its reasoning, PROTOCOLS.md rule 1). The messages are joined by commas, ready to splice into
// a messages array.
func RestoreMessage(raw []byte, m conv.Message, before [][]byte, final []byte) ([]byte, error) {
	for _, v := range append(before, final) {
		if !conv.ValidJSON(v) || !gjson.ParseBytes(v).IsObject() {
			return nil, errors.New("stored message is not a json object")
		}
	}
	var out []byte
	for _, b := range before {
		if !m.HasReasoningKey && gjson.GetBytes(b, "role").Str == conv.RoleAssistant && !gjson.GetBytes(b, "tool_calls").Exists() {
			var err error
			if b, err = WithoutReasoning(b); err != nil {
				return nil, err
			}
		}
		out = append(append(out, b...), ',')
	}
	cont, err := continuationFrom(raw, m, final)
	if err != nil {
		return nil, err
	}
	return append(out, cont...), nil
}

// WithoutReasoning removes every reasoning key from a message.
func WithoutReasoning(msg []byte) ([]byte, error) {
	var err error
	for _, k := range conv.ReasoningFields {
		if gjson.GetBytes(msg, k).Exists() {
			if msg, err = sjson.DeleteBytes(msg, k); err != nil {
				return nil, err
			}
		}
	}
	return msg, nil
}

// continuationFrom edits the client's merged message (raw) into the
// continuation: content and, when present, the reasoning key from stored.
func continuationFrom(raw []byte, m conv.Message, stored []byte) ([]byte, error) {
	s := gjson.ParseBytes(stored)
	content := s.Get("content").Raw
	if content == "" {
		content = "null"
	}
	out, err := sjson.SetRawBytes(bytes.Clone(raw), "content", []byte(content))
	if err != nil || !m.HasReasoningKey {
		return out, err
	}
	return sjson.SetRawBytes(out, m.ReasoningField, quote(conv.DeltaReasoning(s)))
}
