// Package replay answers "what would these calls have cost under another
// shaping policy?" from the capture log.
//
// Run reads the captured calls (capture.Calls), and for each of the
// client's own chat calls:
//
//  1. takes the request as it was sent upstream (rebuilt byte for byte)
//     and puts back the original of every reasoning block the proxy had
//     shaped: message i of a request is the reply to the conversation's
//     request of i messages, whose response the log holds (checked by its
//     content and tool call ids). That is the request as the shaping
//     transform received it, the transforms before it included;
//  2. shapes it with a fresh reqshape.Shaper under the what-if
//     configuration (or not at all), as the proxy would have;
//  3. bills both the request sent and the what-if request on two
//     simulated prompt caches (package promptcache, DeepSeek's rules),
//     rendered with the chat template or encoder of the route's profile,
//     each with the call's real reply persisted after it;
//  4. calibrates: the upstream's reported usage is the actual figure, and
//     the what-if figure is the reported one plus the simulated
//     difference, scaled by the ratio of the reported prompt tokens to the
//     simulated ones of the requests actually sent.
//
// The internal calls (reviews, deliberations) are summed as reported and
// assumed unchanged; outputs are assumed unchanged (the model's replies
// are the captured ones).
package replay

import (
	"context"
	"strings"
	"time"

	"github.com/shaperproxy/shaperproxy/capture"
	"github.com/shaperproxy/shaperproxy/conv"
	"github.com/shaperproxy/shaperproxy/internal/accounting"
	"github.com/shaperproxy/shaperproxy/internal/profile"
	"github.com/shaperproxy/shaperproxy/internal/promptcache"
	"github.com/shaperproxy/shaperproxy/internal/render"
	"github.com/shaperproxy/shaperproxy/internal/reqshape"
	"github.com/shaperproxy/shaperproxy/proxy"
)

// Options configure Run.
type Options struct {
	// Shaping is the configuration the requests are replayed under; with
	// Enabled false they are replayed unshaped.
	Shaping reqshape.Config
	// Policy names the what-if for the report ("none", "cache-aware", …).
	Policy string
	// Profiles resolves each route's profile: its prices and the template
	// that renders its prompts (nil: the built-ins).
	Profiles *profile.Table
	// Since leaves out the calls sent before it (zero: none).
	Since time.Time
	// Conversation, when set, replays only the conversations whose key
	// starts with it.
	Conversation string
	// Unit is the simulated cache unit in tokens (0: promptcache's).
	Unit int
}

// Report is what Run found.
type Report struct {
	Policy        string
	Since         time.Time
	First, Last   time.Time // of the calls replayed
	Conversations int       // distinct conversations replayed
	// Calls counts the client's chat calls replayed, Skipped the calls
	// left out (not chat requests, bodies not in the log).
	Calls, Skipped int
	// Restored counts the reasoning blocks put back to their original
	// before the what-if shaping; Unmatched the blocks whose reply the
	// log does not hold (sent as captured: raw or shaped, unknown).
	Restored, Unmatched int
	// Groups holds one entry per route and model, sorted.
	Groups []*Group
}

// Sim is a simulated bill: prompt tokens and cache hits, as estimated.
type Sim struct {
	Prompt, Hit int64
}

// Group is the replay of the calls of one route and model.
type Group struct {
	Route, Model string
	// Profile names the route's profile, Prices its prices; Renderer
	// names how prompts were rendered ("" = the raw messages).
	Profile  string
	Prices   profile.Prices
	Renderer string
	// Calls counts the client's calls replayed, Reported those with a
	// usage (the sums below are over these).
	Calls, Reported int
	// Actual is what the upstream reported for them.
	Actual accounting.Usage
	// SentBytes and WhatIfBytes are the request bodies' bytes, as sent
	// and as the what-if would have sent them (all calls).
	SentBytes, WhatIfBytes int64
	// SimSent and SimWhatIf are the simulated bills of the requests as
	// sent and as the what-if.
	SimSent, SimWhatIf Sim
	// InternalCalls and Internal are the proxy's own calls on this route
	// and model, as reported (the same in the what-if).
	InternalCalls int
	Internal      accounting.Usage
}

