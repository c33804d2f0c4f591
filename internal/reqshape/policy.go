package reqshape

import (
	"fmt"

	"github.com/shaperproxy/shaperproxy/internal/profile"
)

// Policy says which reasoning blocks go out shaped.
type Policy string

// The policies.
const (
	// PolicyCacheAware (the default) never costs more than it saves, by
	// the cost model of RENDERING.md §4.2 and the route's rendering
	// profile (package profile):
	//
	//   - a block the upstream does not render (an earlier turn's, for
	//     most families) is shaped: it saves bytes on the wire and costs
	//     nothing, since the prompt does not change;
	//   - a block the upstream renders is shaped from its first re-send,
	//     when nothing after it but its own message has been billed yet,
	//     and only when that pays: F·r·(R−S) > S − r·R + (1−r)·T, with R
	//     and S the raw and shaped sizes in tokens, T the rest of its
	//     message, r the profile's hit/miss price ratio and F its Resends
	//     (see pays); with no known ratio it is never shaped;
	//   - a rendered block is also shaped in a request whose prompt breaks
	//     before it anyway (another change earlier in the history, new
	//     tools or effort): it is billed as a miss either way. Such a block
	//     is remembered for its conversation (in the ledger when there is
	//     one), so it stays shaped in every later request;
	//   - nothing is shaped where the profile says the provider wants the
	//     reasoning back unmodified (Frozen).
	//
	// Every decision depends on the block, the profile and the request's
	// shape only, so a block changes at most once and is byte-identical
	// afterwards.
	PolicyCacheAware Policy = "cache-aware"
	// PolicyFreeOnly shapes only the blocks the upstream does not render.
	PolicyFreeOnly Policy = "free-only"
	// PolicyKeepRecent is the earlier default: every block but the latest
	// KeepRecent steps is shaped, rendered or not. On an upstream that
	// renders the current tool loop it breaks the prompt cache at the
	// block shaped in each request (each block is sent raw once, then
	// shaped), and everything after it is billed again at the miss price.
	PolicyKeepRecent Policy = "keep-recent"
)

func (p Policy) validate() error {
	switch p {
	case PolicyCacheAware, PolicyFreeOnly, PolicyKeepRecent:
		return nil
	}
	return fmt.Errorf("%q is not cache-aware, free-only or keep-recent", p)
}

// Tokens estimates the tokens of s: a quarter of its bytes, rounded up
// (the fake upstream's estimate too).
func Tokens(s string) int { return (len(s) + 3) / 4 }

// pays reports whether shaping a rendered block from raw to shaped at
// its first re-send pays under p (RENDERING.md §4.2). The request before
// had the block as its output, which the upstream caches ("the end
// position of the model output"); shaped, the block and the after tokens
// that follow it in its message (content, tool calls) are billed as
// misses instead of hits once: m·(S + T) − h·(R + T). Each of the F later
// requests that render it saves h·(R − S). So it pays when
// F·r·(R − S) > S − r·R + (1 − r)·T.
func pays(p *profile.Profile, raw, shaped string, after int) bool {
	r, ok := p.Prices.HitRatio()
	if !ok || p.Resends <= 0 {
		return false
	}
	R, S, T := float64(Tokens(raw)), float64(Tokens(shaped)), float64(after)
	return float64(p.Resends)*r*(R-S) > S-r*R+(1-r)*T
}
