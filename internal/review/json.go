package review

import (
	"strings"

	"github.com/shaperproxy/shaperproxy/internal/jsonstr"
	"github.com/tidwall/gjson"
)

// appendString appends s as a JSON string (see package jsonstr).
func appendString(dst []byte, s string) []byte { return jsonstr.Append(dst, s) }

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
