// Package jsonstr writes JSON strings the way LLM APIs send them: '"',
// '\\' and control characters escaped (\n, \r and \t by their short
// form), '<', '>' and '&' left as they are, invalid UTF-8 replaced by
// U+FFFD (as encoding/json does). It is the one string encoder of the
// project: every raw-JSON edit that writes a string goes through it.
package jsonstr

import "unicode/utf8"

const hexDigits = "0123456789abcdef"

// Append appends s to dst as a JSON string, quotes included.
func Append(dst []byte, s string) []byte {
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

// Quote returns s as a JSON string.
func Quote(s string) []byte { return Append(make([]byte, 0, len(s)+2), s) }

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
