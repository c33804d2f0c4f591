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
// Shaping markers ("[reasoning extract: N chars omitted]", see
// CountMarkers) are removed first. A text that then has at most MaxChars
// runes is returned as it is: the budget is what makes shaping worth doing,
// and it makes Extract idempotent. Otherwise the units of Sentences are
// classified, linked (a unit is kept only with what it needs: see link) and
// scored (see score), and taken greedily, best first, each with everything
// it needs, while the total, separators included, stays within MaxChars;
// they are then written in text order, each without its leading filler
// ("Hmm, ", "Okay, so ", "嗯，"). Between two units written one after the
// other goes "\n" if a line break separates them in text (or the first is a
// code fence), else the white space before the second collapsed to " ", or
// nothing if there was none (Chinese).
//
// If no unit fits whole, the best unit that needs nothing else and is not
// code (or any unit that is not code, or, when all are filler, the last
// one) is cut: at the last word boundary (white space, or any rune
// boundary next to a CJK character) that keeps at most MaxChars runes; only
// a first word longer than MaxChars is cut inside, at a rune boundary not
// before a combining mark. Code is never cut. A text with no unit other
// than code that does not fit, or with no unit at all (only white space),
// is returned as it is, over MaxChars.
//
// Invalid UTF-8 never reaches the result: a text that fits is returned
// with invalid sequences replaced by U+FFFD; otherwise, if the units
// extracted from the text as it is hold invalid UTF-8, extraction runs again
// on the text with invalid sequences replaced. The result is never empty
// for a non-empty text.
func Extract(text string, o Options) string {
	o = o.effective()
	clean, _ := stripMarkers(text)
	if fits(clean, o.MaxChars) {
		if strings.TrimSpace(clean) == "" {
			clean = text // nothing but a marker: keep it rather than return nothing
		}
		return strings.ToValidUTF8(clean, "\uFFFD")
	}
	return extractValid(clean, o.MaxChars)
}

// Shape applies o.Op to one reasoning text and reports whether the result
// differs from text. OpKeep returns text; OpDrop returns "" (changed unless
// text was already empty). OpExtract returns Extract's result, after the
// marker when o.Marker is true (the marker counts toward MaxChars).
//
// Short-block guard: a text of at most MaxChars runes is returned
// unchanged, except that without o.Marker the shaping markers it carries
// are removed (see CountMarkers; a text that is nothing but markers stays
// as it is); a longer text whose result would not be strictly shorter is
// returned unchanged. A changed result is within MaxChars and carries no
// marker it did not add, so Shape is idempotent: Shape(Shape(x)) ==
// Shape(x).
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
	if o.Marker && fits(text, o.MaxChars) {
		return text, false // a result with its marker must stay as it is
	}
	clean, found := stripMarkers(text)
	if !o.Marker && fits(clean, o.MaxChars) {
		if found == 0 || strings.TrimSpace(clean) == "" {
			return text, false
		}
		return strings.ToValidUTF8(clean, "\uFFFD"), true
	}
	budget, mark := o.MaxChars, false
	n := 0 // runes in clean, counted only for the marker
	if o.Marker {
		n = utf8.RuneCountInString(clean)
		if o.MaxChars-markerRunes(n) >= 1 {
			budget, mark = o.MaxChars-markerRunes(n), true
		}
	}
	if fits(clean, budget) { // only with the marker: text was over MaxChars
		out = strings.ToValidUTF8(clean, "\uFFFD")
	} else {
		out = extractValid(clean, budget)
	}
	m := utf8.RuneCountInString(out)
	if m > budget { // nothing to cut: only white space or code too large
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
	link(text, units)
	groupLists(units, budget)
	k := score(units, budget)
	sc.order = candidates(units, sc.order[:0])
	sc.sel = slices.Grow(sc.sel[:0], len(units))[:len(units)]
	clear(sc.sel)
	total := pick(text, units, sc.order, sc.sel, budget, sc)
	if len(sc.taken) == 0 {
		return fallback(text, units, sc.order, budget)
	}
	switch k.reorder(units, sc.sel, budget) {
	case taskFirst: // the decision crowded out the task: keep the longer
		first := join(text, units, sc.sel)
		sc.order = candidates(units, sc.order[:0])
		clear(sc.sel)
		if pick(text, units, sc.order, sc.sel, budget, sc) <= total && k.decisive <= fewDecisions {
			return first
		}
	case taskLast: // a long task crowded out the decision: keep the decision
		first := join(text, units, sc.sel)
		sc.order = candidates(units, sc.order[:0])
		clear(sc.sel)
		if pick(text, units, sc.order, sc.sel, budget, sc); !sc.sel[k.lead] {
			return first
		}
	}
	return join(text, units, sc.sel)
}

