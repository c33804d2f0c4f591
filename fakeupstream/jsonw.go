package fakeupstream

import "unicode/utf8"

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

// appendStringPtr appends *s as a JSON string, or null when s is nil.
func appendStringPtr(dst []byte, s *string) []byte {
	if s == nil {
		return append(dst, "null"...)
	}
	return appendString(dst, *s)
}

// appendNullableString appends s as a JSON string when ok, else null.
func appendNullableString(dst []byte, s string, ok bool) []byte {
	if !ok {
		return append(dst, "null"...)
	}
	return appendString(dst, s)
}
