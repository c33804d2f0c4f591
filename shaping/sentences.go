package shaping

import (
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

// SentenceKind classifies a Sentence for extraction.
type SentenceKind uint8

// The kinds, from the splitter (KindCode, KindListItem) and the classifier
// (KindFiller, KindDecisive). A list item that is filler or decisive gets
// that kind instead of KindListItem.
const (
	KindNormal   SentenceKind = iota // plain prose
	KindFiller                       // starts with filler and decides nothing (see fillers)
	KindDecisive                     // decides, concludes or plans (see cues)
	KindCode                         // a whole ``` or ~~~ fence, or a run of code or data lines outside one; atomic
	KindListItem                     // starts with "- ", "* ", "+ ", "• ", "1. " or "1) "
)

var kindNames = [...]string{"normal", "filler", "decisive", "code", "listItem"}

// String returns the kind's name: normal, filler, decisive, code or listItem.
func (k SentenceKind) String() string {
	if int(k) < len(kindNames) {
		return kindNames[k]
	}
	return "SentenceKind(" + strconv.Itoa(int(k)) + ")"
}

// Sentence is one unit of extraction: a sentence, a line, a list item or a
// whole code fence. Text is text[Start:End] of the string given to
// Sentences, trimmed of surrounding white space.
type Sentence struct {
	Text       string
	Start, End int // byte offsets
	Kind       SentenceKind
}

// Sentences splits text into the units Extract chooses from, in order.
// The rules:
//
//   - A line break always ends a unit; blank lines are skipped.
//   - A line whose first non-blank characters are ``` or ~~~ opens a code
//     fence, which runs to the first later line made only of at least as many
//     of the same character, or to the end of text; the fence is one unit.
//   - A line of code or data outside a fence ("}", "'POP': 33", "x = 1",
//     "0.", "<think>"; see isCodeLine) is not split; a run of such lines is
//     one unit of KindCode, atomic like a fence.
//   - A line starting with "- ", "* ", "+ ", "• ", "1. " or "1) " (up to three
//     digits) starts a list item; its marker stays in the unit's text.
//   - Inside a line, a unit ends after . ? ! or … (a run of them, plus closing
//     quotes and brackets) when white space follows and the next word does
//     not start with a lower-case letter, the next text is not a fence, and a
//     single "." does not end an abbreviation such as "e.g." or "vs.".
//     So "3.14", "main.go", "1.2.3" and "Hmm... let me" stay whole.
//   - A bold title glued to the end of a sentence ("... done.**Next
//     step**") starts a unit of its own.
//   - ? and ! also end a unit when a CJK character follows directly;
//     。？！； end a unit whatever follows (Chinese needs no space).
//   - Nothing is split inside an inline code span of one to three
//     backticks, nor inside a passage in quotes (" or “”) that closes on
//     the same line within 120 bytes.
//
// Text need not be valid UTF-8; invalid bytes are kept inside units.
func Sentences(text string) []Sentence {
	units := split(text, nil)
	classifyAll(text, units)
	out := make([]Sentence, len(units))
	for i := range units {
		u := &units[i]
		out[i] = Sentence{Text: text[u.start:u.end], Start: u.start, End: u.end, Kind: u.kind}
	}
	return out
}

// unit is the splitter's and scorer's view of a Sentence.
type unit struct {
	start, end int // byte offsets of the trimmed unit in text
	runes      int
	score      int    // see score
	body       int    // offset in the unit of the text after list marker and filler
	line       int    // line number among units (see setSeps)
	para       int32  // paragraph number (see setSeps)
	sep        string // written before the unit after its neighbour (see setSeps)
	kind       SentenceKind
	cue        int8 // decisive weight, 0 for none
	list       bool // started with a list marker
	header     bool // ends with a colon and a list follows (see classifyAll)
	question   bool // ends with ? or ？
	info       bool // contains digits, code or paths
	data       bool // a run of code or data lines outside a fence (see isCodeLine)
	// Set by link for extraction.
	strip   int32 // bytes of leading filler not written (see leadFiller)
	ante    int32 // the antecedent of an anaphor, or noUnit
	need    int32 // the follower of a unit ending in ':', noUnit or impossible
	prev    int32 // the item before a numbered list item, or noUnit
	gs, ge  int32 // the short list holding the unit (see groupLists), gs noUnit if none
	bare    bool  // filler or bare filler
	keep    bool  // may be kept: not bare, not code outside a fence, not tiny
	capital bool  // write the first letter after strip in upper case
	noisy   bool  // mostly digits and symbols (see isNoisy)
	short   bool  // fewer than extraWords words
	generic bool  // a decisive unit that names nothing (see isGeneric)
}

// split appends the units of text to dst.
func split(text string, dst []unit) []unit {
	for pos := 0; pos < len(text); {
		eol := strings.IndexByte(text[pos:], '\n')
		if eol < 0 {
			eol = len(text)
		} else {
			eol += pos
		}
		ls := skipSpace(text, pos, eol)
		if ls < eol {
			if c, n := fenceOpen(text[ls:eol]); n > 0 {
				end, next := fenceClose(text, eol, c, n)
				dst = append(dst, unit{start: ls, end: end, kind: KindCode})
				pos = next
				continue
			}
			le := trimRightSpace(text, ls, eol)
			if isCodeLine(text[ls:le]) {
				dst = appendCodeLine(text, ls, le, dst)
			} else {
				dst = splitLine(text, ls, le, dst)
			}
		}
		pos = eol + 1
	}
	return dst
}

// appendCodeLine appends the code line text[a:b] to dst: to the last unit
// when that is a code line run ending on the line just before, else as a
// new one.
func appendCodeLine(text string, a, b int, dst []unit) []unit {
	if n := len(dst); n > 0 && dst[n-1].data && strings.Count(text[dst[n-1].end:a], "\n") == 1 {
		dst[n-1].end = b
		return dst
	}
	return append(dst, unit{start: a, end: b, kind: KindCode, data: true})
}

// fenceOpen reports the fence character and its count when line opens a
// code fence (three or more ` or ~), else 0.
func fenceOpen(line string) (byte, int) {
	if len(line) < 3 || (line[0] != '`' && line[0] != '~') {
		return 0, 0
	}
	c := line[0]
	n := 0
	for n < len(line) && line[n] == c {
		n++
	}
	if n < 3 {
		return 0, 0
	}
	return c, n
}

// fenceClose finds the line closing a fence opened on the line ending at
// eol. It returns the end of the fence unit and where scanning resumes.
func fenceClose(text string, eol int, c byte, n int) (end, next int) {
	for pos := eol + 1; pos < len(text); {
		e := strings.IndexByte(text[pos:], '\n')
		if e < 0 {
			e = len(text)
		} else {
			e += pos
		}
		if isFenceClose(text[pos:e], c, n) {
			return trimRightSpace(text, pos, e), e + 1
		}
		pos = e + 1
	}
	return trimRightSpace(text, 0, len(text)), len(text)
}

// isFenceClose reports whether line, trimmed, is at least n times c.
func isFenceClose(line string, c byte, n int) bool {
	line = strings.TrimSpace(line)
	if len(line) < n {
		return false
	}
	for i := 0; i < len(line); i++ {
		if line[i] != c {
			return false
		}
	}
	return true
}

// startsFence reports whether s starts with ``` or ~~~.
func startsFence(s string) bool {
	_, n := fenceOpen(s)
	return n > 0
}

// listMarker returns the length of a list marker and the spaces after it at
// the start of s, or 0.
func listMarker(s string) int {
	if strings.HasPrefix(s, "• ") {
		return skipSpace(s, len("• "), len(s))
	}
	if len(s) >= 2 && (s[0] == '-' || s[0] == '*' || s[0] == '+') && s[1] == ' ' {
		return skipSpace(s, 2, len(s))
	}
	d := 0
	for d < len(s) && d < 4 && isDigit(s[d]) {
		d++
	}
	if d == 0 || d > 3 || d+1 >= len(s) || (s[d] != '.' && s[d] != ')') || s[d+1] != ' ' {
		return 0
	}
	return skipSpace(s, d+2, len(s))
}

// splitLine appends the units of the trimmed line text[a:b].
func splitLine(text string, a, b int, dst []unit) []unit {
	start, i := a, a
	list := false
	if m := listMarker(text[a:b]); m > 0 && a+m < b {
		list, i = true, a+m
	}
	ticks := tickState{}
	var q quotes
	q.scan(text, a, b)
	line := text[:b] // lets the compiler drop the bounds check below
	for i < len(line) {
		c := line[i]
		if !splitByte[c] {
			i++
			continue
		}
		if c == '`' {
			i = ticks.skip(text, i, b)
			continue
		}
		if c >= utf8.RuneSelf {
			if r, size := utf8.DecodeRuneInString(text[i:b]); !isTerminator(r) {
				i += size
				continue
			}
		}
		e, next, ok := boundary(text, start, i, b)
		if ok && !q.inside(e) {
			dst = append(dst, unit{start: start, end: e, list: list})
			list, start = false, next
		}
		i = next
	}
	if start < b {
		dst = append(dst, unit{start: start, end: b, list: list})
	}
	return dst
}

// quotes holds the quote marks (" “ ”) of one line, so that a quoted
// passage ("So my answer is: “Olá! Oi!”") stays in one unit. Each mark
// opens (“, or " after a space and before a word), closes (”, or " after a
// word and before a space or punctuation) or, when it cannot be told,
// toggles.
type quotes struct {
	pos  [32]int32
	kind [32]int8 // 1 opens, -1 closes, 0 toggles
	n    int
}

// scan records the quote marks of text[a:b]; a line with more than 32 of
// them gets none (its passages may be split, as before).
func (q *quotes) scan(text string, a, b int) {
	line := text[a:b]
	if strings.IndexByte(line, '"') < 0 && !strings.Contains(line, "\u201c") && !strings.Contains(line, "\u201d") {
		return
	}
	for p := a; p < b; {
		k := strings.IndexAny(text[p:b], "\"“”")
		if k < 0 {
			return
		}
		p += k
		if q.n == len(q.pos) {
			q.n = 0
			return
		}
		q.pos[q.n] = int32(p)
		switch {
		case text[p] == '"':
			q.kind[q.n] = straightKind(text, a, b, p)
			p++
		case strings.HasPrefix(text[p:], "“"):
			q.kind[q.n] = 1
			p += len("“")
		default:
			q.kind[q.n] = -1
			p += len("”")
		}
		q.n++
	}
}

// straightKind tells whether the " at p in the line text[a:b] opens (1),
// closes (-1) or cannot be told (0).
func straightKind(text string, a, b, p int) int8 {
	prev, next := byte(' '), byte(' ')
	if p > a {
		prev = text[p-1]
	}
	if p+1 < b {
		next = text[p+1]
	}
	opens := isSpaceByte(prev) || strings.IndexByte("([{:", prev) >= 0
	closes := isSpaceByte(next) || strings.IndexByte(".,;:!?)]}", next) >= 0
	switch {
	case opens && !closes:
		return 1
	case closes && !opens:
		return -1
	}
	return 0
}

// inside reports whether byte offset e lies inside a quoted passage that
// closes later on the line, within maxQuoteTail bytes and before another
// passage opens.
func (q *quotes) inside(e int) bool {
	in, k := false, 0
	for ; k < q.n && int(q.pos[k]) < e; k++ {
		switch q.kind[k] {
		case 1:
			in = true
		case -1:
			in = false
		default:
			in = !in
		}
	}
	if !in || k == q.n || int(q.pos[k])-e > maxQuoteTail {
		return false
	}
	return q.kind[k] != 1
}

// maxQuoteTail bounds how far after a sentence end the closing quote may
// be for the sentence to stay inside its quotation: an unbalanced quote
// must not glue a whole paragraph into one unit.
const maxQuoteTail = 120

// splitByte marks the bytes splitLine must look at: ASCII terminators, the
// backtick, and the lead bytes of … (E2), 。 (E3) and ？！； (EF). Any
// other byte, including continuation bytes, cannot start a terminator.
var splitByte = [256]bool{'.': true, '?': true, '!': true, '`': true, 0xE2: true, 0xE3: true, 0xEF: true}

// tickState skips inline code spans on one line. Only spans of one to three
// backticks are recognised; a length that found no closing run once is not
// searched again, which keeps a line of stray backticks linear.
type tickState struct{ failed [4]bool }

// skip returns the index after the inline code span starting at i, or after
// the backtick run if it opens no span.
func (ts *tickState) skip(text string, i, b int) int {
	n := 0
	for i+n < b && text[i+n] == '`' {
		n++
	}
	if n > 3 || ts.failed[n] {
		return i + n
	}
	for j := i + n; j < b; {
		k := strings.IndexByte(text[j:b], '`')
		if k < 0 {
			break
		}
		j += k
		m := 0
		for j+m < b && text[j+m] == '`' {
			m++
		}
		if m == n {
			return j + m
		}
		j += m
	}
	ts.failed[n] = true
	return i + n
}

// boundary decides whether a unit ends at the terminator at text[i]. It
// returns the unit's end, the start of the next unit and true; or, when the
// unit goes on, where to resume scanning (after the whole run of
// terminators, so "......" is looked at once) and false. start is the start
// of the current unit; b is the end of the line.
func boundary(text string, start, i, b int) (end, next int, ok bool) {
	r, size := utf8.DecodeRuneInString(text[i:b])
	if i == start || isSpaceByte(text[i-1]) {
		return 0, i + size, false // "COPY . ." or a stray terminator
	}
	cjk := isCJKTerminator(r)
	j, periods, other := i+size, 0, r != '.'
	if r == '.' {
		periods = 1
	}
run:
	for j < b {
		r2, s2 := utf8.DecodeRuneInString(text[j:b])
		switch {
		case r2 == '.':
			periods++
		case isTerminator(r2):
			other = true
			cjk = cjk || isCJKTerminator(r2)
		case !isCloser(r2):
			break run
		}
		j += s2
	}
	if j >= b {
		return 0, j, false // the line end closes the unit
	}
	k := skipSpace(text, j, b)
	if k >= b || startsFence(text[k:b]) {
		return 0, j, false
	}
	if cjk {
		return j, k, true
	}
	if k == j { // no space after the terminator
		nr, _ := utf8.DecodeRuneInString(text[j:b])
		if r != '.' && isCJK(nr) {
			return j, j, true
		}
		if j-2 > i+size-1 && text[j-2:j] == "**" && unicode.IsUpper(nr) {
			return j - 2, j - 2, true // a bold title glued on: "done.**Next step**"
		}
		return 0, j, false
	}
	nr, _ := utf8.DecodeRuneInString(text[k:b])
	if unicode.IsLower(nr) {
		return 0, j, false
	}
	if periods == 1 && !other && isAbbrev(text[wordStart(text, start, i):i]) {
		return 0, j, false
	}
	return j, k, true
}

// wordStart returns the start of the word ending at i, not before start.
func wordStart(text string, start, i int) int {
	for i > start && !isSpaceByte(text[i-1]) && text[i-1] != '(' && text[i-1] != '"' {
		i--
	}
	return i
}

// isAbbrev reports whether w (the word before a single ".") is an
// abbreviation after which a capitalised word does not start a sentence.
func isAbbrev(w string) bool {
	if len(w) == 0 || len(w) > 6 {
		return false
	}
	var buf [6]byte
	for i := 0; i < len(w); i++ {
		buf[i] = lowerASCII(w[i])
	}
	switch string(buf[:len(w)]) {
	case "e.g", "i.e", "eg", "ie", "vs", "cf", "mr", "mrs", "ms", "dr", "prof",
		"sr", "jr", "st", "fig", "approx", "esp", "incl", "resp", "al", "viz":
		return true
	}
	return false
}

// isTerminator reports whether r may end a unit.
func isTerminator(r rune) bool {
	return r == '.' || r == '?' || r == '!' || r == '…' || isCJKTerminator(r)
}

// isCJKTerminator reports whether r ends a Chinese sentence without a space.
func isCJKTerminator(r rune) bool {
	return r == '。' || r == '？' || r == '！' || r == '；'
}

// isCloser reports whether r may follow a terminator inside the sentence
// (closing quotes, brackets, markdown emphasis).
func isCloser(r rune) bool {
	switch r {
	case '"', '\'', ')', ']', '}', '*', '”', '’', '」', '』', '）', '》', '】', '〉':
		return true
	}
	return false
}

// isCJK reports whether r is a Han, kana, Hangul or full-width character:
// a script written without spaces, where any rune boundary is a word
// boundary.
func isCJK(r rune) bool {
	switch {
	case r < 0x2E80:
		return false
	case r <= 0x9FFF, r >= 0xAC00 && r <= 0xD7AF, r >= 0xF900 && r <= 0xFAFF,
		r >= 0xFE30 && r <= 0xFE4F, r >= 0xFF00 && r <= 0xFFEF, r >= 0x20000 && r <= 0x3FFFF:
		return true
	}
	return false
}

// skipSpace returns the first index in [i, b) that is not white space, or b.
func skipSpace(s string, i, b int) int {
	for i < b {
		c := s[i]
		if c < utf8.RuneSelf {
			if !isSpaceByte(c) {
				return i
			}
			i++
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:b])
		if !unicode.IsSpace(r) {
			return i
		}
		i += size
	}
	return b
}

// trimRightSpace returns the end of s[a:b] without trailing white space.
func trimRightSpace(s string, a, b int) int {
	for b > a {
		c := s[b-1]
		if c < utf8.RuneSelf {
			if !isSpaceByte(c) {
				return b
			}
			b--
			continue
		}
		r, size := utf8.DecodeLastRuneInString(s[a:b])
		if !unicode.IsSpace(r) {
			return b
		}
		b -= size
	}
	return a
}

func isSpaceByte(c byte) bool {
	return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f'
}

func isDigit(c byte) bool { return c >= '0' && c <= '9' }

func lowerASCII(c byte) byte {
	if c >= 'A' && c <= 'Z' {
		return c + 'a' - 'A'
	}
	return c
}
