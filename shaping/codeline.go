package shaping

import (
	"strings"
	"unicode"
	"unicode/utf8"
)

// isCodeLine reports whether the trimmed, non-empty line s (outside a
// fence) is code or data rather than prose: a brace, a bare number, a tag,
// a dict entry, a statement. Models paste code and tool output into their
// reasoning without fences; such lines are atomic like a fence, and a
// run of them is one unit (see split). The rules, in order:
//
//   - no letter at all: "}", "0.", "[1, 2],", "18%.";
//   - an opening that only code has: a closing bracket, "{", a line of
//     tags ("<think>", "</output>"), a comment, a quoted key ("'POP': 33",
//     `"a": 1,`), "[" before a digit, quote or bracket;
//   - an ending that only code has: "{", ";", "(", "[", `",`;
//   - a list item is code by these rules only ("- age: 30" is prose);
//   - a lower-case statement: "x = 1", "print(x)", "obj.items()",
//     "for k, v in d.items():", "tokens: [...]";
//   - a line that opens like prose, two words after any tags ("So the list
//     is [4, 5]", "If we have {'a': 1}, then ...", "<think> The user
//     wants ..."), is prose however many symbols it holds;
//   - otherwise, code if it has no more letters than other visible
//     characters or holds a dict or "=>" ("Score: 0.29", "COND (128)",
//     "Content: {'name': 'x'}").
func isCodeLine(s string) bool {
	m := listMarker(s)
	b := s[m:]
	switch {
	case b == "":
		return false
	case codeOpening(b), codeEnding(b):
		return true
	case m > 0: // a list item ("- age: 30") is data only by the rules above
		letters, _ := letterCount(b)
		return letters == 0
	case statement(b): // starts with a letter
		return true
	case proseStart(afterTags(b)): // holds letters
		return false
	}
	letters, vis := letterCount(b)
	return letters == 0 || 2*letters <= vis || strings.Contains(b, "': ") || strings.Contains(b, "\": ") ||
		strings.Contains(b, "{'") || strings.Contains(b, "{\"") || strings.Contains(b, "=>")
}

// letterCount returns the letters (a CJK letter counting 2) and the
// visible (non-space) runes of s.
func letterCount(s string) (letters, vis int) {
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			letters += int(asciiLetterN[c])
			vis += int(asciiVisibleN[c])
			i++
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		i += size
		switch {
		case isCJK(r):
			letters += 2 // a CJK character weighs like a short word
			vis++
		case unicode.IsLetter(r):
			letters++
			vis++
		case !unicode.IsSpace(r):
			vis++
		}
	}
	return letters, vis
}

// The classes of asciiClass.
const (
	asciiSpace = iota
	asciiLetter
	asciiOther
)

// asciiLetterN and asciiVisibleN are 1 for ASCII letters and for visible
// ASCII bytes: letterCount adds them without a branch.
var asciiLetterN, asciiVisibleN = func() (l, v [utf8.RuneSelf]uint8) {
	for c := 0; c < utf8.RuneSelf; c++ {
		if c|0x20 >= 'a' && c|0x20 <= 'z' {
			l[c] = 1
		}
		if !isSpaceByte(byte(c)) {
			v[c] = 1
		}
	}
	return l, v
}()

// asciiClass classifies ASCII bytes for countWords.
var asciiClass = func() (t [utf8.RuneSelf]uint8) {
	for c := 0; c < utf8.RuneSelf; c++ {
		switch {
		case isSpaceByte(byte(c)):
			t[c] = asciiSpace
		case c|0x20 >= 'a' && c|0x20 <= 'z':
			t[c] = asciiLetter
		default:
			t[c] = asciiOther
		}
	}
	return t
}()

