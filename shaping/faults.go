package shaping

import (
	"sort"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Faults counts the reading faults of a shaped text relative to its
// original, or (in Stats and BandStats) the shaped texts with at least one
// fault of each kind. The definitions are the functions Inspect runs; they
// are the measurement of issue 12 and the rules extraction follows:
//
//   - DanglingColon: a kept unit ending in ":" or "：" (markdown emphasis
//     after it ignored) whose following content was dropped: the next kept
//     unit does not start on the next non-blank line of the original, or
//     there is none while the original goes on.
//   - ShortLine: a kept line, outside code fences, of one to three visible
//     (non-space) characters: "}", "[", "0.", "So:".
//   - BareFiller: a kept unit made only of filler words, cue words and
//     punctuation: "So.", "Yes.", "Let's see:", "That makes sense." (see
//     isBareFiller).
//   - DanglingAnaphora: a kept unit that opens (after filler) with an
//     anaphor or connective, "This", "That", "It", "They", "Also", "But",
//     "这", "但是" ... (see anaphorAt), while the nearest earlier unit of the
//     original that is not filler was dropped.
type Faults struct {
	DanglingColon    int
	ShortLine        int
	BareFiller       int
	DanglingAnaphora int
}

// any reports whether f counts at least one fault.
func (f Faults) any() bool {
	return f.DanglingColon+f.ShortLine+f.BareFiller+f.DanglingAnaphora > 0
}

// blocks turns the fault counts of one text into 0/1 per kind, so that
// summing them over texts counts texts with each fault.
func (f Faults) blocks() Faults {
	b := func(n int) int { return min(n, 1) }
	return Faults{b(f.DanglingColon), b(f.ShortLine), b(f.BareFiller), b(f.DanglingAnaphora)}
}

func (f *Faults) add(g Faults) {
	f.DanglingColon += g.DanglingColon
	f.ShortLine += g.ShortLine
	f.BareFiller += g.BareFiller
	f.DanglingAnaphora += g.DanglingAnaphora
}

// Inspect counts the faults of shaped, a text Shape produced from original
// (see Faults). Each unit of shaped is looked up in original, in order; a
// unit whose text was altered (leading filler stripped, first letter
// capitalised) is found by its remainder. Inspect of a text and itself
// finds no dangling colon or anaphora, only units that are faulty in
// themselves (short lines, bare filler).
func Inspect(original, shaped string) Faults {
	var f Faults
	f.ShortLine = shortLines(shaped)
	out := Sentences(shaped)
	orig := Sentences(original)
	src := locate(original, orig, out)
	ante := antecedents(orig)
	covered := make(map[int]bool, len(out))
	for _, k := range src {
		if k >= 0 {
			covered[k] = true
		}
	}
	for i, s := range out {
		if s.Kind == KindCode {
			continue
		}
		if isBareFiller(s.Text) {
			f.BareFiller++
		}
		k := src[i]
		if k < 0 {
			continue
		}
		if endsWithColon(trimEmphasis(s.Text)) && colonDangles(original, orig, src, i) {
			f.DanglingColon++
		}
		if anaphorAt(s.Text, bodyStart(s.Text)) > 0 {
			if j := ante[k]; j >= 0 && !covered[j] {
				f.DanglingAnaphora++
			}
		}
	}
	return f
}

// locate returns for each unit of out the index of the unit of orig it was
// taken from, or -1 when it is not found in original.
func locate(original string, orig, out []Sentence) []int {
	src := make([]int, len(out))
	from := 0
	for i, s := range out {
		p := findFrom(original, s.Text, from)
		if p < 0 {
			p = findFrom(original, s.Text, 0)
		}
		if p < 0 {
			src[i] = -1
			continue
		}
		from = p + 1
		src[i] = unitAt(orig, p)
	}
	return src
}

// findFrom finds unit text t in s at or after from: as it is, or, when
// extraction altered its start, its text after the first rune.
func findFrom(s, t string, from int) int {
	if from > len(s) {
		return -1
	}
	if p := strings.Index(s[from:], t); p >= 0 {
		return from + p
	}
	_, n := utf8.DecodeRuneInString(t)
	if rest := t[n:]; len(rest) >= 4 {
		if p := strings.Index(s[from:], rest); p >= 0 {
			return from + p
		}
	}
	return -1
}

// unitAt returns the index of the unit of orig that holds byte p, or of the
// last unit starting before p.
func unitAt(orig []Sentence, p int) int {
	k := sort.Search(len(orig), func(i int) bool { return orig[i].Start > p }) - 1
	return max(k, 0)
}

// colonDangles reports whether the content after the colon unit out[i]
// (from original unit src[i]) was dropped.
func colonDangles(original string, orig []Sentence, src []int, i int) bool {
	end := orig[src[i]].End
	next := skipSpace(original, end, len(original))
	if next >= len(original) {
		return false // nothing followed in the original
	}
	eol := strings.IndexByte(original[next:], '\n')
	if eol < 0 {
		eol = len(original)
	} else {
		eol += next
	}
	for j := i + 1; j < len(src); j++ {
		if src[j] < 0 {
			continue
		}
		s := orig[src[j]].Start
		return s < next || s > eol
	}
	return true
}

// antecedents returns for each unit of orig the index of the nearest unit
// before it that is not filler (KindFiller or bare filler), or -1.
func antecedents(orig []Sentence) []int {
	ante := make([]int, len(orig))
	last := -1
	for k, s := range orig {
		ante[k] = last
		if s.Kind != KindFiller && !isBareFiller(s.Text) {
			last = k
		}
	}
	return ante
}

// shortLines counts the lines of s outside code fences that hold one to
// three visible characters.
func shortLines(s string) int {
	n := 0
	fences := fenceRanges(s)
	for pos := 0; pos < len(s); {
		eol := strings.IndexByte(s[pos:], '\n')
		if eol < 0 {
			eol = len(s)
		} else {
			eol += pos
		}
		if !inRanges(fences, pos) {
			if v := visible(s[pos:eol]); v >= 1 && v <= 3 {
				n++
			}
		}
		pos = eol + 1
	}
	return n
}

// fenceRanges returns the byte ranges of the code fences of s.
func fenceRanges(s string) [][2]int {
	var r [][2]int
	for _, u := range split(s, nil) {
		if u.kind == KindCode && !u.data {
			r = append(r, [2]int{u.start, u.end})
		}
	}
	return r
}

func inRanges(r [][2]int, p int) bool {
	for _, x := range r {
		if p >= x[0] && p <= x[1] {
			return true
		}
	}
	return false
}

// visible counts the runes of s that are not white space.
func visible(s string) int {
	n := 0
	for _, r := range s {
		if !unicode.IsSpace(r) {
			n++
		}
	}
	return n
}

// trimEmphasis drops markdown emphasis and white space at the end of s.
func trimEmphasis(s string) string {
	return strings.TrimRight(s, "*_` \t")
}

// bodyStart returns the offset in unit text s after a list marker,
// markdown and filler: where its own words start.
func bodyStart(s string) int {
	p := listMarker(s)
	p = skipMarkdown(s, p)
	p, _ = skipFillers(s, p)
	return p
}
