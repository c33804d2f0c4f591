package deliberate

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"

	"github.com/shaperproxy/shaperproxy/conv"
	"github.com/shaperproxy/shaperproxy/internal/ledger"
	"github.com/shaperproxy/shaperproxy/internal/review"
)

// ledgerBucket holds, per conversation, what a deliberation hid from the
// client, keyed by the message the client sends back in its place.
const ledgerBucket = "deliberate"

// anyKey marks a conversation that has records: requests of the others
// cost one read.
const anyKey = "any"

// record is what one deliberation hid. The client's message (found by its
// key) is replaced by Before, then Final edited from the client's message
// (review.RestoreMessage), or, when Final is empty, by Before alone (the
// deliberate call beside the client's calls: the model's message with
// every call, then the deliberate result).
type record struct {
	Before [][]byte
	Final  []byte
}

// recordJSON is a record as the ledger keeps it.
type recordJSON struct {
	Before []json.RawMessage `json:"before"`
	Final  json.RawMessage   `json:"final,omitempty"`
}

// messageKey identifies an assistant message the client sends back: its
// visible content and its tool call ids, which clients keep as they got
// them (they rebuild the rest: key order, escaping, reasoning kept or not).
func messageKey(content string, calls []conv.ToolCall) string {
	h := sha256.New()
	h.Write([]byte(content))
	for _, c := range calls {
		h.Write([]byte{0})
		h.Write([]byte(c.ID))
	}
	return hex.EncodeToString(h.Sum(nil))
}

// store keeps records in the ledger.
type store struct{ l *ledger.Store }

func (s store) put(conversation, key string, r record) error {
	j := recordJSON{Final: r.Final}
	for _, m := range r.Before {
		j.Before = append(j.Before, m)
	}
	b, err := json.Marshal(j)
	if err != nil {
		return err
	}
	if err := s.l.Put(ledgerBucket, conversation, key, b); err != nil {
		return err
	}
	return s.l.Put(ledgerBucket, conversation, anyKey, []byte{1})
}

// restore puts back, in req, every message a deliberation hid from the
// client. body is req.Body itself when nothing was restored.
func (s store) restore(req *conv.Request, conversation string) (body []byte, n int, err error) {
	if _, ok, err := s.l.Get(ledgerBucket, conversation, anyKey); err != nil || !ok {
		return req.Body, 0, err
	}
	return review.ReplaceAssistants(req, func(m *conv.Message) ([]byte, bool, error) {
		raw, ok, err := s.l.Get(ledgerBucket, conversation, messageKey(m.Content, m.ToolCalls))
		if err != nil || !ok {
			return nil, false, nil
		}
		repl, err := restoreOne(req.Body[m.Start:m.End], *m, raw)
		return repl, err == nil, err
	})
}

// restoreOne returns the messages that replace client message m (raw).
func restoreOne(raw []byte, m conv.Message, stored []byte) ([]byte, error) {
	var r recordJSON
	if err := json.Unmarshal(stored, &r); err != nil || len(r.Before) == 0 {
		return nil, errors.New("unreadable record")
	}
	before := make([][]byte, len(r.Before))
	for i, b := range r.Before {
		before[i] = b
	}
	if len(r.Final) > 0 {
		return review.RestoreMessage(raw, m, before, r.Final)
	}
	// Beside the client's calls: the model's message with every call (the
	// client's message is not kept: its calls are in it), then the
	// deliberate result.
	if len(before) != 2 {
		return nil, errors.New("unreadable record")
	}
	msg := before[0]
	if !m.HasReasoningKey {
		var err error
		if msg, err = review.WithoutReasoning(msg); err != nil {
			return nil, err
		}
	}
	return append(append(append([]byte(nil), msg...), ','), before[1]...), nil
}
