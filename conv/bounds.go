package conv

import (
	"slices"
	"strings"

	"github.com/shaperproxy/shaperproxy/internal/runecut"
)

// MaxMessages and MaxToolCalls bound what the view of one request holds:
// past either, ParseRequest fails with ErrNotChat and the proxy forwards
// the body untouched. A view takes about 200 bytes a message and 70 a
// tool call whatever the element's own size, so a body of tiny elements
// ("messages":[0,0,…]) would otherwise make a view a hundred times the
// body's size. No agent's history comes near either (a long one has a
// few thousand messages; the guard's incremental fold is tested on
// 40,000). At the bounds a view takes about 70 MB to build, whatever the
// body (a 64 MiB body of "0," made 7 GB).
const (
	MaxMessages  = 1 << 16
	MaxToolCalls = 1 << 16 // in all of a request's messages
)

// maxKeysChecked bounds the keys of one object checked for a repeat: an
// object with more counts as repeating one (DuplicateKeys: the features
// that edit by path leave such a body alone; no chat object has that many
// keys).
const maxKeysChecked = 4096

// keySet finds a key an object repeats, in time linear in its keys: a
// scan of the first few (a message has four or five), a map past them.
// (A scan of all of them made an object of 40,000 keys take 1.7 s.)
type keySet struct {
	few  [16]string
	n    int
	many map[string]struct{}
}

// add adds k and reports whether the object repeats a key: k was added
// before, or the object has more than maxKeysChecked keys.
func (s *keySet) add(k string) bool {
	if s.many == nil {
		if slices.Contains(s.few[:s.n], k) {
			return true
		}
		if s.n < len(s.few) {
			s.few[s.n] = k
			s.n++
			return false
		}
		s.many = make(map[string]struct{}, 2*len(s.few))
		for _, f := range s.few {
			s.many[f] = struct{}{}
		}
	}
	if _, ok := s.many[k]; ok || len(s.many) >= maxKeysChecked {
		return true
	}
	s.many[k] = struct{}{}
	return false
}

// MaxModelBytes bounds the model name a call keeps.
const MaxModelBytes = 256

// OwnModel returns a copy of the model name s, cut to MaxModelBytes bytes
// at a character's start: the model keys long-lived caches (profiles,
// metric children, the meter's sets), so it must neither share the
// memory of a body (a string of it keeps all of it alive) nor be as long
// as a client or an upstream makes it. No model is named that long; the
// body sent upstream keeps the name whole.
func OwnModel(s string) string { return strings.Clone(runecut.Prefix(s, MaxModelBytes)) }