// keys are the three units score tries first (-1 when absent), and how
// many decisive units may be kept.
type keys struct{ lead, task, detail, decisive int }

// fewDecisions is how many decisive units a text may hold for its lead to
// be taken as the decision of the text, worth more than a long task; in a
// long exploration the strongest conclusion is one of many.
const fewDecisions = 5

// The other orders of the key units that reorder may ask for.
const (
	sameOrder = iota
	taskFirst // the task before the lead
	taskLast  // the task after the lead and the detail
)

// reorder tells whether the lead and the task crowded each other out of
// the selection sel and, if so, rescores the task for the other order. A
// long task (more than half the budget) gives way to the decision of a text
// with few decisions: it goes last of the three when it left the lead out,
// and is not tried first when the lead left it out. Otherwise a task the
// lead left out is tried first; extractUnits keeps that selection in a text
// of many decisions (where the task is the anchor), else the longer one.
func (k keys) reorder(units []unit, sel []bool, budget int) int {
	if k.task < 0 || k.lead < 0 {
		return sameOrder
	}
	decision := units[k.task].runes > budget/2 && k.decisive <= fewDecisions
	switch {
	case !sel[k.task] && !decision:
		units[k.task].score = tierLead*10000 + 1
		return taskFirst
	case sel[k.task] && !sel[k.lead] && decision:
		units[k.task].score = tierKey*10000 - 1
		return taskLast
	}
	return sameOrder
}

// scratch holds the working slices of one extraction. They are reused
// through scratchPool; nothing in them outlives the call, so reuse cannot
// change a result.
type scratch struct {
	units       []unit
	order       []int
	sel         []bool
	taken       []int
	mark        []int32
	stack, need []int
}

var scratchPool = sync.Pool{New: func() any { return new(scratch) }}

// release returns sc to the pool unless it grew large on a huge text.
func (sc *scratch) release() {
	if cap(sc.units) <= 4096 {
		scratchPool.Put(sc)
	}
}

