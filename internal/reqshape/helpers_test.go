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
	c, _ := candidates(req, rule, memo, nil, 0, false)
	return c
}

// samePrints reports whether two requests' prints are the same (whatever
// arrays hold them).
func samePrints(a, b prints) bool {
	return a.head == b.head && (a.msgs == nil) == (b.msgs == nil) && slices.Equal(a.msgs, b.msgs)
}

// carryMade sends body, a request of conversation, through s's hook and
// reports whether the conversation had a carry before the request went
// upstream, once the work beside its trip ran, and once the work after
// its answer ran (as the proxy runs each).
func carryMade(t *testing.T, s *Shaper, body []byte, conversation string) (beforeTrip, beside, afterAnswer bool) {
	t.Helper()
	c := call(t, body, conversation)
	if _, err := s.TransformRequest(context.Background(), c, body); err != nil {
		t.Fatal(err)
	}
	beforeTrip = hasCarry(s, conversation)
	c.RunBeside()
	beside = hasCarry(s, conversation)
	c.RunAfter()
	return beforeTrip, beside, hasCarry(s, conversation)
}

// hasCarry reports whether s holds a carry of conversation.
func hasCarry(s *Shaper, conversation string) bool {
	s.carries.mu.Lock()
	defer s.carries.mu.Unlock()
	return s.carries.by[conversation][0] != nil
}
