package conv

import (
	"errors"
	"fmt"
	"sync"
	"unicode/utf8"
	"unsafe"

	"github.com/tidwall/gjson"
	"github.com/zeebo/xxh3"
)

// ErrNotChat is returned by ParseRequest when a body is not a chat
// completions request: not valid UTF-8 JSON, not an object, or without a
// "messages" array. The proxy forwards such bodies untouched.
var ErrNotChat = errors.New("conv: not a chat completions request")

// Request is a read-only view of a chat completions request body.
//
// Every field is derived from Body, which is not copied: its strings share
// Body's memory, so the caller must not change Body while the view, or a
// string taken from it, is in use (a string kept long after the request,
// in a cache, should be cloned so that it does not hold the whole body).
// A Reparser's view of a long history is the exception: its messages'
// strings are a copy of their own, shared with the conversation's later
// views (conv/shared.go).
// Its only other state is a cache of Turns filled once; its methods are
// safe for concurrent use.
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
	// tally is what the hooks ask of the messages, folded in as they were
	// placed (tally.go).
	tally tally

	// DuplicateKeys is true when the top-level object or a message object
	// repeats a key. The view then follows the last occurrence (as
	// encoding/json and Python's json do), while a gjson path lookup finds
	// the first: callers that edit by path should leave such bodies alone.
	DuplicateKeys bool

	// fields are the members of the top-level object, in body order.
	fields []Field
	// msgDup is true when a message object repeats a key (DuplicateKeys
	// less the top level's).
	msgDup bool
	// held is heldBytes, once a Reparser has asked.
	held int
	// derived says the view was made by Apply from another, its message
	// array its own: Recycle may give it back.
	derived bool
	// callArray is the array the Reparser moved the messages' tool calls
	// into (their ToolCalls are slices of it), given back with the
	// message array (recycle). Its room past them (sized for the previous
	// view's calls, used up to where the history stopped repeating) is
	// memory the messages' own counts do not show: spareCalls.
	callArray []ToolCall
	// reused counts the messages a Reparser took from an earlier view.
	reused int
	// arr is the message array Messages is the head of when later views
	// of the conversation may share it (sharedArray; nil: none may). Its
	// messages' strings are then memory of their own, never a body's
	// (own).
	arr *sharedArray
	// owned says a view Apply derived holds no string of a body: those of
	// a view that owns its strings (arr), the edits' texts (Edit.text),
	// nothing read from the edited body (editedBodies.keep keeps only
	// such a view's array with the body).
	owned bool

	// edited is the table of the Reparser that parsed the view (nil:
	// none), where Apply keeps the bodies it edits and writes the next
	// request's over them (editedBodies).
	edited *editedBodies
	// id numbers the views a Reparser parsed; base is the id of the one
	// it read this one against (0: none) when the first same bytes of the
	// two bodies are the same, compared byte for byte: its header and
	// the messages it repeats at their very places.
	id, base uint64
	same     int
	// lin numbers the body of a view derive made and names the kept
	// body it was written over (Lineage); zero for other views.
	lin lineage
	// keys are the keys of Body's blocks (BodyKeys), when the Reparser
	// was given them; keyed counts the messages it took from an earlier
	// view on them, uncompared.
	keys  []xxh3.Uint128
	keyed int
	// cuts are the sorted edits Apply made Body with from the body from,
	// whose places and lengths give Body as pieces of the two
	// (AppendPieces), for a large body; nil: none. Read only.
	cuts []Edit
	from []byte
}

// Field is one member of a request's top-level object: its key and the
// byte range of its value within Body.
type Field struct {
	Key        string
	Start, End int
	key        RawKey // RawKeyOf the value's bytes; zero for "messages"
}

// RawKey returns RawKeyOf(Body[Start:End]), made when the member was read
// (or carried from the previous request whose value it repeats: see
// Reparser); zero for "messages", whose history is never hashed whole.
// Readers that key a member's value (the capture's blobs, the shaper's
// prints of the request's head) use it instead of hashing the value again
// on every request: the "tools" of an agent are tens of kilobytes.
func (f Field) RawKey() RawKey { return f.key }

