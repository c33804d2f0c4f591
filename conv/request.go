package conv

import (
	"errors"
	"fmt"
	"slices"
	"sync"
	"unicode/utf8"

	"github.com/tidwall/gjson"
)

// ErrNotChat is returned by ParseRequest when a body is not a chat
// completions request: not valid UTF-8 JSON, not an object, or without a
// "messages" array. The proxy forwards such bodies untouched.
var ErrNotChat = errors.New("conv: not a chat completions request")

// Request is a read-only view of a chat completions request body.
//
// Every field is derived from Body, which is not copied: the caller must not
// change Body while the view is in use. Its only other state is a cache of
// Turns filled once; its methods are safe for concurrent use.
type Request struct {
	// Body is the raw body the view was built over. All byte ranges
	// (Message.Start, Message.ReasoningStart, ...) are offsets into it.
	Body []byte
	// Model is the top-level "model" string, or "".
	Model string
	// Stream is true when the top-level "stream" is the JSON literal true.
	Stream bool
	// Messages holds one entry per element of "messages", in order;
	// Messages[i].Index == i.
	Messages []Message
	// turns caches Turns: the proxy's hooks ask for it several times per
	// request.
	turnsOnce sync.Once
	turns     []Turn

	// DuplicateKeys is true when the top-level object or a message object
	// repeats a key. The view then follows the last occurrence (as
	// encoding/json and Python's json do), while a gjson path lookup finds
	// the first: callers that edit by path should leave such bodies alone.
	DuplicateKeys bool
}

// ParseRequest builds a read-only view of a chat completions request body.
// It returns an error wrapping ErrNotChat when body is not valid UTF-8, not
// valid JSON (as encoding/json's json.Valid judges it: ValidJSON, nesting
// deeper than MaxDepth included), not a JSON object, or has no "messages"
// array (the last "messages" key when repeated). No body, however deep,
// makes it recurse.
func ParseRequest(body []byte) (*Request, error) {
	if !utf8.Valid(body) {
		return nil, fmt.Errorf("%w: invalid utf-8", ErrNotChat)
	}
	if !ValidJSON(body) {
		return nil, fmt.Errorf("%w: invalid json", ErrNotChat)
	}
	root := gjson.ParseBytes(body)
	if !root.IsObject() {
		return nil, fmt.Errorf("%w: not an object", ErrNotChat)
	}
	r := &Request{Body: body}
	top := lastKeys(root, &r.DuplicateKeys, "messages", "model", "stream")
	if !top.get("messages").IsArray() {
		return nil, fmt.Errorf("%w: no messages array", ErrNotChat)
	}
	if m := top.get("model"); m.Type == gjson.String {
		r.Model = m.Str
	}
	r.Stream = top.get("stream").Type == gjson.True
	r.Messages = parseMessages(top.get("messages"), &r.DuplicateKeys)
	return r, nil
}

// parseMessages builds one Message per element of the messages array.
func parseMessages(arr gjson.Result, dup *bool) []Message {
	var msgs []Message
	arr.ForEach(func(_, v gjson.Result) bool {
		msgs = append(msgs, parseMessage(len(msgs), v, dup))
		return true
	})
	return msgs
}

// maxWanted bounds the keys one lastKeys call looks for.
const maxWanted = 16

// keyVals holds the values lastKeys found, in the order of the wanted
// names. It is a value with a fixed array, so it stays on the stack: a
// history of hundreds of messages allocates nothing for it.
type keyVals struct {
	names []string
	vals  [maxWanted]gjson.Result
}

// get returns the value of key name (the zero Result when it is missing).
func (k *keyVals) get(name string) gjson.Result {
	for i, n := range k.names {
		if n == name {
			return k.vals[i]
		}
	}
	return gjson.Result{}
}

// lastKeys returns the last value of each wanted key of object obj (a
// missing key maps to the zero Result) and sets *dup when any key of obj
// appears twice. At most maxWanted keys are wanted.
func lastKeys(obj gjson.Result, dup *bool, wanted ...string) keyVals {
	out := keyVals{names: wanted[:min(len(wanted), maxWanted)]}
	var seenBuf [16]string
	seen := seenBuf[:0]
	obj.ForEach(func(k, v gjson.Result) bool {
		if slices.Contains(seen, k.Str) {
			*dup = true
		}
		seen = append(seen, k.Str)
		for i, w := range out.names {
			if k.Str == w {
				out.vals[i] = v
			}
		}
		return true
	})
	return out
}

// Roles that the turn rules and the conversation key treat specially.
const (
	RoleSystem    = "system"
	RoleDeveloper = "developer"
	RoleUser      = "user"
	RoleAssistant = "assistant"
	RoleTool      = "tool"
)
