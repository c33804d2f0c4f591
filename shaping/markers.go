package shaping

import "strings"

// The marker family. A shaping marker is "[reasoning extract" (any case)
// followed by at most maxMarkerTail bytes up to the closing "]" on the same
// line: "[reasoning extract: 242 chars omitted]", as Options.Marker writes
// it and as a model that read it writes it back, and its variants
// ("[Reasoning extract: 1,024 characters omitted]").
const (
	markerHead    = "[reasoning extract"
	maxMarkerTail = 64
)

// CountMarkers returns how many shaping markers text holds: pollution from
// an earlier shaper with Options.Marker on, or from a model that learned to
// write the marker (see doc.go).
func CountMarkers(text string) int {
	n := 0
	for p := 0; ; {
		a, b := nextMarker(text, p)
		if a < 0 {
			return n
		}
		n++
		p = b
	}
}

// stripMarkers returns text without its shaping markers (and the blanks
// right after each) and how many it removed. Without a marker it returns
// text itself, without copying.
func stripMarkers(text string) (string, int) {
	a, b := nextMarker(text, 0)
	if a < 0 {
		return text, 0
	}
	var sb strings.Builder
	sb.Grow(len(text))
	n, p := 0, 0
	for a >= 0 {
		sb.WriteString(text[p:a])
		n++
		p = b
		a, b = nextMarker(text, p)
	}
	sb.WriteString(text[p:])
	return sb.String(), n
}

// nextMarker finds the first marker at or after p and returns its start and
// its end, blanks after it included; a is -1 when there is none.
func nextMarker(text string, p int) (a, b int) {
	for p < len(text) {
		i := strings.IndexByte(text[p:], '[')
		if i < 0 {
			return -1, 0
		}
		a = p + i
		p = a + 1
		if !hasPrefixFold(text[a:], markerHead) {
			continue
		}
		rest := text[a+len(markerHead):]
		end := -1
		for j := 0; j < len(rest) && j <= maxMarkerTail; j++ {
			if c := rest[j]; c == ']' {
				end = j
				break
			} else if c == '\n' || c == '[' {
				break
			}
		}
		if end < 0 {
			continue
		}
		b = a + len(markerHead) + end + 1
		for b < len(text) && (text[b] == ' ' || text[b] == '\t') {
			b++
		}
		return a, b
	}
	return -1, 0
}