// fieldKey is the RawKey a member named name with value raw carries.
func fieldKey(name, raw string) RawKey {
	if name == "messages" {
		return RawKey{}
	}
	return rawKeyString(raw)
}

// Fields returns the members of the top-level object in body order (a
// repeated key once per occurrence). Callers must not modify the result.
func (r *Request) Fields() []Field { return r.fields }

// Field returns the value range of the first member named key (the one a
// gjson path lookup finds), and whether there is one.
func (r *Request) Field(key string) (f Field, ok bool) {
	for _, f := range r.fields {
		if f.Key == key {
			return f, true
		}
	}
	return Field{}, false
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
	// The view's strings share body's memory (see Request): copying a
	// body of a megabyte for every request was a fifth of the proxy's
	// garbage.
	root := gjson.Parse(bodyString(body))
	if !root.IsObject() {
		return nil, fmt.Errorf("%w: not an object", ErrNotChat)
	}
	r := &Request{Body: body}
	top := r.topLevel(root)
	if !top.get("messages").IsArray() {
		return nil, fmt.Errorf("%w: no messages array", ErrNotChat)
	}
	if m := top.get("model"); m.Type == gjson.String {
		r.Model = m.Str
	}
	r.Stream = top.get("stream").Type == gjson.True
	r.Messages, r.tally = parseMessages(top.get("messages"), &r.msgDup)
	if len(r.Messages) > MaxMessages || r.tally.calls > MaxToolCalls {
		return nil, fmt.Errorf("%w: more than %d messages or %d tool calls", ErrNotChat, MaxMessages, MaxToolCalls)
	}
	r.DuplicateKeys = r.DuplicateKeys || r.msgDup
	return r, nil
}

// topKeys are the top-level keys the view reads.
var topKeys = []string{"messages", "model", "stream"}

// bodyString returns body as a string sharing its memory.
func bodyString(body []byte) string { return AsString(body) }

// AsString returns b as a string sharing its memory, to read it with
// gjson without a copy (gjson.GetBytes copies every result it returns).
// The string, and every result read from it, is valid only as long as b
// does not change.
func AsString(b []byte) string {
	if len(b) == 0 {
		return ""
	}
	return unsafe.String(&b[0], len(b))
}

// topLevel reads the top-level object: it records every member in
// r.fields, sets r.DuplicateKeys when a key repeats, and returns the last
// value of the keys the view reads.
func (r *Request) topLevel(root gjson.Result) keyVals {
	out := keyVals{names: topKeys}
	var seen keySet
	r.fields = make([]Field, 0, 8)
	root.ForEach(func(k, v gjson.Result) bool {
		if seen.add(k.Str) {
			r.DuplicateKeys = true
		}
		r.fields = append(r.fields, Field{Key: k.Str, Start: v.Index, End: v.Index + len(v.Raw), key: fieldKey(k.Str, v.Raw)})
		for i, w := range out.names {
			if k.Str == w {
				out.vals[i] = v
			}
		}
		return true
	})
	return out
}

// parseMessages builds one Message per element of the messages array and
// their tally (tool calls counted); it stops past MaxMessages messages or
// MaxToolCalls tool calls (the caller then refuses the request).
func parseMessages(arr gjson.Result, dup *bool) ([]Message, tally) {
	msgs := make([]Message, 0, min(len(arr.Raw)/256+2, 256))
	t := newTally()
	arr.ForEach(func(_, v gjson.Result) bool {
		msgs = append(msgs, parseMessage(len(msgs), v, dup))
		t.add(msgs, len(msgs)-1)
		return len(msgs) <= MaxMessages && t.calls <= MaxToolCalls
	})
	if len(msgs) > MaxMessages || t.calls > MaxToolCalls {
		return msgs, t // refused: not kept
	}
	return fitted(msgs), t
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
	var seen keySet
	obj.ForEach(func(k, v gjson.Result) bool {
		if seen.add(k.Str) {
			*dup = true
		}
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
