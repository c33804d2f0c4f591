package reqshape

import (
	"bytes"
	"context"
	"slices"
	"testing"

	"github.com/shaperproxy/shaperproxy/conv"

	"github.com/tidwall/sjson"
)

func setStr(obj []byte, key, val string) []byte {
	out, _ := sjson.SetBytes(obj, key, val)
	return out
}

func appendMsg(body, msg []byte) []byte {
	out, _ := sjson.SetRawBytes(body, "messages.-1", msg)
	return bytes.Clone(out)
}

// candsOf is candidates without a carry.
func candsOf(req *conv.Request, rule shapeRule, memo *memo) []cand {
	c, _ := candidates(req, rule, memo, nil, 0)
	return c
}

// samePrints reports whether two requests' prints are the same (whatever
// arrays hold them).
func samePrints(a, b prints) bool {
	return a.head == b.head && (a.msgs == nil) == (b.msgs == nil) && slices.Equal(a.msgs, b.msgs)
}

// carriesBeside sends body, a request of conversation, through s's hook
// and reports whether the conversation had a carry before the work beside
// the trip ran, and after.
func carriesBeside(t *testing.T, s *Shaper, body []byte, conversation string) (before, after bool) {
	t.Helper()
	c := call(t, body, conversation)
	if _, err := s.TransformRequest(context.Background(), c, body); err != nil {
		t.Fatal(err)
	}
	before = hasCarry(s, conversation)
	c.RunBeside() // as the proxy runs it once the request went upstream
	return before, hasCarry(s, conversation)
}

// hasCarry reports whether s holds a carry of conversation.
func hasCarry(s *Shaper, conversation string) bool {
	s.carries.mu.Lock()
	defer s.carries.mu.Unlock()
	return s.carries.by[conversation] != nil
}