// Scale is the calibration: the reported prompt tokens per simulated
// prompt token of the requests sent (1 when either is zero).
func (g *Group) Scale() float64 {
	if g.Actual.Prompt == 0 || g.SimSent.Prompt == 0 {
		return 1
	}
	return float64(g.Actual.Prompt) / float64(g.SimSent.Prompt)
}

// WhatIf is the calibrated estimate of what the what-if would have been
// billed: the reported usage moved by the simulated difference in hits
// and misses, scaled; outputs as reported.
func (g *Group) WhatIf() accounting.Usage {
	k := g.Scale()
	dHit := float64(g.SimWhatIf.Hit - g.SimSent.Hit)
	dMiss := float64((g.SimWhatIf.Prompt - g.SimWhatIf.Hit) - (g.SimSent.Prompt - g.SimSent.Hit))
	u := g.Actual
	u.Hit = max(0, u.Hit+round(k*dHit))
	u.Miss = max(0, u.Miss+round(k*dMiss))
	u.Prompt = u.Hit + u.Miss
	u.CacheWrite = min(u.CacheWrite, u.Miss)
	u.Cost, u.CostReported = 0, 0
	return u
}

func round(f float64) int64 {
	if f < 0 {
		return -int64(-f + 0.5)
	}
	return int64(f + 0.5)
}

// Run replays the captured calls of r.
func Run(ctx context.Context, r *capture.Reader, o Options) (*Report, error) {
	rp := newReplayer(o)
	err := capture.Calls(r, o.Since, func(c *capture.CallData) error {
		if err := ctx.Err(); err != nil {
			return err
		}
		rp.call(ctx, c)
		return nil
	})
	if err != nil {
		return nil, err
	}
	return rp.report(), nil
}

// replayer holds a replay's state.
type replayer struct {
	o         Options
	shaper    *reqshape.Shaper
	sent      *promptcache.Cache
	whatIf    *promptcache.Cache
	origins   origins
	groups    map[[2]string]*Group
	renderers map[string]render.Renderer
	convs     map[string]bool
	rep       Report
}

func newReplayer(o Options) *replayer {
	if o.Profiles == nil {
		o.Profiles = profile.NewTable(nil, nil)
	}
	return &replayer{
		o: o, shaper: reqshape.NewShaper(o.Shaping, reqshape.Options{Profiles: o.Profiles}),
		sent: promptcache.New(o.Unit), whatIf: promptcache.New(o.Unit), origins: origins{},
		groups: map[[2]string]*Group{}, renderers: map[string]render.Renderer{}, convs: map[string]bool{},
		rep: Report{Policy: o.Policy, Since: o.Since},
	}
}

// call replays one captured call.
func (rp *replayer) call(ctx context.Context, c *capture.CallData) {
	view, err := conv.ParseRequest(c.Request)
	if c.Request == nil || err != nil {
		rp.rep.Skipped++
		return
	}
	key := c.Conversation
	if key == "" {
		key = conv.ConversationKey(view, "")
	}
	if !strings.HasPrefix(key, rp.o.Conversation) {
		return
	}
	g := rp.group(c.Route, c.Model)
	if c.Internal {
		rp.internal(g, c)
		return
	}
	rp.primary(ctx, g, c, view, key)
	rp.origins.learn(key, len(view.Messages), c.Response)
}

// internal sums a proxy-made call as reported.
func (rp *replayer) internal(g *Group, c *capture.CallData) {
	g.InternalCalls++
	if u, _, ok := accounting.Parse(c.Usage); ok {
		g.Internal.Add(u)
	}
}

// primary replays one of the client's calls.
func (rp *replayer) primary(ctx context.Context, g *Group, c *capture.CallData, view *conv.Request, key string) {
	base, restored, unmatched := rp.origins.restore(key, view)
	rp.rep.Restored += restored
	rp.rep.Unmatched += unmatched
	whatIf := rp.shape(ctx, c, key, base)
	rd := rp.renderer(g)
	reply := replyMessage(c.Response)
	sent := rp.sent.Bill(rd, c.Request, reply)
	alt := rp.whatIf.Bill(rd, whatIf, reply)
	g.Calls++
	g.SentBytes += int64(len(c.Request))
	g.WhatIfBytes += int64(len(whatIf))
	if u, _, ok := accounting.Parse(c.Usage); ok {
		g.Reported++
		g.Actual.Add(u)
		g.SimSent.add(sent)
		g.SimWhatIf.add(alt)
	}
	rp.rep.Calls++
	rp.convs[key] = true
	if rp.rep.First.IsZero() {
		rp.rep.First = c.Time
	}
	rp.rep.Last = c.Time
}

