package shaping

import (
	"strings"
	"unicode"
	"unicode/utf8"
)

// emptyWords are the words a unit can be made of and still say nothing:
// filler, cue words, assent and the verbs of "let me see", "that makes
// sense". A unit of only these words and punctuation is bare filler ("So.",
// "Yes.", "Let's see:", "So yes, that works."); any other word, a number or
// a name gives it content. "Hmm" in any length is handled by hmAt.
var emptyWords = setOf(
	"so", "yes", "yeah", "yep", "yup", "no", "nope", "ok", "okay", "right", "alright", "all",
	"well", "wait", "oh", "ah", "um", "uh", "huh", "wow", "let", "let's", "let’s", "lets", "me",
	"us", "i", "see", "think", "check", "verify", "confirm", "recap", "proceed", "try", "double-check",
	"got", "it", "it's", "it’s", "good", "great", "perfect", "correct", "exactly", "sure", "indeed",
	"fine", "done", "true", "now", "then", "thus", "therefore", "hence", "and", "but", "or", "also",
	"again", "actually", "anyway", "hold", "on", "that", "that's", "that’s", "this", "is", "makes",
	"sense", "looks", "seems", "sounds", "works", "cool", "nice", "agreed", "understood", "gotcha",
	"next", "first", "finally", "hmm", "hm", "of", "course", "moving", "here", "here's", "here’s",
)

// genericWords, with emptyWords, make a conclusion generic: "So the code
// should work.", "Thus, the function is correct as written." Such a unit
// decides nothing a reader can use, so extraction prefers any conclusion
// that names something.
var genericWords = setOf(
	"the", "a", "an", "code", "function", "solution", "answer", "implementation", "approach",
	"program", "should", "would", "will", "can", "could", "be", "are", "was", "were", "correctly",
	"handle", "handles", "handled", "cases", "case", "as", "above", "written", "seem", "to", "these",
	"its", "final", "output", "result", "results", "expected", "everything", "problem", "we",
	"must", "like", "complete", "ready", "test", "tests", "pass", "passes", "matches", "same",
	"example", "work", "should've", "edge", "all", "covered", "fine", "looks", "good", "approach",
)

// isGeneric reports whether s has fewer than two words that are neither
// empty nor generic (see genericWords); two Chinese characters count as a
// word. A unit that labels an answer ("So answer: Hello.") is not generic,
// however short the answer.
func isGeneric(s string) bool {
	if hasAnswer(s) {
		return false
	}
	content := 0
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		if !isWordRune(r) {
			i += size
			continue
		}
		cjk := isCJK(r)
		j := wordEnd(s, i, cjk)
		switch {
		case cjk: // a run of Chinese: a word per two characters
			content += max(utf8.RuneCountInString(s[i:j])/2, 1)
		case isName(s[i:j]) || !isEmptyWord(s[i:j]) && !genericWords[lowerWord(s[i:j])]:
			content++
		}
		if content >= 2 {
			return false
		}
		i = j
	}
	return true
}

// isName reports whether w is a one-letter name ("B", "x"), not "a" or "I".
func isName(w string) bool {
	return len(w) == 1 && w != "a" && w != "i" && w != "I"
}

// lowerWord returns w in lower case when it is short ASCII, else w.
func lowerWord(w string) string {
	var buf [16]byte
	if len(w) > len(buf) {
		return w
	}
	for i := 0; i < len(w); i++ {
		buf[i] = lowerASCII(w[i])
	}
	return string(buf[:len(w)])
}

// emptyCJK are the Chinese runs that say nothing on their own.
var emptyCJK = setOf(
	"嗯", "嗯嗯", "好", "好的", "好吧", "好了", "对", "对的", "对了", "是的", "没错", "所以", "那么",
	"然后", "因此", "总之", "明白了", "我明白了", "等等", "让我想想", "让我看看", "我想想", "啊", "哦",
	"呃", "唔", "行", "可以", "就这样", "首先", "接下来", "最后", "结论", "步骤", "计划", "答案", "总结",
)

func setOf(words ...string) map[string]bool {
	m := make(map[string]bool, len(words))
	for _, w := range words {
		m[w] = true
	}
	return m
}

