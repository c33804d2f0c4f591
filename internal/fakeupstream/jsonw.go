package fakeupstream

import "github.com/shaperproxy/shaperproxy/internal/jsonstr"

// appendString appends s as a JSON string (see package jsonstr).
func appendString(dst []byte, s string) []byte { return jsonstr.Append(dst, s) }

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
