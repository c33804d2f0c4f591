package render

import (
	"strings"

	"github.com/ardanlabs/jinja"
	"github.com/tidwall/gjson"
)

// argsMode says how tool-call arguments reach a template.
type argsMode int

const (
	argsDict   argsMode = iota // a JSON string is parsed to an object (vLLM)
	argsString                 // an object is written back to a JSON string
)

// value converts a JSON value to a template value, keeping the key order
// of objects and the int/float distinction of numbers.
func value(v gjson.Result) jinja.Value {
	switch {
	case v.IsObject():
		d := jinja.NewDict()
		v.ForEach(func(k, e gjson.Result) bool {
			d.AsDict().Set(k.Str, value(e))
			return true
		})
		return d
	case v.IsArray():
		arr := v.Array()
		items := make([]jinja.Value, len(arr))
		for i, e := range arr {
			items[i] = value(e)
		}
		return jinja.NewList(items)
	case v.Type == gjson.String:
		return jinja.NewString(v.Str)
	case v.Type == gjson.Number:
		return number(v)
	case v.Type == gjson.True:
		return jinja.NewBool(true)
	case v.Type == gjson.False:
		return jinja.NewBool(false)
	}
	return jinja.None()
}

func number(v gjson.Result) jinja.Value {
	if !strings.ContainsAny(v.Raw, ".eE") {
		if n := v.Int(); float64(n) == v.Num {
			return jinja.NewInt(n)
		}
	}
	return jinja.NewFloat(v.Num)
}

// messages converts the request's messages as render.py's preprocess
// does: an assistant's reasoning is set under both reasoning_content and
// reasoning (and thinking when thinking is true), and tool-call arguments
// follow mode.
func messages(body []byte, mode argsMode, thinking bool) jinja.Value {
	arr := gjson.GetBytes(body, "messages").Array()
	items := make([]jinja.Value, len(arr))
	for i, m := range arr {
		items[i] = message(m, mode, thinking)
	}
	return jinja.NewList(items)
}

func message(m gjson.Result, mode argsMode, thinking bool) jinja.Value {
	v := value(m)
	if !v.IsDict() || m.Get("role").Str != "assistant" {
		return v
	}
	d := v.AsDict()
	if r, ok := reasoningOf(m); ok {
		d.Set("reasoning_content", jinja.NewString(r))
		d.Set("reasoning", jinja.NewString(r))
		if thinking {
			d.Set("thinking", jinja.NewString(r))
		}
	}
	if calls, ok := d.Get("tool_calls"); ok && calls.IsList() {
		for i, c := range m.Get("tool_calls").Array() {
			setArguments(calls.AsList().Items[i], c.Get("function.arguments"), mode)
		}
	}
	return v
}

// reasoningOf is render.py's m.get("reasoning_content", m.get("reasoning")):
// the value of reasoning_content when the key is present, else of
// reasoning; ok is false when that value is null or missing.
func reasoningOf(m gjson.Result) (string, bool) {
	r := m.Get("reasoning_content")
	if !r.Exists() {
		r = m.Get("reasoning")
	}
	if !r.Exists() || r.Type == gjson.Null {
		return "", false
	}
	return r.String(), true
}

// setArguments replaces function.arguments of one tool call as mode says.
func setArguments(call jinja.Value, a gjson.Result, mode argsMode) {
	if !call.IsDict() {
		return
	}
	fn, ok := call.AsDict().Get("function")
	if !ok || !fn.IsDict() || !a.Exists() {
		return
	}
	switch {
	case mode == argsDict && a.Type == gjson.String:
		s := strings.TrimSpace(a.Str)
		if s == "" {
			fn.AsDict().Set("arguments", jinja.NewDict())
		} else if gjson.Valid(s) {
			fn.AsDict().Set("arguments", value(gjson.Parse(s)))
		}
	case mode == argsString && a.Type != gjson.String:
		fn.AsDict().Set("arguments", jinja.NewString(pyJSONString(a)))
	}
}