func (s *Sim) add(b promptcache.Bill) {
	s.Prompt += int64(b.Tokens)
	s.Hit += int64(b.Hit)
}

// shape runs the what-if shaping over the request as the shaping
// transform would have received it; a request it cannot shape goes as it
// is.
func (rp *replayer) shape(ctx context.Context, c *capture.CallData, key string, body []byte) []byte {
	view, err := conv.ParseRequest(body)
	if err != nil {
		return body
	}
	call := &proxy.Call{
		ID: c.Call, Route: c.Route, Method: "POST", Chat: true, View: view, ClientBody: body,
		Conversation: key, Model: c.Model, Stream: c.Stream, Start: c.Time,
	}
	out, err := rp.shaper.TransformRequest(ctx, call, body)
	if err != nil {
		return body // as the proxy skips a failed transform, with its work beside
	}
	call.RunBeside() // what the proxy runs beside the trip
	call.RunAfter()  // and after the answer: the shaper's blocks go back to their pool
	return out
}

// group returns the group of a route and model, resolving its profile
// the first time.
func (rp *replayer) group(route, model string) *Group {
	k := [2]string{route, model}
	if g := rp.groups[k]; g != nil {
		return g
	}
	p := rp.o.Profiles.ForRoute(route, model)
	g := &Group{Route: route, Model: model, Profile: p.Name, Prices: p.Prices, Renderer: p.Template}
	if _, err := rp.lookupRenderer(p.Template); err != nil {
		g.Renderer = ""
	}
	rp.groups[k] = g
	return g
}

// renderer returns the renderer of a group, nil for the raw messages.
func (rp *replayer) renderer(g *Group) render.Renderer {
	r, _ := rp.lookupRenderer(g.Renderer)
	return r
}

func (rp *replayer) lookupRenderer(name string) (render.Renderer, error) {
	if name == "" {
		return nil, nil
	}
	if r, ok := rp.renderers[name]; ok {
		return r, nil
	}
	r, err := render.Named(name)
	if err != nil {
		return nil, err
	}
	rp.renderers[name] = r
	return r, nil
}

// report sorts the groups into the report.
func (rp *replayer) report() *Report {
	rep := rp.rep
	rep.Conversations = len(rp.convs)
	for _, g := range rp.groups {
		if g.Calls > 0 || g.InternalCalls > 0 {
			rep.Groups = append(rep.Groups, g)
		}
	}
	sortGroups(rep.Groups)
	return &rep
}

// Totals sums a report's groups.
type Totals struct {
	// Calls, SentBytes and WhatIfBytes are over every group.
	Calls                  int
	SentBytes, WhatIfBytes int64
	// Actual and WhatIf sum the usage reported and estimated.
	Actual, WhatIf accounting.Usage
	// ActualUSD, WhatIfUSD and InternalUSD are over the groups whose
	// profile knows prices; Unpriced counts the others.
	ActualUSD, WhatIfUSD, InternalUSD float64
	Unpriced                          int
}

// Totals sums the groups of r.
func (r *Report) Totals() Totals {
	var t Totals
	for _, g := range r.Groups {
		t.Calls += g.Calls
		t.SentBytes += g.SentBytes
		t.WhatIfBytes += g.WhatIfBytes
		w := g.WhatIf()
		t.Actual.Add(g.Actual)
		t.WhatIf.Add(w)
		a, b, in := accounting.Price(g.Prices, g.Actual), accounting.Price(g.Prices, w), accounting.Price(g.Prices, g.Internal)
		if !a.USDKnown {
			t.Unpriced++
			continue
		}
		t.ActualUSD += a.USD
		t.WhatIfUSD += b.USD
		t.InternalUSD += in.USD
	}
	return t
}
