package conv

// MaxDepth is the deepest nesting of arrays and objects that ValidJSON
// accepts: encoding/json's own limit, so both judge a body alike.
const MaxDepth = 10000

// ValidJSON reports whether data is one JSON value (RFC 8259), white
// space around it allowed, with arrays and objects nested at most MaxDepth
// levels deep: exactly what encoding/json's json.Valid accepts. Like
// json.Valid it does not check that strings are valid UTF-8.
//
// It never recurses, so no input can overflow the stack (which Go cannot
// recover from: gjson.Valid recurses once per level, and a body of a few
// million '[' kills the process). It remembers one byte per open array or
// object, nothing else, and reads data once. Use it, not gjson.Valid, on
// bytes a client or an upstream sent.
func ValidJSON(data []byte) bool { return valid(data, MaxDepth) }

// ValidJSONString is ValidJSON for a string.
func ValidJSONString(s string) bool { return valid(s, MaxDepth) }

// text is what the validator reads.
type text interface{ ~string | ~[]byte }

// valid walks the value iteratively: open holds the containers that are
// open ('{' or '['), innermost last; at most maxDepth may be (a value
// nested inside others is checked alone with what is left of MaxDepth).
func valid[T text](d T, maxDepth int) bool {
	end, ok := validValue(d, skipSpace(d, 0), maxDepth)
	return ok && end == len(d)
}

// validValue checks the one value that starts at d[i] and returns where
// it ends (white space after it skipped).
func validValue[T text](d T, i, maxDepth int) (int, bool) {
	var buf [64]byte
	open := buf[:0]
	for {
		if i >= len(d) {
			return i, false
		}
		var ok bool
		switch c := d[i]; c {
		case '{', '[':
			if len(open) == maxDepth {
				return i, false
			}
			open = append(open, c)
			i = skipSpace(d, i+1)
			if i < len(d) && d[i] == c+2 { // '}' and ']' follow their opener by 2
				break // empty: closed by after below
			}
			if c == '{' {
				if i, ok = member(d, i); !ok {
					return i, false
				}
			}
			continue
		default:
			if i, ok = scalar(d, i); !ok {
				return i, false
			}
		}
		var more bool
		if i, open, more, ok = after(d, i, open); !more {
			return i, ok
		}
	}
}

// after moves past the end of a value: it closes the containers that end
// there and stops at the next value (after its comma, and its key in an
// object). more is false when no value follows; ok then tells whether the
// outermost value ended well (at i, white space skipped).
func after[T text](d T, i int, open []byte) (next int, stack []byte, more, ok bool) {
	for {
		i = skipSpace(d, i)
		if len(open) == 0 {
			return i, open, false, true
		}
		if i >= len(d) {
			return i, open, false, false
		}
		top := open[len(open)-1]
		switch d[i] {
		case top + 2:
			open = open[:len(open)-1]
			i++
		case ',':
			i = skipSpace(d, i+1)
			if top == '{' {
				i, ok = member(d, i)
				return i, open, ok, ok
			}
			return i, open, true, true
		default:
			return i, open, false, false
		}
	}
}

// member reads an object key and its colon; it returns where the value
// starts.
func member[T text](d T, i int) (int, bool) {
	if i >= len(d) || d[i] != '"' {
		return i, false
	}
	i, ok := endString(d, i+1)
	if !ok {
		return i, false
	}
	i = skipSpace(d, i)
	if i >= len(d) || d[i] != ':' {
		return i, false
	}
	return skipSpace(d, i+1), true
}

// scalar reads a string, number, true, false or null starting at i.
func scalar[T text](d T, i int) (int, bool) {
	switch d[i] {
	case '"':
		return endString(d, i+1)
	case 't':
		return literal(d, i, "true")
	case 'f':
		return literal(d, i, "false")
	case 'n':
		return literal(d, i, "null")
	}
	return endNumber(d, i)
}

func skipSpace[T text](d T, i int) int {
	for i < len(d) && (d[i] == ' ' || d[i] == '\n' || d[i] == '\r' || d[i] == '\t') {
		i++
	}
	return i
}

// endString returns the position after the closing quote of the string
// whose first byte (after the opening quote) is at i.
func endString[T text](d T, i int) (int, bool) {
	for i < len(d) {
		switch c := d[i]; {
		case c == '"':
			return i + 1, true
		case c < 0x20:
			return i, false
		case c == '\\':
			n, ok := escape(d, i+1)
			if !ok {
				return i, false
			}
			i = n
		default:
			i++
		}
	}
	return i, false
}

// escape reads the escape after a backslash.
func escape[T text](d T, i int) (int, bool) {
	if i >= len(d) {
		return i, false
	}
	switch d[i] {
	case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
		return i + 1, true
	case 'u':
		if i+5 > len(d) {
			return i, false
		}
		if !isHex(d[i+1]) || !isHex(d[i+2]) || !isHex(d[i+3]) || !isHex(d[i+4]) {
			return i, false
		}
		return i + 5, true
	}
	return i, false
}

func isHex(c byte) bool {
	return c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F'
}

// endNumber reads -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?.
func endNumber[T text](d T, i int) (int, bool) {
	if i < len(d) && d[i] == '-' {
		i++
	}
	switch {
	case i < len(d) && d[i] == '0':
		i++
	case i < len(d) && d[i] >= '1' && d[i] <= '9':
		i = digits(d, i)
	default:
		return i, false
	}
	if i < len(d) && d[i] == '.' {
		if i = digits(d, i+1); d[i-1] == '.' {
			return i, false
		}
	}
	if i < len(d) && (d[i] == 'e' || d[i] == 'E') {
		i++
		if i < len(d) && (d[i] == '+' || d[i] == '-') {
			i++
		}
		start := i
		if i = digits(d, i); i == start {
			return i, false
		}
	}
	return i, true
}

func digits[T text](d T, i int) int {
	for i < len(d) && d[i] >= '0' && d[i] <= '9' {
		i++
	}
	return i
}

// literal reads the word lit (true, false or null) at i.
func literal[T text](d T, i int, lit string) (int, bool) {
	if len(d)-i < len(lit) {
		return i, false
	}
	for j := 0; j < len(lit); j++ {
		if d[i+j] != lit[j] {
			return i, false
		}
	}
	return i + len(lit), true
}
