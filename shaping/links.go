package shaping

import (
	"strings"
	"unicode"
	"unicode/utf8"
)

// Dependencies between units, so that what extraction keeps reads on its
// own (issue 12). A unit may be kept only with what it needs:
//
//   - a unit opening with an anaphor ("This", "It", "But", "这"; see
//     anaphorAt) needs its antecedent, the nearest earlier unit that is not
//     filler;
//   - a unit ending in ":" needs its follower, the first unit that can be
//     kept on the line after it (a whole fence, or a list item that brings
//     its list); with no such unit it is never kept;
//   - an item of a numbered list needs the item before it;
//   - a list item of a short list (one that fits half the budget) needs every
//     other item of its list: short lists are kept whole or not at all.
//
// A markdown heading ("**Checking the config**", "## Plan") needs its
// follower like a unit ending in ":".
//
// Some units are never kept: filler and bare filler ("So.", "Yes.", "Let's
// see:"), scraps (at most three visible characters, "0.", "So:", or fewer
// than minWords words, "So [8, 0].", "Like 5.", except list items such
// as "- add(2, 3)" and answers such as "Response: Grok"), noisy units
// (derivations and counts, "Count: C1 r2 e3 ...", see isNoisy), and code
// or data lines outside fences (kept neither whole nor as scraps; fences
// stay atomic candidates).
const (
	noUnit     = -1 // no dependency
	impossible = -2 // a dependency that cannot be met
)

// link sets the line, separator, lead, keep and dependency fields of the
// classified units of text.
func link(text string, units []unit) {
	setSeps(text, units)
	last := noUnit // the nearest unit so far that is not filler
	for i := range units {
		u := &units[i]
		s := text[u.start:u.end]
		u.ante, u.need, u.gs = noUnit, noUnit, noUnit
		words := 0
		u.bare = u.kind == KindFiller || isBareFiller(s)
		if u.kind != KindCode {
			if p := leadFiller(s); p > 0 && p < len(s) {
				u.strip = int32(p)
				u.runes = utf8.RuneCountInString(s[p:])
				u.capital = s[p] >= 'a' && s[p] <= 'z'
			}
			if anaphorAt(s, u.body) > 0 {
				u.ante = int32(last)
			}
			if endsWithColon(trimEmphasis(s)) || isHeading(s) {
				u.need = impossible // resolved below
			}
			u.noisy = isNoisy(s)
			words = countWords(s[u.strip:], extraWords)
			u.short = words < extraWords
			u.generic = u.kind == KindDecisive && isGeneric(s[u.body:])
		}
		u.keep = !u.bare && !u.data && (u.kind == KindCode ||
			!u.noisy && hasVisible(s[u.strip:], 4) && (u.list || words >= minWords || hasAnswer(s)))
		if !u.bare {
			last = i
		}
	}
	for i := range units {
		if units[i].need == impossible {
			units[i].need = int32(follower(units, i))
		}
		units[i].prev = noUnit
		if i > 0 && units[i].list && numbered(text[units[i].start:units[i].end]) {
			units[i].prev = int32(prevItem(text, units, i))
		}
	}
}

// numbered reports whether list item s starts with a number ("2. ", "3) ").
func numbered(s string) bool { return s != "" && isDigit(s[0]) }

// prevItem returns the first unit of the numbered list item before
// units[i] when that item is on the line just before (a numbered item needs
// the items before it: "2." does not read without "1."), or noUnit (a
// nested bullet or a paragraph in between ends the chain).
func prevItem(text string, units []unit, i int) int {
	j := i - 1
	for j > 0 && units[j].line == units[j-1].line {
		j--
	}
	if units[j].list && units[j].line == units[i].line-1 && numbered(text[units[j].start:units[j].end]) {
		return j
	}
	return noUnit
}

// follower returns the first unit that can be kept on the line of the unit
// after units[i] (noUnit when units[i] is the last, impossible when that
// line has none).
func follower(units []unit, i int) int {
	if i+1 >= len(units) {
		return noUnit
	}
	line := units[i+1].line
	for k := i + 1; k < len(units) && units[k].line == line; k++ {
		if units[k].keep {
			return k
		}
	}
	return impossible
}

