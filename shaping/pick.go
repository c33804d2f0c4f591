package shaping

import (
	"slices"
	"strings"
)

// candidates appends to order the indices of the units that may be kept
// (see link) and have a score, best score first, ties by position. It sorts packed keys
// (score, then inverted index) to avoid a comparison function.
func candidates(units []unit, order []int) []int {
	keys := make([]uint64, 0, 64)
	for i := range units {
		if units[i].keep && units[i].score > 0 {
			keys = append(keys, uint64(units[i].score)<<32|uint64(^uint32(i)))
		}
	}
	slices.Sort(keys)
	for k := len(keys) - 1; k >= 0; k-- {
		order = append(order, int(^uint32(keys[k])))
	}
	return order
}

// pick marks in sel the units taken, in order: each candidate together
// with everything it needs (its closure, see link), all or nothing, while
// the joined length, separators included, stays within budget. A unit whose
// text is already selected (models repeat themselves) is skipped. It leaves
// the indices taken, ascending, in sc.taken and returns the joined length.
func pick(text string, units []unit, order []int, sel []bool, budget int, sc *scratch) int {
	p := picker{units: units, sel: sel, budget: budget, taken: sc.taken[:0]}
	c := closer{units: units, sel: sel, mark: slices.Grow(sc.mark[:0], len(units))[:len(units)],
		stack: sc.stack, out: sc.need}
	clear(c.mark)
	for _, i := range order {
		if !sel[i] && !p.repeats(text, i) && c.close(i, budget-p.total) {
			p.tryAll(c.out)
		}
	}
	sc.mark, sc.taken, sc.stack, sc.need = c.mark, p.taken, c.stack, c.out
	return p.total
}

// closer computes closures: a unit and every unit it needs (its
// antecedent, its follower, the rest of its short list, and theirs).
type closer struct {
	units      []unit
	sel        []bool
	mark       []int32 // gen for the units visited by the current close
	gen        int32
	stack, out []int
}

// close sets c.out to unit i and every unit it needs that is not yet
// selected, and reports false when one of them may not be kept or when
// their runes alone exceed room.
func (c *closer) close(i, room int) bool {
	c.gen++
	c.out, c.stack = c.out[:0], append(c.stack[:0], i)
	cost := 0
	for len(c.stack) > 0 {
		x := c.stack[len(c.stack)-1]
		c.stack = c.stack[:len(c.stack)-1]
		switch {
		case x == noUnit:
			continue
		case x == impossible:
			return false
		case c.sel[x] || c.mark[x] == c.gen:
			continue
		}
		u := &c.units[x]
		if !u.keep {
			return false
		}
		c.mark[x] = c.gen
		if cost += u.runes; cost > room {
			return false
		}
		c.out = append(c.out, x)
		c.stack = append(c.stack, int(u.ante), int(u.need), int(u.prev))
		if u.gs != noUnit {
			for k := int(u.gs); k < int(u.ge); k++ {
				if !c.units[k].bare {
					c.stack = append(c.stack, k)
				}
			}
		}
	}
	return true
}

// picker selects units within a budget, keeping the exact joined length.
type picker struct {
	units  []unit
	sel    []bool
	taken  []int // selected indices, ascending
	total  int   // runes of the joined selection
	budget int
}

// repeats reports whether a selected unit has the same text as unit i.
func (p *picker) repeats(text string, i int) bool {
	u := &p.units[i]
	s := text[u.start+int(u.strip) : u.end]
	for _, j := range p.taken {
		if v := &p.units[j]; v.runes == u.runes && text[v.start+int(v.strip):v.end] == s {
			return true
		}
	}
	return false
}

// tryAll selects all the units of c or, if together they do not fit,
// none, and reports which.
func (p *picker) tryAll(c []int) bool {
	total, n := p.total, 0
	for _, i := range c {
		if !p.try(i) {
			for _, j := range c[:n] {
				p.remove(j)
			}
			p.total = total
			return false
		}
		n++
	}
	return true
}

// try selects unit i if the joined selection still fits the budget and
// reports whether it did. Adding a unit never shortens the selection, so
// a set that fits can be added one unit at a time.
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

// remove unselects unit i; the caller restores total.
func (p *picker) remove(i int) {
	pos, _ := slices.BinarySearch(p.taken, i)
	p.taken = slices.Delete(p.taken, pos, pos+1)
	p.sel[i] = false
}

// setSeps records for each unit its line, its paragraph (a blank line
// starts one) and the separator written before
// it when the unit written before it is its neighbour in text: " " if white
// space separates them, "" if nothing does (Chinese).
func setSeps(text string, units []unit) {
	line, para := 0, int32(0)
	for i := 1; i < len(units); i++ {
		gap := text[units[i-1].end:units[i].start]
		switch {
		case strings.IndexByte(gap, '\n') >= 0:
			line++
			units[i].sep = "\n"
			if strings.Count(gap, "\n") > 1 {
				para++
			}
		case gap != "":
			units[i].sep = " "
		}
		units[i].line, units[i].para = line, para
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

// join writes the selected units in text order with their separators,
// each without its leading filler (see leadFiller).
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
		writeUnit(&b, text, &units[i])
		prev = i
	}
	return b.String()
}

// writeUnit writes the text of u without its leading filler, its first
// letter in upper case when the filler left it in lower case.
func writeUnit(b *strings.Builder, text string, u *unit) {
	s := text[u.start+int(u.strip) : u.end]
	if u.capital {
		b.WriteByte(s[0] - 'a' + 'A')
		s = s[1:]
	}
	b.WriteString(s)
}

// unitText returns the text join writes for u.
func unitText(text string, u *unit) string {
	if !u.capital {
		return text[u.start+int(u.strip) : u.end]
	}
	var b strings.Builder
	writeUnit(&b, text, u)
	return b.String()
}