// isBareFiller reports whether unit text s, with its list marker and
// markdown, is made only of emptyWords, emptyCJK runs, "h+m+" and
// punctuation, with at least one word. It stops at the first word with
// content, so on real sentences it costs a word or two.
func isBareFiller(s string) bool {
	s = s[skipMarkdown(s, listMarker(s)):]
	words := 0
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		if !isWordRune(r) {
			i += size
			continue
		}
		j := wordEnd(s, i, isCJK(r))
		w := s[i:j]
		if !isEmptyWord(w) {
			return false
		}
		words++
		i = j
	}
	return words > 0
}

// wordEnd returns the end of the word starting at i, a letter or digit: a
// run of CJK letters and digits, or of other letters, digits, apostrophes
// and inner hyphens. It is always after i.
func wordEnd(s string, i int, cjk bool) int {
	j := i
	for j < len(s) {
		r, size := utf8.DecodeRuneInString(s[j:])
		switch {
		case cjk && isCJK(r) && isWordRune(r):
		case !cjk && !isCJK(r) && (isWordRune(r) || r == '\'' || r == '’'):
		case !cjk && r == '-' && j > i && j+1 < len(s) && wordByte[s[j+1]]:
		default:
			return j
		}
		j += size
	}
	return j
}

func isWordRune(r rune) bool { return unicode.IsLetter(r) || unicode.IsDigit(r) }

// isEmptyWord reports whether word w says nothing (see emptyWords).
func isEmptyWord(w string) bool {
	if w[0] >= utf8.RuneSelf {
		return emptyCJK[w]
	}
	if hmAt(w) == len(w) {
		return true
	}
	return len(w) <= 16 && emptyWords[lowerWord(w)]
}

// anaphors are the openings that refer to an earlier sentence: pronouns
// and demonstratives ("This", "It", "They"), connectives that continue one
// ("Also", "But", "However") and answers to one ("No, ...", "Yes, ..."). English ones match whole words, case
// folded; Chinese ones are prefixes (so "这个", "这样", "但是" match), with
// notAnaphors as exceptions.
var anaphors = []string{
	"this", "that", "these", "those", "it", "it's", "it’s", "its", "they", "they're", "they’re",
	"them", "their", "he", "she", "his", "her", "also", "but", "however", "though", "instead",
	"otherwise", "besides", "moreover", "furthermore", "additionally", "similarly", "likewise",
	"and", "or", "nor", "both", "which", "that's", "that’s", "this's", "no,", "yes,",
	"这", "那", "此", "它", "他", "她", "其中", "但", "不过", "然而", "而且", "另外", "并且", "也",
}

// notAnaphors are Chinese openings that start like an anaphor but are not
// one ("那么" is "so", "也许" is "maybe").
var notAnaphors = []string{"那么", "也许"}

// anaphorAt returns the length of the anaphor opening s[p:], or 0.
func anaphorAt(s string, p int) int {
	if p >= len(s) {
		return 0
	}
	t := s[p:]
	if t[0] >= utf8.RuneSelf {
		for _, n := range notAnaphors {
			if strings.HasPrefix(t, n) {
				return 0
			}
		}
		for _, a := range anaphors {
			if a[0] >= utf8.RuneSelf && strings.HasPrefix(t, a) {
				return len(a)
			}
		}
		return 0
	}
	c := lowerASCII(t[0])
	for _, a := range anaphors {
		if a[0] == c && hasPrefixFold(t, a) && endsAnaphor(t, len(a)) {
			return len(a)
		}
	}
	return 0
}

// endsAnaphor reports whether an English anaphor matched as t[:n] ends a
// word there ("It's" is not "It", "Thistle" is not "This").
func endsAnaphor(t string, n int) bool {
	if n >= len(t) {
		return true
	}
	r, _ := utf8.DecodeRuneInString(t[n:])
	return !isWordRune(r) && r != '\'' && r != '’' && r != '-'
}

// answerLabels label the answer a text settles on: "So answer: Greeting.",
// "Response: Grok", "Title: Create config.json", "答案：42".
var answerLabels = []string{"answer:", "answer is", "response:", "title:", "output:", "result:",
	"答案：", "答案是", "结论："}

// hasAnswer reports whether s holds an answer label followed by something.
func hasAnswer(s string) bool {
	for i := 0; i < len(s); i++ {
		c := lowerASCII(s[i])
		if c != 'a' && c != 'r' && c != 't' && c != 'o' && c != 0xE7 { // 答 and 结 start with E7
			continue
		}
		if i > 0 && wordByte[s[i-1]] {
			continue
		}
		for _, l := range answerLabels {
			if hasPrefixFold(s[i:], l) && hasVisible(s[i+len(l):], 1) {
				return true
			}
		}
	}
	return false
}
