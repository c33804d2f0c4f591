package review

import (
	"strings"
	"unicode/utf8"

	"github.com/tidwall/gjson"
)

const hexDigits = "0123456789abcdef"

// appendString appends s as a JSON string. <, > and & are not escaped (as
// DeepSeek sends them); invalid UTF-8 becomes U+FFFD.
func appendString(dst []byte, s string) []byte {
	dst = append(dst, '"')
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			dst = appendASCII(dst, c)
			i++
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			dst = append(dst, `\ufffd`...)
		} else {
			dst = append(dst, s[i:i+size]...)
		}
		i += size
	}
	return append(dst, '"')
}

// appendASCII appends one ASCII byte of a JSON string, escaped if needed.
func appendASCII(dst []byte, c byte) []byte {
	switch {
	case c == '"' || c == '\\':
		return append(dst, '\\', c)
	case c == '\n':
		return append(dst, `\n`...)
	case c == '\r':
		return append(dst, `\r`...)
	case c == '\t':
		return append(dst, `\t`...)
	case c < 0x20:
		return append(dst, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xF])
	}
	return append(dst, c)
}

// quote returns s as a JSON string.
func quote(s string) []byte { return appendString(nil, s) }

// str returns the decoded value of a JSON string, or "" for any other type.
func str(r gjson.Result) string {
	if r.Type == gjson.String {
		return r.Str
	}
	return ""
}

// pathEscape escapes a key for use as one segment of a gjson/sjson path.
func pathEscape(key string) string {
	if !strings.ContainsAny(key, `.*?|#@!\:`) {
		return key
	}
	var b strings.Builder
	for _, r := range key {
		if strings.ContainsRune(`.*?|#@!\:`, r) {
			b.WriteByte('\\')
		}
		b.WriteRune(r)
	}
	return b.String()
}

// duplicateKey returns the first key of object obj that repeats.
func duplicateKey(obj gjson.Result) (string, bool) {
	seen := make(map[string]struct{})
	dup, found := "", false
	obj.ForEach(func(k, _ gjson.Result) bool {
		if _, ok := seen[k.Str]; ok {
			dup, found = k.Str, true
			return false
		}
		seen[k.Str] = struct{}{}
		return true
	})
	return dup, found
}
