package guard

import (
	"strconv"
	"strings"
	"unicode/utf16"
	"unicode/utf8"

	"github.com/shaperproxy/shaperproxy/conv"
	"github.com/tidwall/gjson"
)

// reasoningRunes returns the characters (runes) of reasoning a stream
// chunk's first choice carries: utf8.RuneCountInString of
// conv.DeltaReasoning(gjson.GetBytes(data, "choices.0.delta")), without
// the copies those make (gjson.GetBytes copies what it finds, and decoding
// an escaped string allocates it). buf is scratch space, returned for the
// next call: once it is large enough, a chunk costs no allocation.
func reasoningRunes(data []byte, buf []byte) (int, []byte) {
	if len(data) == 0 {
		return 0, buf
	}
	delta := gjson.Get(conv.AsString(data), "choices.0.delta") // read only while data lives
	if delta.IsObject() && conv.ValidJSONString(delta.Raw) {
		// gjson's delta.Get decodes the string it finds, which allocates
		// when it holds an escape (most reasoning chunks hold a "\n"):
		// the member is found in the raw object instead (valid JSON, read
		// as gjson reads it).
		for _, f := range conv.ReasoningFields {
			raw, found, ok := firstMember(delta.Raw, f)
			switch {
			case !ok:
				return gjsonRunes(delta), buf
			case found && raw[0] == '"':
				return stringRunes(raw, buf)
			}
		}
		return 0, buf
	}
	return gjsonRunes(delta), buf
}

// gjsonRunes counts the way reasoningRunes stands for, through gjson.
func gjsonRunes(delta gjson.Result) int {
	return utf8.RuneCountInString(conv.DeltaReasoning(delta))
}

// stringRunes returns the runes of the decoded JSON string token raw.
func stringRunes(raw string, buf []byte) (int, []byte) {
	if !strings.Contains(raw, `\`) {
		return utf8.RuneCountInString(raw[1 : len(raw)-1]), buf
	}
	buf = appendUnescaped(buf[:0], raw[1:len(raw)-1])
	return utf8.RuneCount(buf), buf
}

// firstMember returns the raw value of the first member named key of the
// JSON object obj, as gjson finds it; ok is false when obj is not read
// that simply (an escaped key, anything malformed), and gjson must say.
func firstMember(obj, key string) (raw string, found, ok bool) {
	i := skipWS(obj, 0)
	if i >= len(obj) || obj[i] != '{' {
		return "", false, false
	}
	i = skipWS(obj, i+1)
	if i < len(obj) && obj[i] == '}' {
		return "", false, true
	}
	for i < len(obj) && obj[i] == '"' {
		end, esc := stringEnd(obj, i)
		if end < 0 || esc {
			return "", false, false
		}
		k := obj[i+1 : end-1]
		if i = skipWS(obj, end); i >= len(obj) || obj[i] != ':' {
			return "", false, false
		}
		v := skipWS(obj, i+1)
		vend := valueEnd(obj, v)
		if vend <= v {
			return "", false, false
		}
		if k == key {
			return obj[v:vend], true, true
		}
		switch i = skipWS(obj, vend); {
		case i < len(obj) && obj[i] == ',':
			i = skipWS(obj, i+1)
		case i < len(obj) && obj[i] == '}':
			return "", false, true
		default:
			return "", false, false
		}
	}
	return "", false, false
}

func skipWS(s string, i int) int {
	for i < len(s) && (s[i] == ' ' || s[i] == '\t' || s[i] == '\n' || s[i] == '\r') {
		i++
	}
	return i
}

// stringEnd returns the end of the string token starting at s[i] ('"'),
// -1 when it is not closed, and whether it holds an escape.
func stringEnd(s string, i int) (int, bool) {
	esc := false
	for j := i + 1; j < len(s); j++ {
		switch s[j] {
		case '\\':
			esc = true
			j++
		case '"':
			return j + 1, esc
		}
	}
	return -1, esc
}

// valueEnd returns the end of the JSON value starting at s[i], or -1.
func valueEnd(s string, i int) int {
	if i >= len(s) {
		return -1
	}
	switch s[i] {
	case '"':
		end, _ := stringEnd(s, i)
		return end
	case '{', '[':
		depth := 0
		for j := i; j < len(s); j++ {
			switch s[j] {
			case '"':
				end, _ := stringEnd(s, j)
				if end < 0 {
					return -1
				}
				j = end - 1
			case '{', '[':
				depth++
			case '}', ']':
				if depth--; depth == 0 {
					return j + 1
				}
			}
		}
		return -1
	}
	j := i
	for j < len(s) && !strings.ContainsRune(",}] \t\r\n", rune(s[j])) {
		j++
	}
	return j
}

// appendUnescaped appends what gjson's unescape returns for json (the
// inside of a string token), byte for byte: it stops at a control
// character or an escape it does not know, as gjson does.
func appendUnescaped(str []byte, json string) []byte {
	for i := 0; i < len(json); i++ {
		switch {
		default:
			str = append(str, json[i])
		case json[i] < ' ':
			return str
		case json[i] == '\\':
			i++
			if i >= len(json) {
				return str
			}
			switch json[i] {
			default:
				return str
			case '\\':
				str = append(str, '\\')
			case '/':
				str = append(str, '/')
			case 'b':
				str = append(str, '\b')
			case 'f':
				str = append(str, '\f')
			case 'n':
				str = append(str, '\n')
			case 'r':
				str = append(str, '\r')
			case 't':
				str = append(str, '\t')
			case '"':
				str = append(str, '"')
			case 'u':
				if i+5 > len(json) {
					return str
				}
				r := hexRune(json[i+1:])
				i += 5
				if r >= 0xD800 && r < 0xDC00 && len(json[i:]) >= 6 && json[i] == '\\' && json[i+1] == 'u' {
					if r2 := hexRune(json[i+2:]); r2 >= 0xDC00 && r2 < 0xE000 {
						r = utf16.DecodeRune(r, r2)
						i += 6
					}
				}
				str = utf8.AppendRune(str, r)
				i--
			}
		}
	}
	return str
}

// hexRune reads four hex digits as gjson does (0 when they are not).
func hexRune(s string) rune {
	n, _ := strconv.ParseUint(s[:4], 16, 64)
	return rune(n)
}
