// Package profile says, per upstream and model, what the upstream renders
// of a chat completions request and what its prompt cache costs: which
// reasoning blocks reach the model's prompt (and so its prompt cache and
// its bill), where a notice the proxy inserts lands with a role, whether
// the provider forbids edits to reasoning, and the prices of a cache hit,
// a miss and an output token.
//
// The facts come from the real chat templates and encoders and the
// providers' documentation, gathered in ../shared/RENDERING.md; each
// built-in profile cites its sources. A Table picks a profile by route,
// upstream host and model name; the [[profile]] configuration entries
// change any field or add profiles.
//
//	tab := profile.NewTable(cfg.Profiles, map[string]string{"deepseek": "https://api.deepseek.com"})
//	p := tab.ForRoute("deepseek", "deepseek-v4-flash") // or tab.Resolve(route, upstreamURL, model)
//	p.Of(req).Rendered(i)                               // is message i's reasoning in the prompt?
//	p.ReviewNotice()                                    // where the masked review's notice goes
//	usd, ok := p.Prices.Cost(hitTokens, missTokens, outputTokens) // ok: the prices are known
//	r, ok := p.Prices.HitRatio()                        // hit/miss, when only the ratio is known
//
// An upstream nothing matches gets Unknown: everything rendered, no
// prices, so nothing rendered is ever shaped there.
package profile

import (
	"bytes"
	"slices"

	"github.com/shaperproxy/shaperproxy/conv"
)

// Earlier says what the upstream renders of the reasoning of assistant
// messages before the boundary (see Boundary): earlier turns.
type Earlier string

// The Earlier values.
const (
	// EarlierDropped: earlier turns' reasoning never reaches the prompt.
	EarlierDropped Earlier = "dropped"
	// EarlierKeptWithTools: kept when the request carries tools, dropped
	// otherwise (DeepSeek V4).
	EarlierKeptWithTools Earlier = "kept-with-tools"
	// EarlierKept: always rendered (GLM-4.7+ preserved thinking; the safe
	// assumption for an unknown upstream).
	EarlierKept Earlier = "kept"
)

// Boundary says where "earlier" ends: the reasoning of an assistant
// message after the boundary belongs to the current tool loop.
type Boundary string

// The Boundary values.
const (
	// BoundaryUser: the last user message (Qwen3, GLM, MiniMax, V3.x).
	BoundaryUser Boundary = "last-user"
	// BoundaryFinal: the last assistant message without tool calls, a
	// final answer (Kimi-K2-Thinking, gpt-oss): a draft followed by
	// anything loses its reasoning, and so does every step before it.
	BoundaryFinal Boundary = "last-final-answer"
	// BoundaryUserOrTool: the last user or tool message, because tool
	// results are user turns (DeepSeek V4 without tools).
	BoundaryUserOrTool Boundary = "last-user-or-tool"
)

// Placement is where a notice the proxy adds to a conversation may go.
type Placement string

// The placements.
const (
	// PlaceSystem: a system message after the draft, rendered in place
	// with its role.
	PlaceSystem Placement = "system"
	// PlaceUser: a user message after the draft.
	PlaceUser Placement = "user"
	// PlaceToolPair: the draft becomes an assistant message with one
	// synthetic tool call, followed by that call's tool result holding the
	// notice.
	PlaceToolPair Placement = "tool-pair"
	// PlaceToolResult: appended to a tool result that is sent for the
	// first time (the guard's notices). Rendered in place by every family.
	PlaceToolResult Placement = "tool-result"
)

