package shaping

import (
	"math/bits"
	"slices"
	"strings"
	"sync"
	"unicode"
	"unicode/utf8"
)

// Score tiers (see score): the lead, then task and detail, then decisive,
// plain and code units; filler is never chosen except as the last resort.
const (
	tierCode     = 1
	tierPlain    = 2
	tierDecisive = 3
	tierKey      = 4 // task and detail
	tierLead     = 5 // the best decisive unit
)

// Extract returns the decisive sentences of text within o.MaxChars runes,
// in their original order, with no marker (o.Op and o.Marker are ignored).
//
// A text of at most MaxChars runes is returned as it is: the budget is what
// makes shaping worth doing, and it makes Extract idempotent. Otherwise the
// units of Sentences are scored (see score) and taken greedily, best first,
// while the total, separators included, stays within MaxChars; they are then
// written in text order. Between two units written one after the other goes
// "\n" if a line break separates them in text (or the first is a code
// fence), else the white space before the second collapsed to " ", or
// nothing if there was none (Chinese).
//
// If no unit fits whole, the best non-filler unit that is not code (or, when
// all are filler, the last one) is cut: at the last word boundary (white
// space, or any rune boundary next to a CJK character) that keeps at most
// MaxChars runes; only a first word longer than MaxChars is cut inside, at a
// rune boundary not before a combining mark. Code fences are never cut. A
// text with no unit other than code fences that do not fit, or with no unit
// at all (only white space), is returned as it is, over MaxChars.
//
// Invalid UTF-8 never reaches the result: a text that fits is returned
// with invalid sequences replaced by U+FFFD; otherwise, if the units
// extracted from the text as it is hold invalid UTF-8, extraction runs again
// on the text with invalid sequences replaced. The result is never empty
// for a non-empty text.
func Extract(text string, o Options) string {
	o = o.effective()
	if fits(text, o.MaxChars) {
		return strings.ToValidUTF8(text, "\uFFFD")
	}
	return extractValid(text, o.MaxChars)
}

// Shape applies o.Op to one reasoning text and reports whether the result
// differs from text. OpKeep returns text; OpDrop returns "" (changed unless
// text was already empty). OpExtract returns Extract's result, after the
// marker when o.Marker is true (the marker counts toward MaxChars).
//
// Short-block guard: if the result is not strictly shorter in runes than
// text, Shape returns text unchanged. Because a text of at most MaxChars
// runes is never changed and a changed result is always within MaxChars,
// Shape is idempotent: Shape(Shape(x)) == Shape(x).
//
// When changed is false, out is text byte for byte (even if it is invalid
// UTF-8); when changed is true, out is valid UTF-8, non-empty (except for
// OpDrop) and at most MaxChars runes long. Invalid options are not an error:
// Shape treats a MaxChars below 1 as DefaultMaxChars and an unknown Op as
// OpKeep, and leaves out a marker that would not fit in MaxChars.
func Shape(text string, o Options) (out string, changed bool) {
	o = o.effective()
	switch o.Op {
	case OpKeep:
		return text, false
	case OpDrop:
		return "", text != ""
	}
	if fits(text, o.MaxChars) {
		return text, false
	}
	budget, mark := o.MaxChars, false
	n := 0 // runes in text, counted only for the marker
	if o.Marker {
		n = utf8.RuneCountInString(text)
		if o.MaxChars-markerRunes(n) >= 1 {
			budget, mark = o.MaxChars-markerRunes(n), true
		}
	}
	out = extractValid(text, budget)
	m := utf8.RuneCountInString(out)
	if m > budget { // nothing to cut: only white space or fences too large
		return text, false
	}
	if mark {
		out = marker(n-m) + out
	}
	// text has more than MaxChars runes and out at most MaxChars, so the
	// short-block guard holds here without another count.
	return out, true
}

// fits reports whether text has at most limit runes, counting only when
// its length in bytes leaves a doubt (a rune is 1 to 4 bytes).
func fits(text string, limit int) bool {
	switch {
	case len(text) <= limit:
		return true
	case len(text) > 4*limit:
		return false
	}
	return utf8.RuneCountInString(text) <= limit
}

// extractValid extracts from a text of more than budget runes and returns
// valid UTF-8 (see Extract).
func extractValid(text string, budget int) string {
	out := extractUnits(text, budget)
	if !utf8.ValidString(out) {
		clean := strings.ToValidUTF8(text, "\uFFFD")
		if fits(clean, budget) {
			return clean
		}
		out = extractUnits(clean, budget)
	}
	return out
}

