package shaping

import (
	"strings"
	"unicode"
	"unicode/utf8"
)

// fillers is the one table of filler openings. A unit whose text (after a
// list marker and leading markdown "#>*_") starts with one of these, matched
// case-insensitively for ASCII and followed by a character that is neither a
// letter nor a digit in any script ("Ohio" and "好的方法" are not filler), is
// filler unless what follows decides something (see classify). Fillers chain
// ("Hmm, wait, okay"), a phrase may repeat ("嗯嗯"), any run of "h" then "m"
// counts ("Hm", "Hmmm"), and a "so" right after a filler is part of it
// ("Okay, so" is filler, "Okay, so the fix is" decisive). Longer phrases
// come first.
var fillers = []string{
	// English
	"actually, wait", "actually wait", "let me think", "let me see",
	"okay so", "ok so", "alright so", "all right", "alright", "okay", "ok",
	"wait a moment", "wait a second", "wait a minute", "hold on", "wait",
	"well,", "oh", "ah", "um", "uh", "hmm", "hm",
	// Chinese
	"让我想想", "让我看看", "我想想", "等等", "好的", "好吧", "嗯", "啊", "哦", "呃", "唔",
}

// cue is one phrase that marks a unit as decisive.
type cue struct {
	phrase string // lower case
	weight int8   // 3 conclusion, 2 plan; inside a unit every cue weighs 1
	inner  bool   // also counts when it appears inside the unit
}

// cues is the one table of decisive phrases. At the start of a unit (after
// a list marker, markdown and filler) a cue gives its weight; a cue marked
// inner also gives weight 1 anywhere in the unit, English at a word start,
// Chinese anywhere (so only unambiguous Chinese connectives are inner:
// "问我应该从哪里开始" must not count as "我应该"). English cues need a
// non-letter after them.
var cues = []cue{
	// conclusions
	{"so", 3, false}, {"therefore", 3, true}, {"thus", 3, true}, {"hence", 3, false},
	{"in conclusion", 3, true}, {"in summary", 3, false}, {"to summarize", 3, false},
	{"final", 3, false}, {"finally", 3, false}, {"conclusion", 3, false}, {"decision", 3, false},
	{"the fix is", 3, true}, {"the answer is", 3, true}, {"the problem is", 3, true},
	{"the issue is", 3, true}, {"the root cause", 3, true}, {"the solution is", 3, true},
	{"answer:", 3, false}, {"response:", 3, false}, {"title:", 2, false},
	{"所以", 3, true}, {"因此", 3, true}, {"因而", 3, true}, {"我决定", 3, true}, {"决定", 3, false},
	{"结论", 3, true}, {"总之", 3, true}, {"综上", 3, true}, {"最终", 3, false},
	{"问题在于", 3, true}, {"问题是", 3, false}, {"答案是", 3, true}, {"解决方法", 3, true},
	// plans
	{"i'll", 2, true}, {"i’ll", 2, true}, {"i will", 2, true}, {"i need to", 2, true},
	{"i should", 2, true}, {"i must", 2, true}, {"i'm going to", 2, true}, {"i’m going to", 2, true},
	{"let's", 2, true}, {"let’s", 2, true}, {"the plan is", 2, true}, {"plan:", 2, false},
	{"next,", 2, false}, {"next step", 2, false}, {"steps:", 2, false},
	{"我将", 2, false}, {"我需要", 2, false}, {"接下来", 2, false}, {"我应该", 2, false},
	{"我要", 2, false}, {"我会", 2, false}, {"下一步", 2, false}, {"那么", 2, false},
	{"步骤", 2, false}, {"计划", 2, false},
}

// notCues are openings that look like a cue but are not ("So far, ...").
// All start with "s" (startCue relies on it).
var notCues = []string{"so far", "so much", "so many"}