// Profile is what one upstream family renders and charges. The zero
// value is not useful; take profiles from a Table.
type Profile struct {
	// Name identifies the profile ("deepseek-v4", "qwen3").
	Name string
	// Family describes it for people ("DeepSeek API (V4)").
	Family string
	// Match lists when a built-in profile applies: any selector whose
	// globs all match.
	Match []Selector
	// Earlier and TurnRendered say which reasoning reaches the prompt:
	// earlier turns' (Earlier) and the current tool loop's (TurnRendered);
	// Boundary says where one ends and the other begins.
	Earlier      Earlier
	TurnRendered bool
	Boundary     Boundary
	// Field is the reasoning key the upstream sends and expects back
	// ("reasoning_content" or "reasoning"; informative: the proxy never
	// renames a field, PROTOCOLS.md rule 3).
	Field string
	// Notice lists where a notice may go, the review's choice first.
	Notice []Placement
	// Frozen: the provider asks for reasoning passed back unmodified; no
	// block is ever shaped.
	Frozen bool
	// ChildToolChoice is the tool_choice the review child sends with the
	// primary's tools ("" = none sent).
	ChildToolChoice string
	// Resends estimates how many later requests still render a block
	// after its first re-send: the F of RENDERING.md §4.2.
	Resends int
	// Prices of the upstream's prompt cache and output.
	Prices Prices
	// Template names the chat template or encoder in fixtures/templates
	// that renders like the upstream ("" = none known).
	Template string
	// Source cites where the facts come from.
	Source string
}

// Selector matches routes, upstreams and models by glob ("" = any): *
// matches any run of characters, ? one; case is ignored. Upstream is
// matched against the host (without port) and against host+path.
type Selector struct {
	Route    string
	Upstream string
	Model    string
}

// Rendering is what a profile renders of one request; see Profile.Of.
type Rendering struct {
	p        *Profile
	boundary int
	tools    bool
}

// Of looks req over once (its boundary, whether it carries tools) for
// Rendered.
func (p *Profile) Of(req *conv.Request) Rendering {
	return Rendering{p: p, boundary: p.boundary(req), tools: HasTools(req)}
}

// Rendered reports whether the reasoning of message i reaches the prompt
// the upstream renders (i is an assistant message; whether it carries
// reasoning is not checked).
func (r Rendering) Rendered(i int) bool {
	if i > r.boundary {
		return r.p.TurnRendered
	}
	switch r.p.Earlier {
	case EarlierKept:
		return true
	case EarlierKeptWithTools:
		return r.tools
	}
	return false
}

// AgreeBefore returns how many first messages, up to k, r and o render
// alike (Rendered): k when they agree on all of them, else the first on
// which they differ. Each renders a message by which side of its boundary
// it is on, so they can first differ only where one's side changes.
func (r Rendering) AgreeBefore(o Rendering, k int) int {
	at := [3]int{0, r.boundary + 1, o.boundary + 1}
	slices.Sort(at[:])
	for _, i := range at {
		if i >= k {
			break
		}
		if r.Rendered(i) != o.Rendered(i) {
			return i
		}
	}
	return k
}

// HasTools reports whether a request carries a non-empty "tools" array
// (the first "tools" member, as a gjson lookup finds). It reads the
// member's value where the view says it lies: a lookup in the body would
// skip over every member before it, and clients put "tools" after
// "messages" (the OpenAI SDKs do), so each request would skip its whole
// history — 220 µs for the seed's 938 KB.
func HasTools(req *conv.Request) bool {
	f, ok := req.Field("tools")
	if !ok {
		return false
	}
	const space = " \t\r\n"
	v := bytes.TrimLeft(req.Body[f.Start:f.End], space) // the view's body is valid JSON
	if len(v) == 0 || v[0] != '[' {
		return false
	}
	v = bytes.TrimLeft(v[1:], space)
	return len(v) > 0 && v[0] != ']'
}

// boundary returns the index of the boundary message, -1 when there is
// none (everything is the current tool loop).
func (p *Profile) boundary(req *conv.Request) int {
	// Each is tallied as the request's messages were placed: a walk back
	// to a long turn's user message read every message of the turn, cold.
	switch p.Boundary {
	case BoundaryFinal:
		return req.LastFinal()
	case BoundaryUserOrTool:
		return req.LastUserOrTool()
	}
	return req.LastUser()
}

// ReviewNotice is where the masked review puts its notice: the first of
// Notice that suits a message after the draft (system, user or
// tool-pair); PlaceUser when none does.
func (p Profile) ReviewNotice() Placement {
	for _, pl := range p.Notice {
		if pl != PlaceToolResult {
			return pl
		}
	}
	return PlaceUser
}

// Allows reports whether a notice may go to pl.
func (p Profile) Allows(pl Placement) bool {
	for _, x := range p.Notice {
		if x == pl {
			return true
		}
	}
	return false
}