// extractUnits chooses and joins the units of a text longer than budget
// (at least 1). Invalid UTF-8 in text may reach the result.
func extractUnits(text string, budget int) string {
	sc := scratchPool.Get().(*scratch)
	defer sc.release()
	units := split(text, sc.units[:0])
	sc.units = units
	classifyAll(text, units)
	setSeps(text, units)
	score(units, budget)
	sc.order = candidates(units, sc.order[:0])
	sc.sel = slices.Grow(sc.sel[:0], len(units))[:len(units)]
	clear(sc.sel)
	sc.taken = pick(units, sc.order, sc.sel, budget, sc.taken[:0])
	if len(sc.taken) == 0 {
		return fallback(text, units, sc.order, budget)
	}
	return join(text, units, sc.sel)
}

// scratch holds the working slices of one extraction. They are reused
// through scratchPool; nothing in them outlives the call, so reuse cannot
// change a result.
type scratch struct {
	units []unit
	order []int
	sel   []bool
	taken []int
}

var scratchPool = sync.Pool{New: func() any { return new(scratch) }}

// release returns sc to the pool unless it grew large on a huge text.
func (sc *scratch) release() {
	if cap(sc.units) <= 4096 {
		scratchPool.Put(sc)
	}
}

// score gives every unit its score, tier*10000 + cue weight*1000 + bonus:
//
//   - Three key units are tried first, in this order: the lead (the best
//     decisive unit), the task (the first unit that is not filler, code or
//     a list header; it usually states what was asked) and the detail (the
//     last plain unit that is not a question and is at most half the budget
//     long, informative ones preferred: what was found). Together they say
//     what was asked, found and decided, and they keep texts that reach the
//     same decision apart (see TestDistinctness).
//   - Then decisive units by cue weight (conclusions 3, plans 2, inner cues
//     1), later ones first (bonus up to 500).
//   - Then plain units, informative ones (digits, code, paths) first (+200),
//     later ones first (bonus up to 300), questions last.
//   - Then code fences, later ones first. Filler scores 0 and is left out.
func score(units []unit, budget int) {
	last := max(len(units)-1, 1)
	lead, task, detail := -1, -1, -1
	for i := range units {
		u := &units[i]
		switch {
		case u.kind == KindFiller, u.header:
			continue // headers are taken only with their items (see pick)
		case u.kind == KindCode:
			u.score = tierCode*10000 + 300*i/last
			continue
		case u.kind == KindDecisive:
			u.score = tierDecisive*10000 + int(u.cue)*1000 + 500*i/last
			if lead < 0 || u.score > units[lead].score {
				lead = i
			}
		default:
			u.score = tierPlain * 10000
			if u.question {
				break
			}
			u.score += 300 * i / last
			if u.info {
				u.score += 200
			}
			if u.runes <= budget/2 && (detail < 0 || u.info || !units[detail].info) {
				detail = i
			}
		}
		if task < 0 {
			task = i
		}
	}
	if lead >= 0 {
		units[lead].score = tierLead * 10000
	}
	if task >= 0 && task != lead {
		units[task].score = tierKey*10000 + 1
	}
	if detail >= 0 && detail != task {
		units[detail].score = tierKey * 10000
	}
}

// candidates appends to order the indices of units that are neither filler
// nor list headers, best score first, ties by position. It sorts packed
// keys (score, then inverted index) to avoid a comparison function.
func candidates(units []unit, order []int) []int {
	keys := make([]uint64, 0, 64)
	for i := range units {
		if units[i].kind != KindFiller && !units[i].header {
			keys = append(keys, uint64(units[i].score)<<32|uint64(^uint32(i)))
		}
	}
	slices.Sort(keys)
	for k := len(keys) - 1; k >= 0; k-- {
		order = append(order, int(^uint32(keys[k])))
	}
	return order
}

// pick marks in sel the units taken greedily in order while the joined
// length, separators included, stays within budget. A list's header is tried
// right after the first of its items is taken. It returns the indices
// taken, ascending, appended to taken.
func pick(units []unit, order []int, sel []bool, budget int, taken []int) []int {
	p := picker{units: units, sel: sel, budget: budget, taken: taken}
	for _, i := range order {
		if !p.try(i) || !units[i].list {
			continue
		}
		h := i - 1
		for h >= 0 && units[h].list && !units[h].header {
			h--
		}
		if h >= 0 && units[h].header && !sel[h] {
			p.try(h)
		}
	}
	return p.taken
}

// picker selects units within a budget, keeping the exact joined length.
type picker struct {
	units  []unit
	sel    []bool
	taken  []int // selected indices, ascending
	total  int   // runes of the joined selection
	budget int
}

// try selects unit i if the joined selection still fits the budget and
// reports whether it did.
func (p *picker) try(i int) bool {
	pos, _ := slices.BinarySearch(p.taken, i)
	t := p.total + p.units[i].runes
	switch n := len(p.taken); {
	case pos > 0 && pos < n:
		a, b := p.taken[pos-1], p.taken[pos]
		t += sepLen(p.units, a, i) + sepLen(p.units, i, b) - sepLen(p.units, a, b)
	case pos > 0:
		t += sepLen(p.units, p.taken[pos-1], i)
	case pos < n:
		t += sepLen(p.units, i, p.taken[pos])
	}
	if t > p.budget {
		return false
	}
	p.sel[i], p.total = true, t
	p.taken = slices.Insert(p.taken, pos, i)
	return true
}