// Indexes over the tables, by first byte (ASCII folded to lower case):
// cueIndex and innerIndex list indices into cues (all, and inner ones),
// fillerIndex indices into fillers. byteClass flags the bytes the unit scan
// must look at. They are computed once and never change.
var (
	cueIndex, innerIndex, fillerIndex [256][]uint8
	byteClass                         [256]uint8
	innerPair                         [256][4]uint64  // first, second byte of inner cues
	cueKey, cueMask                   [maxCues]uint64 // first 8 bytes of each cue (see prefix8)
)

// maxCues bounds the cues table (indexes are uint8; init checks the bound).
const maxCues = 128

// byteClass flags.
const (
	classInfo  = 1 << iota // digit, backtick, underscore, slash, parenthesis
	classDot               // '.', informative between word bytes
	classInner             // may start an inner cue
)

// wordByte marks ASCII letters, digits and the underscore.
var wordByte = func() (t [256]bool) {
	for c := 0; c < 256; c++ {
		t[c] = isWordByte(byte(c))
	}
	return t
}()

func init() {
	if len(cues) > maxCues || len(fillers) > 255 {
		panic("shaping: cue or filler table too long")
	}
	for i, c := range cues {
		cueKey[i], cueMask[i] = prefix8(c.phrase)
		b := c.phrase[0]
		cueIndex[b] = append(cueIndex[b], uint8(i))
		if c.inner {
			innerIndex[b] = append(innerIndex[b], uint8(i))
			b2 := c.phrase[1]
			innerPair[b][b2>>6] |= 1 << (b2 & 63)
			byteClass[b] |= classInner
			if b >= 'a' && b <= 'z' {
				byteClass[b-'a'+'A'] |= classInner
			}
		}
	}
	for i, f := range fillers {
		fillerIndex[f[0]] = append(fillerIndex[f[0]], uint8(i))
	}
	for c := 0; c < 256; c++ {
		switch {
		case isDigit(byte(c)), c == '`', c == '_', c == '/', c == '(':
			byteClass[c] |= classInfo
		case c == '.':
			byteClass[c] |= classDot
		}
	}
}

// openingMinWidth is how much text must follow the filler of a text's first
// unit for it to count as the task statement ("Hmm, the user wants ...").
// Width counts a CJK character as 2, any other rune as 1, so that
// "用户要导出。" (12) weighs like "the user asks" (13).
const openingMinWidth = 12

// width returns the display width of s: 2 per CJK rune, 1 per other rune.
func width(s string) int {
	w := 0
	for _, r := range s {
		w++
		if isCJK(r) {
			w++
		}
	}
	return w
}

// classifyAll classifies units and applies the two rules that look at
// neighbours:
//
//   - Opening: the first unit that is not code, if it is filler followed by
//     text of at least openingMinWidth, is plain: reasoning models open with
//     "Hmm, the user says ..." / "嗯，用户说……", which states the task.
//   - Header: a unit ending in ":" or "：" right before a list item is a
//     header. The items of a decisive header ("So the fix is:", "Plan:")
//     are decisive, weight 2. (Extraction keeps any unit ending in a colon
//     only with what follows it: see link.)
func classifyAll(text string, units []unit) {
	opening := true
	for i := range units {
		u := &units[i]
		classify(text, u)
		if opening && u.kind != KindCode {
			opening = false
			if u.kind == KindFiller && width(text[u.start+u.body:u.end]) >= openingMinWidth {
				u.kind = KindNormal
				if u.list {
					u.kind = KindListItem
				}
			}
		}
	}
	for i := 0; i+1 < len(units); i++ {
		if !units[i+1].list || !endsWithColon(text[units[i].start:units[i].end]) {
			continue
		}
		units[i].header = true
		if units[i].kind != KindDecisive {
			continue
		}
		for j := i + 1; j < len(units) && units[j].list && units[j].kind != KindFiller; j++ {
			if units[j].kind != KindDecisive {
				units[j].kind, units[j].cue = KindDecisive, 2
			}
		}
	}
}

func endsWithColon(s string) bool {
	return strings.HasSuffix(s, ":") || strings.HasSuffix(s, "：")
}

