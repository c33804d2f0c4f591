package render

import (
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/tidwall/gjson"
)

// pyJSON appends v as Python's json.dumps(v, ensure_ascii=False) writes
// it: ", " between items, ": " after keys, keys in their order, non-ASCII
// characters as they are.
func pyJSON(b *strings.Builder, v gjson.Result) {
	switch {
	case v.IsObject():
		b.WriteByte('{')
		first := true
		v.ForEach(func(k, e gjson.Result) bool {
			if !first {
				b.WriteString(", ")
			}
			first = false
			pyString(b, k.Str)
			b.WriteString(": ")
			pyJSON(b, e)
			return true
		})
		b.WriteByte('}')
	case v.IsArray():
		b.WriteByte('[')
		for i, e := range v.Array() {
			if i > 0 {
				b.WriteString(", ")
			}
			pyJSON(b, e)
		}
		b.WriteByte(']')
	case v.Type == gjson.String:
		pyString(b, v.Str)
	case v.Type == gjson.Number:
		b.WriteString(pyNumber(v.Raw))
	case v.Type == gjson.True:
		b.WriteString("true")
	case v.Type == gjson.False:
		b.WriteString("false")
	default:
		b.WriteString("null")
	}
}

// pyJSONString returns pyJSON of v as a string.
func pyJSONString(v gjson.Result) string {
	var b strings.Builder
	pyJSON(&b, v)
	return b.String()
}

// pyNumber writes a JSON number as Python reads and re-writes it: an
// integer stays as written, a float goes through float64 (1.50 → 1.5).
func pyNumber(raw string) string {
	if !strings.ContainsAny(raw, ".eE") {
		return raw
	}
	f, err := strconv.ParseFloat(raw, 64)
	if err != nil {
		return raw
	}
	s := strconv.FormatFloat(f, 'g', -1, 64)
	if !strings.ContainsAny(s, ".eEn") { // 1e0 parses to 1: Python writes 1.0
		s += ".0"
	}
	return s
}

// pyString writes s as a JSON string the way json.dumps does with
// ensure_ascii=False: the two-character escapes for \" \\ \n \r \t \b \f,
// \u00XX for other control characters, everything else as it is.
func pyString(b *strings.Builder, s string) {
	const hex = "0123456789abcdef"
	b.WriteByte('"')
	for i := 0; i < len(s); {
		c := s[i]
		if c >= utf8.RuneSelf {
			r, size := utf8.DecodeRuneInString(s[i:])
			if r == utf8.RuneError && size == 1 {
				b.WriteString(`\ufffd`)
			} else {
				b.WriteString(s[i : i+size])
			}
			i += size
			continue
		}
		switch c {
		case '"':
			b.WriteString(`\"`)
		case '\\':
			b.WriteString(`\\`)
		case '\n':
			b.WriteString(`\n`)
		case '\r':
			b.WriteString(`\r`)
		case '\t':
			b.WriteString(`\t`)
		case '\b':
			b.WriteString(`\b`)
		case '\f':
			b.WriteString(`\f`)
		default:
			if c < 0x20 {
				b.WriteString(`\u00`)
				b.WriteByte(hex[c>>4])
				b.WriteByte(hex[c&0xf])
			} else {
				b.WriteByte(c)
			}
		}
		i++
	}
	b.WriteByte('"')
}
