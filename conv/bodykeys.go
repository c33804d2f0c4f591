package conv

import (
	"math/rand/v2"

	"github.com/zeebo/xxh3"
)

// BodyKeys are the keys of a request body's blocks (keyBlock bytes each,
// the last partial one left out), taken while the body is read: its bytes
// are in the cache then. A Reparser given them (ParseKeyed) tells the
// bytes a body repeats of the earlier request's from its first byte on by
// the two bodies' keys instead of comparing the bodies — a comparison
// reads the earlier body too, cold by the time the next request comes
// (the seed's request at saturation: the comparisons were about 10% of
// the proxy's CPU; BenchmarkBodyKeys for the two alone).
//
// A key is XXH3's 128 bits with a seed random per process, never shown:
// distinct blocks share one by chance with a probability of about 2^-128.
// XXH3 is no MAC (for short inputs, fixed pairs are known that collide
// for about 2^-27 of seeds: xxHash issue #1127), but a forged block must
// collide with one of the earlier request's, so its author knows every
// byte up to it; the view made holds the author's bytes, and the worst a
// collision does is shape the author's own request wrongly (the README's
// Security section). Keys are never stored.
type BodyKeys struct {
	keys []xxh3.Uint128
}

// keyBlock is the length of a keyed block: large enough that a key costs
// little besides the hashing of its bytes, small enough that what is
// still compared (from the first block that differs, at most one block of
// the earlier request's messages) is little.
const keyBlock = 16 << 10

var keySeed = rand.Uint64() | 1 // 0 would be XXH3's unseeded secret

// Add keys the blocks of body[:n] not keyed yet; n is how many of body's
// bytes were read so far, and body[:n] must not change afterwards.
func (k *BodyKeys) Add(body []byte, n int) {
	if k.keys == nil {
		if len(body) < keyBlock {
			return
		}
		k.keys = make([]xxh3.Uint128, 0, len(body)/keyBlock)
	}
	for at := len(k.keys) * keyBlock; at+keyBlock <= n; at += keyBlock {
		k.keys = append(k.keys, xxh3.Hash128Seed(body[at:at+keyBlock], keySeed))
	}
}

// knownPrefix returns how many first bytes of two bodies their keys show
// the same: the blocks up to the first whose keys differ.
func knownPrefix(a, b []xxh3.Uint128) int {
	n := min(len(a), len(b))
	i := 0
	for i < n && a[i] == b[i] {
		i++
	}
	return i * keyBlock
}
