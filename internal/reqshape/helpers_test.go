package reqshape

import (
	"bytes"

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
