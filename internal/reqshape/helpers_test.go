package reqshape

import (
	"bytes"
	"slices"

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
