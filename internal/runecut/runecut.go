// Package runecut cuts a string to a byte budget without splitting a
// UTF-8 character: for what is kept, logged or shown of text a client or
// an upstream sent.
package runecut

import "unicode/utf8"

// Prefix returns the longest prefix of s of at most n bytes that does not
// end inside a character (s itself when it fits).
func Prefix(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:max(n, 0)]
}
