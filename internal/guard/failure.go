package guard

import (
	"bytes"
	"regexp"
	"strconv"
	"strings"

	"github.com/shaperproxy/shaperproxy/conv"
	"github.com/tidwall/gjson"
)

// failureRules decide whether a tool result reports an explicit failure
// (see Config and doc.go). Nothing else is read: a word such as "error" in
// the middle of a result never makes it a failure.
type failureRules struct {
	prefixes []string
	lines    []*regexp.Regexp
	flags    []string
	keys     []string
}

func newFailureRules(c Config) (failureRules, error) {
	r := failureRules{prefixes: c.FailurePrefixes, flags: c.ErrorFlags, keys: c.ErrorKeys}
	for _, p := range c.FailureLines {
		re, err := compileLine(p)
		if err != nil {
			return r, err
		}
		r.lines = append(r.lines, re)
	}
	return r, nil
}

// failed reports whether the tool message (raw: its JSON object; content:
// its visible text) is an explicit failure.
func (r *failureRules) failed(raw []byte, content string) bool {
	return r.flagged(raw) || r.errorObject(content) || r.prefixed(content) || r.exitLine(content)
}

// flagged: one of the flags holds the JSON literal true on the message.
// A flag whose name does not occur in the message bytes at all is not
// looked up (a key spelt with escapes is not recognised).
func (r *failureRules) flagged(raw []byte) bool {
	for _, f := range r.flags {
		if bytes.Contains(raw, []byte(f)) && gjson.GetBytes(raw, f).Type == gjson.True {
			return true
		}
	}
	return false
}

// errorObject: the content is a JSON object with an error key that holds
// anything but null, false or "". Content that is not JSON (conv.ValidJSON:
// no recursion, whatever the nesting) is not an error object.
func (r *failureRules) errorObject(content string) bool {
	s := strings.TrimSpace(content)
	if len(r.keys) == 0 || !strings.HasPrefix(s, "{") || !conv.ValidJSONString(s) {
		return false
	}
	hit := false
	gjson.Parse(s).ForEach(func(k, v gjson.Result) bool {
		if contains(r.keys, k.Str) && v.Type != gjson.Null && v.Type != gjson.False && !(v.Type == gjson.String && v.Str == "") {
			hit = true
		}
		return !hit
	})
	return hit
}

// prefixed: the content starts with a failure prefix after white space.
func (r *failureRules) prefixed(content string) bool {
	s := strings.TrimLeft(content, " \t\r\n")
	for _, p := range r.prefixes {
		if strings.HasPrefix(s, p) {
			return true
		}
	}
	return false
}

// exitLine: one of the first or last LineWindow non-empty lines matches a
// line rule.
func (r *failureRules) exitLine(content string) bool {
	if len(r.lines) == 0 {
		return false
	}
	hit := false
	visit := func(line string) bool {
		hit = r.lineFails(line)
		return !hit
	}
	headLines(content, lineWindow, visit)
	if !hit {
		tailLines(content, lineWindow, visit)
	}
	return hit
}

func (r *failureRules) lineFails(line string) bool {
	if len(line) > maxLineLen {
		return false
	}
	digit := strings.ContainsAny(line, "0123456789")
	for _, re := range r.lines {
		if re.NumSubexp() > 0 && !digit {
			continue // the code group cannot hold a non-zero integer
		}
		m := re.FindStringSubmatch(line)
		switch {
		case m == nil:
		case len(m) < 2:
			return true
		default:
			if code, err := strconv.Atoi(m[1]); err == nil && code != 0 {
				return true
			}
		}
	}
	return false
}

// headLines calls fn with the first n non-empty lines of s (trimmed),
// until fn returns false.
func headLines(s string, n int, fn func(string) bool) {
	for n > 0 && s != "" {
		line, rest, _ := strings.Cut(s, "\n")
		s = rest
		if line = strings.TrimSpace(line); line != "" {
			n--
			if !fn(line) {
				return
			}
		}
	}
}

// tailLines calls fn with the last n non-empty lines of s (trimmed), the
// last first, until fn returns false.
func tailLines(s string, n int, fn func(string) bool) {
	for n > 0 && s != "" {
		i := strings.LastIndexByte(s, '\n')
		line := s[i+1:]
		s = s[:max(i, 0)]
		if line = strings.TrimSpace(line); line != "" {
			n--
			if !fn(line) {
				return
			}
		}
	}
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}