// score gives every unit that may be kept its score, tier*10000 + weight
// *1000 + bonus, and returns the key units (-1 where none):
//
//   - Three key units are tried first, in this order: the lead (the best
//     decisive unit that leaves room for the task, or at least half the
//     budget; the best of all if none does), the task (the first unit
//     that is not code; it usually states what was asked) and the detail
//     (the last plain unit of at least extraWords words that is not a
//     question and is at most half the budget long, informative ones
//     preferred: what was found). Together
//     they say what was asked, found and decided, and they keep texts that
//     reach the same decision apart (see TestDistinctness).
//   - Then decisive units by weight: conclusions 3, plans 2, inner cues 1,
//     and a conclusion that names nothing ("So the code should work.", see
//     isGeneric) 0; those of the final decisive paragraph (the last
//     paragraph holding a decisive unit that names something: the final
//     plan) +3, later ones first (bonus up to 500).
//   - Then plain units, informative ones (digits, code, paths) first (+200),
//     later ones first (bonus up to 300), questions (decisive or not) last.
//   - Then code fences, later ones first. A question, or a unit of fewer
//     than extraWords words, is not tried for itself unless it is a key
//     unit.
func score(units []unit, budget int) keys {
	last, final, room := max(len(units)-1, 1), finalPara(units), leadRoom(units, budget)
	k, best := keys{-1, -1, -1, 0}, -1
	for i := range units {
		u := &units[i]
		if !u.keep {
			continue
		}
		baseScore(u, i, last, final)
		switch {
		case u.kind == KindCode:
			continue
		case u.question:
		case u.kind == KindDecisive:
			if u.runes <= room && (k.lead < 0 || u.score > units[k.lead].score) {
				k.lead = i
			}
			if best < 0 || u.score > units[best].score {
				best = i
			}
			k.decisive++
		case u.runes <= budget/2 && !u.short && (k.detail < 0 || u.info || !units[k.detail].info):
			k.detail = i
		}
		if k.task < 0 {
			k.task = i
		}
	}
	if k.lead < 0 {
		k.lead = best
	}
	for i := range units {
		if u := &units[i]; u.kind != KindCode && (u.short || u.question) {
			u.score = 0 // taken only as a key unit or as needed
		}
	}
	if k.lead >= 0 {
		units[k.lead].score = tierLead * 10000
	}
	if k.task >= 0 && k.task != k.lead {
		units[k.task].score = tierKey*10000 + 1
	}
	if k.detail >= 0 && k.detail != k.task {
		units[k.detail].score = tierKey * 10000
	}
	return k
}

// baseScore sets the score of unit u, the i-th of last+1, before the key
// units are chosen (see score); final is the final decisive paragraph.
func baseScore(u *unit, i, last int, final int32) {
	switch {
	case u.kind == KindCode:
		u.score = tierCode*10000 + 300*i/last
	case u.question:
		u.score = tierPlain * 10000
	case u.kind == KindDecisive:
		w := int(u.cue)
		if u.generic {
			w = 0
		} else if u.para == final {
			w += 3
		}
		u.score = tierDecisive*10000 + w*1000 + 500*i/last
	default:
		u.score = tierPlain*10000 + 300*i/last
		if u.info {
			u.score += 200
		}
	}
}

// leadRoom returns the most runes the lead may have: what the task (the
// first unit that may be kept and is not code) leaves of the budget, and at
// least half of it.
func leadRoom(units []unit, budget int) int {
	room := budget / 2
	for i := range units {
		if u := &units[i]; u.keep && u.kind != KindCode {
			return max(room, budget-u.runes-1)
		}
	}
	return room
}

// finalPara returns the paragraph of the last decisive unit that may be
// kept and names something, or -1.
func finalPara(units []unit) int32 {
	for i := len(units) - 1; i >= 0; i-- {
		if u := &units[i]; u.keep && u.kind == KindDecisive && !u.generic {
			return u.para
		}
	}
	return -1
}

// fallback cuts one unit when no closure fits whole: the best candidate
// that needs nothing (no antecedent, no follower), else the best that is
// not code, else the last filler unit. With none, text is returned.
func fallback(text string, units []unit, order []int, budget int) string {
	for _, i := range order {
		if u := &units[i]; u.kind != KindCode && u.ante == noUnit && u.need == noUnit {
			return cutClean(unitText(text, u), budget)
		}
	}
	for _, i := range order {
		if units[i].kind != KindCode {
			return cutClean(unitText(text, &units[i]), budget)
		}
	}
	for i := len(units) - 1; i >= 0; i-- {
		if units[i].bare && units[i].kind != KindCode {
			return cutClean(unitText(text, &units[i]), budget)
		}
	}
	return text
}

// cutClean is cut that does not end on a colon ("Let's craft:"): it backs
// off by words while the cut ends with one, unless that leaves nothing.
func cutClean(s string, limit int) string {
	out := cut(s, limit)
	for n := 0; n < 8 && len(out) < len(s) && endsWithColon(out); n++ {
		shorter := cut(out, utf8.RuneCountInString(out)-1)
		if shorter == "" || shorter == out {
			break
		}
		out = shorter
	}
	return out
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