// setSeps records for each unit its line and the separator written before
// it when the unit written before it is its neighbour in text: " " if white
// space separates them, "" if nothing does (Chinese).
func setSeps(text string, units []unit) {
	line := 0
	for i := 1; i < len(units); i++ {
		gap := text[units[i-1].end:units[i].start]
		switch {
		case strings.IndexByte(gap, '\n') >= 0:
			line++
			units[i].sep = "\n"
		case gap != "":
			units[i].sep = " "
		}
		units[i].line = line
	}
}

// sep returns what join writes between units a and b (a before b): "\n"
// after a code fence (nothing may follow a closing fence on its line) or
// when a line break lies between them in text, else b's own separator.
func sep(units []unit, a, b int) string {
	if units[a].kind == KindCode || units[a].line != units[b].line {
		return "\n"
	}
	return units[b].sep
}

func sepLen(units []unit, a, b int) int { return len(sep(units, a, b)) }

// join writes the selected units in text order with their separators.
func join(text string, units []unit, sel []bool) string {
	var b strings.Builder
	n := 0
	for i := range units {
		if sel[i] {
			n += units[i].end - units[i].start + 1
		}
	}
	b.Grow(n)
	prev := -1
	for i := range units {
		if !sel[i] {
			continue
		}
		if prev >= 0 {
			b.WriteString(sep(units, prev, i))
		}
		b.WriteString(text[units[i].start:units[i].end])
		prev = i
	}
	return b.String()
}

// fallback cuts one unit when none fits whole: the best candidate that is
// not code, else the last filler unit. With neither, text is returned.
func fallback(text string, units []unit, order []int, budget int) string {
	for _, i := range order {
		if units[i].kind != KindCode {
			return cut(text[units[i].start:units[i].end], budget)
		}
	}
	for i := len(units) - 1; i >= 0; i-- {
		if units[i].kind == KindFiller {
			return cut(text[units[i].start:units[i].end], budget)
		}
	}
	return text
}

// cut returns the longest prefix of s of at most limit runes that ends at a
// word boundary, without trailing white space. A word boundary is before a
// white space rune, or any rune boundary with a CJK rune on either side. If
// the first word alone is longer than limit, s is cut after limit runes, moved
// back before any combining marks so that a character is not split from
// its accents. s must be non-empty, trimmed and valid; limit at least 1.
func cut(s string, limit int) string {
	best, count, prevCJK := -1, 0, false
	for i, r := range s {
		cjk := isCJK(r)
		if i > 0 && (unicode.IsSpace(r) || cjk || prevCJK) {
			best = i
		}
		if count == limit { // s[:i] holds exactly limit runes
			if best > 0 {
				return s[:trimRightSpace(s, 0, best)]
			}
			return s[:backOffMarks(s, i)]
		}
		count++
		prevCJK = cjk
	}
	return s // fits
}

// backOffMarks moves the cut at i back while it would split a character
// from what joins it (combining marks, variation selectors, a zero-width
// joiner on either side). If the whole prefix is one such cluster, it only
// drops the joiners at the end of s[:i], never going to 0.
func backOffMarks(s string, i int) int {
	for j := i; j > 0; {
		r, _ := utf8.DecodeRuneInString(s[j:])
		p, size := utf8.DecodeLastRuneInString(s[:j])
		if !joins(r) && p != '\u200d' {
			return j
		}
		j -= size
	}
	for i > 0 {
		p, size := utf8.DecodeLastRuneInString(s[:i])
		if !joins(p) || i == size {
			break
		}
		i -= size
	}
	return i
}

func joins(r rune) bool {
	return unicode.Is(unicode.M, r) || r == '\u200d' || (r >= 0xFE00 && r <= 0xFE0F)
}

// validRuneCount counts the runes of valid UTF-8: its bytes minus its
// continuation bytes (10xxxxxx), eight bytes at a time.
func validRuneCount(s string) int {
	const hi = 0x8080808080808080
	cont, i := 0, 0
	for ; i+8 <= len(s); i += 8 {
		b := s[i : i+8]
		w := uint64(b[0]) | uint64(b[1])<<8 | uint64(b[2])<<16 | uint64(b[3])<<24 |
			uint64(b[4])<<32 | uint64(b[5])<<40 | uint64(b[6])<<48 | uint64(b[7])<<56
		cont += bits.OnesCount64(w & ^(w << 1) & hi)
	}
	for ; i < len(s); i++ {
		if s[i]&0xC0 == 0x80 {
			cont++
		}
	}
	return len(s) - cont
}