// classify sets u.kind, u.cue, u.body, u.info, u.question and u.runes.
func classify(text string, u *unit) {
	s := text[u.start:u.end]
	if u.kind == KindCode {
		u.runes = utf8.RuneCountInString(s)
		return
	}
	p := 0
	if u.list {
		p = listMarker(s)
	}
	p = skipMarkdown(s, p)
	q, filler := skipFillers(s, p)
	u.body = q
	w := startCue(s, q)
	var inner bool
	u.runes, u.info, inner = scanUnit(s, q, w == 0)
	if inner {
		w = 1
	}
	u.question = strings.HasSuffix(s, "?") || strings.HasSuffix(s, "？")
	switch {
	case w > 0:
		u.kind, u.cue = KindDecisive, w
	case filler:
		u.kind = KindFiller
	case u.list:
		u.kind = KindListItem
	default:
		u.kind = KindNormal
	}
}

// scanUnit returns the length of s in runes (s must be valid UTF-8) and,
// if wantInner, whether an inner cue appears in s[from:] (English at a word
// start, Chinese anywhere) and, when none does, whether s is informative:
// digits, code, paths, identifiers, the details that tell two reasoning
// texts apart. (A unit with a cue is decisive, and informative matters only
// for plain units.)
func scanUnit(s string, from int, wantInner bool) (runes int, info, inner bool) {
	runes = validRuneCount(s)
	if !wantInner {
		return runes, false, false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		cl := byteClass[c]
		if cl == 0 {
			continue
		}
		if cl&classInfo != 0 || cl&classDot != 0 && i > 0 && i+1 < len(s) &&
			wordByte[s[i-1]] && wordByte[s[i+1]] {
			info = true
		}
		if cl&classInner == 0 || i < from || i+1 >= len(s) {
			continue
		}
		if c < utf8.RuneSelf {
			if i > 0 && (wordByte[s[i-1]] || s[i-1] == '\'') {
				continue
			}
			c = lowerASCII(c)
		}
		c2 := lowerASCII(s[i+1])
		if innerPair[c][c2>>6]&(1<<(c2&63)) != 0 && innerAt(s[i:], c) {
			return runes, false, true
		}
	}
	return runes, info, false
}

// innerAt reports whether an inner cue starts s, whose first byte folds to b.
func innerAt(s string, b byte) bool {
	w, _ := prefix8(s)
	for _, k := range innerIndex[b] {
		if w&cueMask[k] == cueKey[k] && hasWordFold(s, cues[k].phrase) {
			return true
		}
	}
	return false
}

// prefix8 packs the first (up to) eight bytes of s, ASCII folded to lower
// case, into a word, with the mask of the bytes present: a cheap first test
// before comparing a whole phrase ("the " starts seven cues).
func prefix8(s string) (w, mask uint64) {
	n := min(len(s), 8)
	for i := 0; i < n; i++ {
		w |= uint64(lowerASCII(s[i])) << (8 * i)
		mask |= 0xFF << (8 * i)
	}
	return w, mask
}

// skipMarkdown skips white space and the markdown characters #>*_ at p.
func skipMarkdown(s string, p int) int {
	for p < len(s) {
		switch s[p] {
		case '#', '>', '*', '_', ' ', '\t':
			p++
		default:
			return p
		}
	}
	return p
}

// skipFillers skips the filler phrases at p, the punctuation after each and
// a "so" right after a filler ("Okay, so" is still filler). It reports
// whether any filler was found.
func skipFillers(s string, p int) (int, bool) {
	found := false
	for {
		n := fillerAt(s[p:])
		if n == 0 {
			break
		}
		found = true
		p = skipFillerPunct(s, p+n)
	}
	if found && hasWordFold(s[p:], "so") {
		p = skipFillerPunct(s, p+2)
	}
	return p, found
}

