package guard

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"sort"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/shaperproxy/shaperproxy/conv"
	"github.com/shaperproxy/shaperproxy/internal/jsonstr"
	"github.com/tidwall/gjson"
)

// sig is the SHA-256 of a call's signature: its tool name and its
// arguments as canonical JSON. Only the hash is kept in state.
type sig [32]byte

// String returns the first 12 hex digits, enough for a log line.
func (s sig) String() string { return hex.EncodeToString(s[:6]) }

// maxDepth bounds the nesting of arguments; deeper arguments are unknown.
const maxDepth = 128

// maxExponent bounds the exponent of a number; larger ones are unknown.
const maxExponent = 1_000_000_000

// signature returns the signature hash of a call to tool name with the
// given arguments (the decoded "function.arguments" string). ok is false
// when the arguments are unknown (see Canonical): such a call matches no
// other call, not even one with the same bytes.
func signature(name, args string) (s sig, ok bool) {
	if !utf8.ValidString(args) || !conv.ValidJSONString(args) {
		return sig{}, false
	}
	buf := sigPrefix(make([]byte, 0, 16+len(name)+len(args)), 0, name)
	buf, ok = canon(buf, gjson.Parse(args), 0)
	if !ok {
		return sig{}, false
	}
	return sha256.Sum256(buf), true
}

// rawSig hashes a call with unknown arguments over their raw bytes, in a
// separate domain so that it never equals a Signature. It only serves to
// tell whether two occurrences of one call id agree.
func rawSig(name, args string) sig {
	buf := sigPrefix(make([]byte, 0, 16+len(name)+len(args)), 1, name)
	return sha256.Sum256(append(buf, args...))
}

// sigPrefix writes the domain byte and the length-prefixed tool name.
func sigPrefix(dst []byte, domain byte, name string) []byte {
	dst = append(dst, domain)
	dst = binary.AppendUvarint(dst, uint64(len(name)))
	return append(dst, name...)
}

// canonical returns args as canonical JSON, or ok false when args are
// unknown.
//
// canonical JSON: no white space; object keys sorted by their bytes,
// recursively; array order kept; strings, true, false and null kept with
// their type ("1" and 1 differ); strings written with only '"', '\\' and
// control characters escaped; numbers written by their exact decimal
// value as the shortest digits-and-exponent form (1, 1.0, 1e0 and 10e-1
// are all "1"; 100 and 1e2 are "1e2"; -0 is "0"), without rounding
// through float64, so 9007199254740993 and 9007199254740992 differ.
//
// Arguments are unknown when they are not valid UTF-8 JSON (the empty
// string included, and nesting beyond conv.MaxDepth: conv.ValidJSON,
// which never recurses), when an object repeats a key (its meaning then
// depends on the reader), when they nest deeper than 128 levels, or when a
// number's exponent in the canonical form is beyond ±10⁹.
func canonical(args string) ([]byte, bool) {
	if !utf8.ValidString(args) || !conv.ValidJSONString(args) {
		return nil, false
	}
	return canon(make([]byte, 0, len(args)), gjson.Parse(args), 0)
}

func canon(dst []byte, v gjson.Result, depth int) ([]byte, bool) {
	switch v.Type {
	case gjson.Null:
		return append(dst, "null"...), true
	case gjson.False:
		return append(dst, "false"...), true
	case gjson.True:
		return append(dst, "true"...), true
	case gjson.String:
		return appendString(dst, v.Str), true
	case gjson.Number:
		return appendNumber(dst, v.Raw)
	}
	if depth >= maxDepth {
		return nil, false
	}
	if v.IsArray() {
		return canonArray(dst, v, depth)
	}
	return canonObject(dst, v, depth)
}

func canonArray(dst []byte, v gjson.Result, depth int) ([]byte, bool) {
	ok := true
	dst = append(dst, '[')
	first := true
	v.ForEach(func(_, e gjson.Result) bool {
		if !first {
			dst = append(dst, ',')
		}
		first = false
		dst, ok = canon(dst, e, depth+1)
		return ok
	})
	if !ok {
		return nil, false
	}
	return append(dst, ']'), true
}

type member struct {
	key string
	val gjson.Result
}

func canonObject(dst []byte, v gjson.Result, depth int) ([]byte, bool) {
	var ms []member
	v.ForEach(func(k, e gjson.Result) bool {
		ms = append(ms, member{k.Str, e})
		return true
	})
	sort.Slice(ms, func(i, j int) bool { return ms[i].key < ms[j].key })
	dst = append(dst, '{')
	for i, m := range ms {
		if i > 0 {
			if m.key == ms[i-1].key {
				return nil, false // a repeated key
			}
			dst = append(dst, ',')
		}
		dst = appendString(dst, m.key)
		dst = append(dst, ':')
		var ok bool
		if dst, ok = canon(dst, m.val, depth+1); !ok {
			return nil, false
		}
	}
	return append(dst, '}'), true
}

// appendString writes s as a JSON string (see package jsonstr); s is
// valid UTF-8 (gjson decodes lone surrogates to U+FFFD).
func appendString(dst []byte, s string) []byte { return jsonstr.Append(dst, s) }

// appendNumber writes the JSON number literal raw (already validated) by
// its exact decimal value: an optional '-', the significant digits
// without leading or trailing zeros, and "e" with the exponent when it is
// not zero.
func appendNumber(dst []byte, raw string) ([]byte, bool) {
	neg := strings.HasPrefix(raw, "-")
	raw = strings.TrimPrefix(raw, "-")
	mant, exp := raw, int64(0)
	if i := strings.IndexAny(raw, "eE"); i >= 0 {
		e, err := strconv.ParseInt(strings.TrimPrefix(raw[i+1:], "+"), 10, 64)
		if err != nil || e > 1<<50 || e < -1<<50 {
			return nil, false // far beyond maxExponent; no overflow below
		}
		mant, exp = raw[:i], e
	}
	intPart, frac, _ := strings.Cut(mant, ".")
	digits := strings.TrimLeft(intPart+frac, "0")
	exp -= int64(len(frac))
	if digits == "" {
		return append(dst, '0'), true
	}
	trimmed := strings.TrimRight(digits, "0")
	exp += int64(len(digits) - len(trimmed))
	if exp > maxExponent || exp < -maxExponent {
		return nil, false
	}
	if neg {
		dst = append(dst, '-')
	}
	dst = append(dst, trimmed...)
	if exp != 0 {
		dst = append(dst, 'e')
		dst = strconv.AppendInt(dst, exp, 10)
	}
	return dst, true
}
