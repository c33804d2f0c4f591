package conv

import (
	"bytes"

	"github.com/tidwall/gjson"
)

// tailBytes is how much of the end of a non-stream body a UsageWatcher keeps:
// the usage object comes last or nearly (after it only short keys such as
// system_fingerprint or service_tier).
const tailBytes = 32 << 10

// UsageWatcher finds the usage a response reports as it passes (the proxy
// runs one per call and hands what it found to every observer with the
// call's end, proxy.End.Usage; internal/accounting reads it):
//
//   - in stream events: "usage" of a chat chunk, inline with the finish
//     or in a chunk of its own with "choices": [] (OpenAI's
//     stream_options.include_usage, OpenRouter's usage chunk), the last
//     non-null one winning; Anthropic's "message.usage" of message_start
//     completed by the "usage" of message_delta (keys of the latter win);
//     "response.usage" of a Responses stream's response.completed;
//   - at the end of a non-stream body: its top-level "usage".
//
// It keeps the usage objects it found and the last 32 KiB of a body, no
// more. The zero UsageWatcher is ready; it is not safe for concurrent use.
type UsageWatcher struct {
	start []byte // Anthropic's message_start usage
	last  []byte // the last top-level or response usage
	model string // the model a usage-bearing payload named
	tail  []byte // the end of a non-stream body
	body  int64  // body bytes seen
	// answer is the non-stream body read whole (whole), once Raw read it.
	answer Answer
	whole  bool
}

var usageKey = []byte(`"usage"`)

// Event looks at the data of one SSE event (whole, not truncated). Most
// chunks carry no usage, or "usage": null: one key lookup.
func (w *UsageWatcher) Event(data []byte) {
	if !bytes.Contains(data, usageKey) {
		return
	}
	// Read in place (GetBytes copies each result; most chunks carry
	// "usage": null); what is kept is copied.
	js := AsString(data)
	if u := gjson.Get(js, "usage"); u.Exists() {
		// A top-level usage key ("usage": null in most chat chunks):
		// never an Anthropic or Responses event, whose usage is nested.
		if u.IsObject() {
			w.last = []byte(u.Raw)
			w.noteModel(data, "model")
		}
		return
	}
	switch {
	case bytes.Contains(data, messageStart): // Anthropic: input and cache tokens come first
		if u := gjson.Get(js, "message.usage"); u.IsObject() {
			w.start = []byte(u.Raw)
			w.noteModel(data, "message.model")
		}
	case bytes.Contains(data, responseEvent): // Responses: response.completed
		if u := gjson.Get(js, "response.usage"); u.IsObject() {
			w.last = []byte(u.Raw)
			w.noteModel(data, "response.model")
		}
	}
}

var (
	messageStart  = []byte(`"message_start"`)
	responseEvent = []byte(`"response.`)
)

// noteModel keeps the first model named at path.
func (w *UsageWatcher) noteModel(data []byte, path string) {
	if w.model == "" {
		if m := gjson.Get(AsString(data), path); m.Type == gjson.String {
			w.model = OwnModel(m.String()) // data is the caller's buffer
		}
	}
}

// Body looks at the next bytes of a non-stream body.
func (w *UsageWatcher) Body(p []byte) {
	w.body += int64(len(p))
	w.tail = append(w.tail, p...)
	if len(w.tail) > 2*tailBytes {
		w.tail = append(w.tail[:0], w.tail[len(w.tail)-tailBytes:]...)
	}
}

// Raw returns the usage found, as the upstream wrote it (Anthropic's two
// objects merged into one), or nil.
func (w *UsageWatcher) Raw() []byte {
	if w.last == nil && w.start == nil && w.body > 0 {
		w.fromBody()
	}
	return merge(w.start, w.last)
}

// Model returns the model named next to the usage, or "".
func (w *UsageWatcher) Model() string { return w.model }

// Answer returns what the non-stream body said (ReadAnswer), read once
// Raw was called, or nil: a stream, or a body over 64 KiB (of which the
// watcher keeps the end). It points into the body, which the watcher no
// longer writes: valid as long as the caller keeps it.
func (w *UsageWatcher) Answer() *Answer {
	if !w.whole {
		return nil
	}
	return &w.answer
}

// fromBody reads the usage of a whole body, or finds it in the body's
// tail when the body was longer.
func (w *UsageWatcher) fromBody() {
	if int64(len(w.tail)) == w.body {
		// Read in place, once for every reader of the call's end (Answer):
		// the tail is not written again, so the usage, the model and the
		// answer may keep pointing into it.
		w.answer = ReadAnswer(w.tail)
		w.whole = true
		if u := w.answer.Usage; u.IsObject() {
			if end := u.Index + len(u.Raw); u.Index > 0 && end <= len(w.tail) && AsString(w.tail[u.Index:end]) == u.Raw { // where gjson found it: no copy
				w.last = w.tail[u.Index:end:end] // no room to append into the body
			} else {
				w.last = []byte(u.Raw)
			}
		}
		if m := w.answer.Model; m.Type == gjson.String {
			w.model = OwnModel(m.String()) // as noteModel: the model keys long-lived caches
		}
		w.tail = nil
		return
	}
	w.last = lastUsage(w.tail)
	w.tail = nil
}

// lastUsage finds the last "usage" key of an object in the end of a JSON
// document (a key: after "{" or ",", before ":") and returns its object.
func lastUsage(b []byte) []byte {
	for end := len(b); end > 0; {
		i := bytes.LastIndex(b[:end], usageKey)
		if i < 0 {
			return nil
		}
		end = i
		before := bytes.TrimRight(b[:i], " \t\r\n")
		if len(before) == 0 || before[len(before)-1] != ',' && before[len(before)-1] != '{' {
			continue
		}
		rest := bytes.TrimLeft(b[i+len(usageKey):], " \t\r\n")
		if len(rest) == 0 || rest[0] != ':' {
			continue
		}
		if obj := objectAt(bytes.TrimLeft(rest[1:], " \t\r\n")); obj != nil {
			return obj
		}
	}
	return nil
}

// objectAt returns the JSON object b starts with, or nil when b does not
// start with a whole, valid object.
func objectAt(b []byte) []byte {
	if len(b) == 0 || b[0] != '{' {
		return nil
	}
	depth, inString := 0, false
	for i := 0; i < len(b); i++ {
		c := b[i]
		switch {
		case inString && c == '\\':
			i++
		case c == '"':
			inString = !inString
		case inString:
		case c == '{' || c == '[':
			depth++
		case c == '}' || c == ']':
			if depth--; depth == 0 {
				if gjson.ValidBytes(b[:i+1]) {
					return b[:i+1]
				}
				return nil
			}
		}
	}
	return nil
}

// merge returns last with the keys of first it lacks added at its end
// (Anthropic's message_start usage completed by message_delta's).
func merge(first, last []byte) []byte {
	if first == nil || last == nil {
		if last != nil {
			return last
		}
		return first
	}
	have := map[string]bool{}
	gjson.ParseBytes(last).ForEach(func(k, _ gjson.Result) bool {
		have[k.String()] = true
		return true
	})
	trimmed := bytes.TrimSpace(last)
	out := append([]byte(nil), trimmed[:len(trimmed)-1]...)
	sep := len(have) > 0
	gjson.ParseBytes(first).ForEach(func(k, v gjson.Result) bool {
		if !have[k.String()] {
			if sep {
				out = append(out, ',')
			}
			out = append(append(append(out, k.Raw...), ':'), v.Raw...)
			sep = true
		}
		return true
	})
	return append(out, '}')
}