// groupLists marks the short lists: runs of lines that each start with a
// list item, with at least two items, whose units joined fit in half the
// budget (a longer list would leave no room for the rest).
// Every unit of such a list gets the list's range [gs, ge).
func groupLists(units []unit, budget int) {
	for a := 0; a < len(units); {
		if !units[a].list {
			a++
			continue
		}
		b, items, size := a, 0, -1
		for b < len(units) && (b == a || units[b].line == units[b-1].line || units[b].list) {
			if units[b].list {
				items++
			}
			size += units[b].runes + 1
			b++
		}
		if items >= 2 && size <= budget/2 {
			for k := a; k < b; k++ {
				units[k].gs, units[k].ge = int32(a), int32(b)
			}
		}
		a = b
	}
}

// leadFiller returns the length of the filler that opens s ("Hmm, ",
// "Okay, so ", "嗯，"), punctuation and space after it included, or 0.
// Extraction writes a kept unit without it. The "let me think" family
// is not stripped: what follows it ("about the cache") needs it.
func leadFiller(s string) int {
	p := 0
	for {
		n := fillerAt(s[p:])
		if n == 0 || keepsFiller(s[p:]) {
			break
		}
		p = skipFillerPunct(s, p+n)
	}
	if p > 0 && hasWordFold(s[p:], "so") {
		p = skipFillerPunct(s, p+2)
	}
	return p
}

// keepsFiller reports whether the filler opening s is one whose sentence
// needs it ("Let me think about X", "让我看看日志").
func keepsFiller(s string) bool {
	return hasPrefixFold(s, "let me") || strings.HasPrefix(s, "让我") || strings.HasPrefix(s, "我想想")
}

// minWords is how many words (see hasWords) a unit needs to be kept: fewer
// do not stand on their own ("So [8, 0].", "Like 5.", "So returns {a:1}.").
// extraWords is how many a unit needs to be taken for itself rather than as
// a key unit or what another unit needs (see score): "So code works." and
// "The argument is 0." say too little to fill the rest of the budget.
const (
	minWords   = 3
	extraWords = 4
)

// countWords counts the words of s up to max: runs of two or more
// letters, or CJK characters (each counts: Chinese packs a word in one or
// two of them).
func countWords(s string, max int) int {
	words, run := 0, 0
	for i := 0; i < len(s) && words < max; {
		c := s[i]
		if c < utf8.RuneSelf {
			if asciiClass[c] == asciiLetter {
				if run++; run == 2 {
					words++
				}
			} else {
				run = 0
			}
			i++
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		i += size
		switch {
		case isCJK(r):
			words++
			run = 0
		case unicode.IsLetter(r):
			if run++; run == 2 {
				words++
			}
		default:
			run = 0
		}
	}
	return words
}

// hasVisible reports whether s has at least n visible (non-space) runes.
func hasVisible(s string, n int) bool {
	for _, r := range s {
		if !unicode.IsSpace(r) {
			if n--; n == 0 {
				return true
			}
		}
	}
	return false
}

// isHeading reports whether unit s is a markdown heading: a line in bold
// ("**Checking the config**") or starting with "#" and a space.
func isHeading(s string) bool {
	if len(s) > 4 && strings.HasPrefix(s, "**") && strings.HasSuffix(s, "**") {
		return !strings.Contains(s[2:len(s)-2], "**")
	}
	h := 0
	for h < len(s) && h < 6 && s[h] == '#' {
		h++
	}
	return h > 0 && h < len(s) && s[h] == ' '
}

// isNoisy reports whether s, at least 40 bytes long, is less than 60%
// letters: a derivation or a count ("Count: C1 r2 e3 ...", "-5 % 256 is
// 251 (since ...)"), which extraction does not keep.
func isNoisy(s string) bool {
	if len(s) < 40 {
		return false
	}
	letters, vis := letterCount(s)
	return 10*letters < 6*vis
}
