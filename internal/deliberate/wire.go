package deliberate

import (
	"bytes"
	"fmt"

	"github.com/tidwall/gjson"
	"github.com/tidwall/sjson"
)

// declares reports whether a tools array already has a function named
// deliberate.
func declares(tools gjson.Result) bool {
	found := false
	tools.ForEach(func(_, t gjson.Result) bool {
		found = t.Get("function.name").Str == ToolName
		return !found
	})
	return found
}

// startsCall returns the index of the deliberate call whose first
// fragment a stream chunk carries (the fragment with the function name).
func startsCall(data []byte) (int, bool) {
	if !bytes.Contains(data, []byte(`"`+ToolName+`"`)) {
		return 0, false
	}
	idx, found := 0, false
	gjson.GetBytes(data, "choices.0.delta.tool_calls").ForEach(func(pos, tc gjson.Result) bool {
		if tc.Get("function.name").Str == ToolName {
			idx, found = callIndex(tc, int(pos.Int())), true
		}
		return !found
	})
	return idx, found
}

// callIndex is a tool call fragment's "index", or its position.
func callIndex(tc gjson.Result, pos int) int {
	if i := tc.Get("index"); i.Type == gjson.Number {
		return int(i.Int())
	}
	return pos
}

// withoutCall returns a stream chunk's data with the fragments of tool
// call idx removed from choices[0].delta.tool_calls and the later calls'
// indexes lowered by one, so the client sees its own calls numbered from
// 0 with no gap. A chunk left with no tool call fragment loses the key.
// Other chunks are returned as they are.
func withoutCall(data []byte, idx int) ([]byte, error) {
	tcs := gjson.GetBytes(data, "choices.0.delta.tool_calls")
	if !tcs.IsArray() {
		return data, nil
	}
	kept := []byte{'['}
	n := 0
	var err error
	tcs.ForEach(func(pos, tc gjson.Result) bool {
		i := callIndex(tc, int(pos.Int()))
		if i == idx {
			return true
		}
		raw := []byte(tc.Raw)
		if i > idx && tc.Get("index").Exists() {
			if raw, err = sjson.SetBytes(raw, "index", i-1); err != nil {
				return false
			}
		}
		if n > 0 {
			kept = append(kept, ',')
		}
		kept, n = append(kept, raw...), n+1
		return true
	})
	if err != nil {
		return nil, fmt.Errorf("deliberate: rewrite tool call index: %w", err)
	}
	if n == 0 {
		return sjson.DeleteBytes(bytes.Clone(data), "choices.0.delta.tool_calls")
	}
	return sjson.SetRawBytes(bytes.Clone(data), "choices.0.delta.tool_calls", append(kept, ']'))
}

// bodyWithoutCall is withoutCall for a non-stream body: the call with id
// is removed from choices[0].message.tool_calls.
func bodyWithoutCall(body []byte, id string) ([]byte, error) {
	tcs := gjson.GetBytes(body, "choices.0.message.tool_calls")
	kept := []byte{'['}
	n := 0
	tcs.ForEach(func(_, tc gjson.Result) bool {
		if tc.Get("id").Str != id {
			if n > 0 {
				kept = append(kept, ',')
			}
			kept, n = append(kept, tc.Raw...), n+1
		}
		return true
	})
	return sjson.SetRawBytes(bytes.Clone(body), "choices.0.message.tool_calls", append(kept, ']'))
}

// toolResult returns the tool message answering call id with content.
func toolResult(id string, content []byte) []byte {
	b := []byte(`{"role":"tool","tool_call_id":`)
	b = append(quoteJSON(b, id), `,"content":`...)
	return append(quoteJSON(b, string(content)), '}')
}