// codeOpening reports whether s starts the way only code and data do.
func codeOpening(s string) bool {
	c := s[0]
	var next byte
	if len(s) > 1 {
		next = s[1]
	}
	switch c {
	case '{', '}', ']', ')':
		return true
	case '<': // a line of tags: "<think>", "</output>"; not "</think> They want"
		return (next == '/' || next == '!' || next|0x20 >= 'a' && next|0x20 <= 'z') && onlyTags(s)
	case '[':
		return isDigit(next) || next == '\'' || next == '"' || next == '[' || next == '{' || next == ']' || next == '-'
	case '/':
		return next == '/' || next == '*'
	case '*':
		return next == '/'
	case '#':
		return strings.HasPrefix(s, "#include") || strings.HasPrefix(s, "#!") || strings.HasPrefix(s, "#  ")
	case '\'', '"':
		q := strings.IndexByte(s[1:], c)
		return q > 0 && q+2 < len(s) && s[q+2] == ':' && !strings.ContainsAny(s[1:q+1], " \t")
	}
	return false
}

// codeEnding reports whether s ends the way only code does.
func codeEnding(s string) bool {
	switch s[len(s)-1] {
	case '{', ';', '(', '[':
		return true
	}
	return strings.HasSuffix(s, "\",") || strings.HasSuffix(s, "',")
}

// codeWords open a statement when a code symbol follows in the line.
var codeWords = setOf("def", "return", "for", "if", "elif", "else", "while", "import", "from",
	"class", "try", "except", "with", "function", "const", "let", "var", "async", "await",
	"yield", "raise", "pass", "break", "continue", "lambda", "switch", "case", "func", "fn",
	"print", "console", "echo", "assert", "package", "module", "export", "public", "private")

// statement reports whether s is a lower-case statement: an identifier
// followed by "(", "[", "=", an operator, ": " and a value, or a keyword of
// codeWords in a line holding a code symbol.
func statement(s string) bool {
	if s[0] < 'a' || s[0] > 'z' {
		return false
	}
	i := 0
	for i < len(s) && (wordByte[s[i]] || s[i] == '.') {
		i++
	}
	if i == len(s) {
		return false
	}
	word := strings.TrimRight(s[:i], ".")
	j := i
	for j < len(s) && s[j] == ' ' {
		j++
	}
	switch {
	case s[i] == '(' || s[i] == '[' || s[i] == '=':
		return true
	case s[i] == ':' && i+2 < len(s) && s[i+1] == ' ' && strings.IndexByte("[{0123456789-", s[i+2]) >= 0:
		return true // "tokens: [...]", "count: 3"
	case s[i] == ':' && i+2 < len(s) && s[i+1] == ' ' && (s[i+2] == '\'' || s[i+2] == '"'):
		t := strings.TrimSuffix(s, ",")
		return t[len(t)-1] == s[i+2] // "name: 'x'", not `user: "Generate a title ...". Need ...`
	case j > i && j < len(s) && strings.IndexByte("=+-*/%<>&|", s[j]) >= 0:
		return true // "x = 1", "cmd =32", "index + '.'"
	}
	return codeWords[word] && strings.ContainsAny(s, "()[]{}=:;")
}

// proseStart reports whether s opens with two words: a word of letters
// (an apostrophe allowed), one space, and a letter.
func proseStart(s string) bool {
	s = s[skipMarkdown(s, 0):]
	i := 0
	for i < len(s) {
		r, size := utf8.DecodeRuneInString(s[i:])
		if !unicode.IsLetter(r) && r != '\'' && r != '’' {
			break
		}
		i += size
	}
	if i == 0 || i+1 >= len(s) || s[i] != ' ' {
		return false
	}
	r, _ := utf8.DecodeRuneInString(s[i+1:])
	return unicode.IsLetter(r)
}

// onlyTags reports whether s has no letter outside its <...> tags.
func onlyTags(s string) bool {
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c == '<':
			j := strings.IndexByte(s[i:], '>')
			if j < 0 {
				return false
			}
			i += j
		case c >= utf8.RuneSelf || asciiClass[c] == asciiLetter:
			return false
		}
	}
	return true
}

// afterTags returns s after the tags, quotes and spaces that open it:
// "<think>\" The user wants" gives "The user wants".
func afterTags(s string) string {
	for s != "" {
		switch s[0] {
		case '<':
			j := strings.IndexByte(s, '>')
			if j < 0 {
				return s
			}
			s = s[j+1:]
		case '"', '\'', ' ', '\t':
			s = s[1:]
		default:
			return s
		}
	}
	return s
}