// fillerAt returns the length of the filler (with its repetitions) at the
// start of s, or 0.
func fillerAt(s string) int {
	if n := hmAt(s); n > 0 {
		return n
	}
	if s == "" {
		return 0
	}
	for _, k := range fillerIndex[lowerASCII(s[0])] {
		f := fillers[k]
		if !hasPrefixFold(s, f) {
			continue
		}
		n := len(f)
		for hasPrefixFold(s[n:], f) {
			n += len(f)
		}
		if fillerEnds(s, n, f) {
			return n
		}
	}
	return 0
}

// fillerEnds reports whether the filler f matched as s[:n] is a whole word:
// the next rune is not a letter or digit, in any script ("好的方法" is not
// the filler "好的", "Ohio" is not "Oh").
func fillerEnds(s string, n int, f string) bool {
	if last := f[len(f)-1]; last < utf8.RuneSelf && !isWordByte(last) {
		return true
	}
	return endsWord(s, n, "x")
}

// hmAt matches "h+m+" as a whole word ("Hm", "Hmmm", "hhmm").
func hmAt(s string) int {
	i := 0
	for i < len(s) && lowerASCII(s[i]) == 'h' {
		i++
	}
	j := i
	for j < len(s) && lowerASCII(s[j]) == 'm' {
		j++
	}
	if i == 0 || j == i || !endsWord(s, j, "x") {
		return 0
	}
	return j
}

// skipFillerPunct skips white space and the punctuation that follows a
// filler word.
func skipFillerPunct(s string, p int) int {
	for p < len(s) {
		r, size := utf8.DecodeRuneInString(s[p:])
		if !unicode.IsSpace(r) && !isFillerPunct(r) {
			return p
		}
		p += size
	}
	return p
}

func isFillerPunct(r rune) bool {
	switch r {
	case ',', '.', '!', '?', ';', ':', '-', '*', '~', '…', '—', '–',
		'，', '。', '！', '？', '、', '；', '：', '～':
		return true
	}
	return false
}

// startCue returns the weight of the cue at s[p:], or 0.
func startCue(s string, p int) int8 {
	if p >= len(s) {
		return 0
	}
	var w int8
	for _, i := range cueIndex[lowerASCII(s[p])] {
		c := &cues[i]
		if c.weight > w && hasWordFold(s[p:], c.phrase) {
			w = c.weight
		}
	}
	if w > 0 && lowerASCII(s[p]) == 's' {
		for _, n := range notCues {
			if hasWordFold(s[p:], n) {
				return 0
			}
		}
	}
	return w
}

// hasWordFold reports whether s starts with phrase (ASCII case folded) and
// the phrase ends a word there.
func hasWordFold(s, phrase string) bool {
	return hasPrefixFold(s, phrase) && endsWord(s, len(phrase), phrase)
}

// hasPrefixFold reports whether s starts with the lower-case phrase,
// folding ASCII upper case in s.
func hasPrefixFold(s, phrase string) bool {
	if len(s) < len(phrase) {
		return false
	}
	for i := 0; i < len(phrase); i++ {
		if lowerASCII(s[i]) != phrase[i] {
			return false
		}
	}
	return true
}

// endsWord reports whether a phrase matched as s[:n] ends a word: always
// for phrases ending in punctuation or a CJK character, otherwise when the
// next rune is neither a letter nor a digit.
func endsWord(s string, n int, phrase string) bool {
	last := phrase[len(phrase)-1]
	if last >= utf8.RuneSelf || !isWordByte(last) {
		return true
	}
	if n >= len(s) {
		return true
	}
	if s[n] < utf8.RuneSelf {
		return !isWordByte(s[n]) && s[n] != '\'' && s[n] != '-'
	}
	r, _ := utf8.DecodeRuneInString(s[n:])
	return !unicode.IsLetter(r) && !unicode.IsDigit(r) && r != '’'
}

// isWordByte reports whether c is an ASCII letter, digit or underscore.
func isWordByte(c byte) bool {
	c = lowerASCII(c)
	return c >= 'a' && c <= 'z' || isDigit(c) || c == '_'
}
