package review

import (
	"errors"
	"fmt"

	"github.com/shaperproxy/shaperproxy/conv"
	"github.com/tidwall/gjson"
)

// continuationRequest returns the primary request with two messages
// appended to its messages array: the draft as an assistant message (its
// reasoning under the key the upstream used, see Draft.Message) and
// notice (a raw message, NoticeMessage). Every other byte of primaryBody
// is kept, "stream" included: the continuation streams when the client
// asked for a stream. notice must be a JSON object.
func continuationRequest(primaryBody []byte, draft Draft, notice []byte) ([]byte, error) {
	if !conv.ValidJSON(notice) || !gjson.ParseBytes(notice).IsObject() {
		return nil, errors.New("review: notice is not a json object")
	}
	req, err := conv.ParseRequest(primaryBody)
	if err != nil {
		return nil, fmt.Errorf("review: continuation: %w", err)
	}
	if req.DuplicateKeys {
		return nil, errors.New("review: continuation: the request repeats a key")
	}
	return AppendMessages(req, draft.Message(), notice), nil
}

// AppendMessages returns a copy of req.Body with msgs (raw JSON objects)
// inserted before the closing bracket of its messages array; every other
// byte is kept.
func AppendMessages(req *conv.Request, msgs ...[]byte) []byte {
	arr := gjson.GetBytes(req.Body, "messages")
	at := arr.Index + len(arr.Raw) - 1 // the closing ']'
	if n := len(req.Messages); n > 0 {
		at = req.Messages[n-1].End
	}
	out := make([]byte, 0, len(req.Body)+64)
	out = append(out, req.Body[:at]...)
	for i, m := range msgs {
		if i > 0 || len(req.Messages) > 0 {
			out = append(out, ',')
		}
		out = append(out, m...)
	}
	return append(out, req.Body[at:]...)
}
