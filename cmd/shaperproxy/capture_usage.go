package main

// Usage and cost in the capture commands: the JSON shapes of the token
// sums and their cost, and their text.

import (
	"cmp"
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/shaperproxy/shaperproxy/capture"
	"github.com/shaperproxy/shaperproxy/internal/accounting"
	"github.com/shaperproxy/shaperproxy/internal/config"
	"github.com/shaperproxy/shaperproxy/internal/profile"
)

// forensicConfig is the configuration a forensic command prices and
// replays with: the --config file, else the defaults.
func (f *forensicFlags) forensicConfig() (config.Config, error) {
	if f.config == "" {
		return config.Default(), nil
	}
	return config.Load(f.config)
}

// profileTable resolves the routes of c (and its default route) to their
// rendering profiles.
func profileTable(c config.Config) *profile.Table {
	return profile.NewTable(c.Profiles, upstreams(c.WithDefaultRoute("")))
}

// tokensJSON is a usage sum in JSON.
type tokensJSON struct {
	PromptTokens     int64    `json:"prompt_tokens"`
	CacheHitTokens   int64    `json:"cache_hit_tokens"`
	CacheMissTokens  int64    `json:"cache_miss_tokens"`
	CacheWriteTokens int64    `json:"cache_write_tokens"`
	CompletionTokens int64    `json:"completion_tokens"`
	ReasoningTokens  int64    `json:"reasoning_tokens"`
	HitRatio         float64  `json:"hit_ratio"`
	ReportedUSD      *float64 `json:"reported_usd"` // the upstream's own figure, null when it gave none
}

func toTokensJSON(u accounting.Usage) tokensJSON {
	j := tokensJSON{
		PromptTokens: u.Prompt, CacheHitTokens: u.Hit, CacheMissTokens: u.Miss, CacheWriteTokens: u.CacheWrite,
		CompletionTokens: u.Output, ReasoningTokens: u.Reasoning, HitRatio: u.HitRatio(),
	}
	if u.CostReported > 0 {
		j.ReportedUSD = &u.Cost
	}
	return j
}

// costJSON is a cost: US dollars at the profile's prices and miss-token
// equivalents at its ratio, each null when unknown.
type costJSON struct {
	USD             *float64 `json:"usd"`
	MissEquivalents *float64 `json:"miss_equivalents"`
}

func toCostJSON(c accounting.Cost) costJSON {
	var j costJSON
	if c.USDKnown {
		j.USD = &c.USD
	}
	if c.RatioKnown {
		j.MissEquivalents = &c.MissEquivalents
	}
	return j
}

// usageRowJSON is the usage of one route, model and kind of call.
type usageRowJSON struct {
	Route    string `json:"route"`
	Model    string `json:"model"`
	Kind     string `json:"kind"`
	Profile  string `json:"profile"`
	Calls    int64  `json:"calls"`
	Reported int64  `json:"reported"`
	tokensJSON
	costJSON
}

// kindRowJSON is the usage of one kind of call, every route together.
type kindRowJSON struct {
	Kind     string `json:"kind"`
	Calls    int64  `json:"calls"`
	Reported int64  `json:"reported"`
	tokensJSON
	costJSON
}

// conversationJSON is the usage of one conversation on a route and model.
type conversationJSON struct {
	Conversation string `json:"conversation"`
	Route        string `json:"route"`
	Model        string `json:"model"`
	Calls        int64  `json:"calls"`
	Internal     int64  `json:"internal_calls"`
	Reported     int64  `json:"reported"`
	tokensJSON
	costJSON
}

// pricedStats is the usage of a log with its cost, as stats prints it.
type pricedStats struct {
	rows   []usageRowJSON
	kinds  []kindRowJSON
	convs  []conversationJSON
	costs  map[[3]string]accounting.Cost // by route, model, kind
	kindOf map[string]accounting.Cost    // sums over the priced rows
}

// priceStats prices the usage sums of st with the profiles of tab.
func priceStats(st *capture.Stats, tab *profile.Table) *pricedStats {
	ps := &pricedStats{rows: []usageRowJSON{}, kinds: []kindRowJSON{}, convs: []conversationJSON{},
		costs: map[[3]string]accounting.Cost{}, kindOf: map[string]accounting.Cost{}}
	for _, r := range st.Usage {
		p := tab.ForRoute(r.Route, r.Model)
		c := accounting.Price(p.Prices, r.Usage)
		ps.costs[[3]string{r.Route, r.Model, r.Kind}] = c
		ps.kindOf[r.Kind] = addCost(ps.kindOf[r.Kind], c)
		ps.rows = append(ps.rows, usageRowJSON{r.Route, r.Model, r.Kind, p.Name, r.Calls, r.Reported, toTokensJSON(r.Usage), toCostJSON(c)})
	}
	for _, k := range st.UsageByKind() {
		ps.kinds = append(ps.kinds, kindRowJSON{k.Kind, k.Calls, k.Reported, toTokensJSON(k.Usage), toCostJSON(ps.kindOf[k.Kind])})
	}
	for _, cv := range st.Conversations {
		c := accounting.Price(tab.ForRoute(cv.Route, cv.Model).Prices, cv.Usage)
		ps.convs = append(ps.convs, conversationJSON{cv.Conversation, cv.Route, cv.Model, cv.Calls, cv.Internal, cv.Reported, toTokensJSON(cv.Usage), toCostJSON(c)})
	}
	return ps
}

// addCost sums two costs; a sum is known when either part is (unknown
// parts count as nothing).
func addCost(a, b accounting.Cost) accounting.Cost {
	return accounting.Cost{
		USD: a.USD + b.USD, USDKnown: a.USDKnown || b.USDKnown,
		MissEquivalents: a.MissEquivalents + b.MissEquivalents, RatioKnown: a.RatioKnown || b.RatioKnown,
	}
}

// fmtCost is a cost in text: dollars, else miss-token equivalents, else
// "-".
func fmtCost(c accounting.Cost) string {
	switch {
	case c.USDKnown:
		return fmtUSD(c.USD)
	case c.RatioKnown:
		return fmt.Sprintf("%s miss-eq", fmtCount(int64(c.MissEquivalents+0.5)))
	}
	return "-"
}

// fmtUSD prints dollars with enough digits for fractions of a cent.
func fmtUSD(v float64) string {
	switch a := max(v, -v); {
	case a == 0:
		return "$0"
	case a >= 100:
		return fmt.Sprintf("$%.2f", v)
	case a >= 1:
		return fmt.Sprintf("$%.4f", v)
	}
	return fmt.Sprintf("$%.6f", v)
}

// fmtCount prints n with thousands separators.
func fmtCount(n int64) string {
	s := fmt.Sprint(max(n, -n))
	var b strings.Builder
	if n < 0 {
		b.WriteByte('-')
	}
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	return b.String()
}

// fmtRatio prints a hit ratio, "-" without prompt tokens.
func fmtRatio(u accounting.Usage) string {
	if u.Prompt == 0 {
		return "-"
	}
	return fmt.Sprintf("%.1f%%", 100*u.HitRatio())
}

// usageCells are the table cells of a usage sum and its cost.
func usageCells(u accounting.Usage, c accounting.Cost) string {
	return fmt.Sprintf("%s\t%s\t%s\t%s\t%s\t%s\t%s", fmtCount(u.Prompt), fmtCount(u.Hit), fmtCount(u.Miss), fmtRatio(u),
		fmtCount(u.Output), fmtCount(u.Reasoning), fmtCost(c))
}

const usageHeader = "prompt\thit\tmiss\thit %\toutput\treasoning\tcost"

// printStatsCost writes the cost section of capture stats.
func printStatsCost(b io.Writer, st *capture.Stats, ps *pricedStats) {
	fmt.Fprintf(b, "\ntokens and cost (as the upstream reported them; cost at the route's profile prices,\n"+
		"or in miss-token equivalents where only the hit/miss ratio is known)\n")
	if len(st.Usage) == 0 {
		fmt.Fprintf(b, "  no chat call ended in the log\n")
		return
	}
	fmt.Fprintf(b, "  route\tmodel\tkind\tprofile\tcalls\t%s\n", usageHeader)
	for i, r := range st.Usage {
		c := ps.costs[[3]string{r.Route, r.Model, r.Kind}]
		fmt.Fprintf(b, "  %s\t%s\t%s\t%s\t%s\t%s\n", r.Route, r.Model, r.Kind, ps.rows[i].Profile, callsCell(r.Calls, r.Reported), usageCells(r.Usage, c))
	}
	fmt.Fprintf(b, "\nby kind of call\n  kind\tcalls\t%s\n", usageHeader)
	for _, k := range st.UsageByKind() {
		fmt.Fprintf(b, "  %s\t%s\t%s\n", k.Kind, callsCell(k.Calls, k.Reported), usageCells(k.Usage, ps.kindOf[k.Kind]))
	}
	if internal := internalShare(st, ps); internal != "" {
		fmt.Fprintf(b, "  the proxy's own calls (review, deliberate): %s\n", internal)
	}
}

// callsCell is "N" or "N (M reported)" when some calls reported no usage.
func callsCell(calls, reported int64) string {
	if calls == reported {
		return fmtCount(calls)
	}
	return fmt.Sprintf("%s (%s with usage)", fmtCount(calls), fmtCount(reported))
}

// internalShare says what the internal calls cost next to the client's.
func internalShare(st *capture.Stats, ps *pricedStats) string {
	var in, all accounting.Cost
	var calls int64
	for _, k := range st.UsageByKind() {
		all = addCost(all, ps.kindOf[k.Kind])
		if k.Kind != accounting.KindPrimary {
			in = addCost(in, ps.kindOf[k.Kind])
			calls += k.Calls
		}
	}
	if calls == 0 {
		return ""
	}
	s := fmt.Sprintf("%s calls, %s", fmtCount(calls), fmtCost(in))
	switch {
	case all.USDKnown && all.USD > 0:
		s += fmt.Sprintf(" (%.1f%% of all)", 100*in.USD/all.USD)
	case !all.USDKnown && all.RatioKnown && all.MissEquivalents > 0:
		s += fmt.Sprintf(" (%.1f%% of all)", 100*in.MissEquivalents/all.MissEquivalents)
	}
	return s
}

// maxConversationRows is how many conversations capture stats lists in
// text (the most expensive); JSON lists all.
const maxConversationRows = 10

// printStatsConversations writes the most expensive conversations.
func printStatsConversations(b io.Writer, ps *pricedStats) {
	if len(ps.convs) == 0 {
		return
	}
	rows := append([]conversationJSON(nil), ps.convs...)
	val := func(p *float64) float64 {
		if p == nil {
			return 0
		}
		return *p
	}
	slices.SortStableFunc(rows, func(a, b conversationJSON) int {
		return cmp.Or(cmp.Compare(val(b.USD), val(a.USD)), cmp.Compare(val(b.MissEquivalents), val(a.MissEquivalents)),
			cmp.Compare(b.PromptTokens, a.PromptTokens))
	})
	fmt.Fprintf(b, "\nconversations (%d; the %d most expensive)\n  conversation\troute\tmodel\tcalls\tinternal\tprompt\thit\tmiss\thit %%\toutput\tcost\n",
		len(rows), min(len(rows), maxConversationRows))
	for _, c := range rows[:min(len(rows), maxConversationRows)] {
		u := accounting.Usage{Prompt: c.PromptTokens, Hit: c.CacheHitTokens, Miss: c.CacheMissTokens, Output: c.CompletionTokens}
		key := c.Conversation
		if key == "" {
			key = "(unknown)"
		}
		fmt.Fprintf(b, "  %s\t%s\t%s\t%d\t%d\t%s\t%s\t%s\t%s\t%s\t%s\n", key, c.Route, c.Model, c.Calls, c.Internal,
			fmtCount(u.Prompt), fmtCount(u.Hit), fmtCount(u.Miss), fmtRatio(u), fmtCount(u.Output), fmtCostJSON(c.costJSON))
	}
}

func fmtCostJSON(c costJSON) string {
	var k accounting.Cost
	if c.USD != nil {
		k.USD, k.USDKnown = *c.USD, true
	}
	if c.MissEquivalents != nil {
		k.MissEquivalents, k.RatioKnown = *c.MissEquivalents, true
	}
	return fmtCost(k)
}

// callCostJSON is the usage of one call with its cost (capture show).
type callCostJSON struct {
	Profile    string `json:"profile"`
	UsageShape string `json:"usage_shape"`
	tokensJSON
	costJSON
}

// callCost prices the usage of a call view; nil when it has none.
func callCost(v *capture.CallView, tab *profile.Table) (*callCostJSON, accounting.Cost, profile.Profile) {
	if v.Usage == nil {
		return nil, accounting.Cost{}, profile.Profile{}
	}
	route, model := "", ""
	if q := v.Request; q != nil {
		route, model = q.Route, q.Model
	}
	p := tab.ForRoute(route, model)
	c := accounting.Price(p.Prices, *v.Usage)
	return &callCostJSON{p.Name, string(v.UsageShape), toTokensJSON(*v.Usage), toCostJSON(c)}, c, p
}

// printCallUsage writes the usage line of capture show.
func printCallUsage(b io.Writer, v *capture.CallView, tab *profile.Table) {
	j, c, p := callCost(v, tab)
	if j == nil {
		return
	}
	u := *v.Usage
	fmt.Fprintf(b, "tokens (%s usage): prompt %s (cache hit %s, miss %s", v.UsageShape, fmtCount(u.Prompt), fmtCount(u.Hit), fmtCount(u.Miss))
	if u.CacheWrite > 0 {
		fmt.Fprintf(b, " of which written to the cache %s", fmtCount(u.CacheWrite))
	}
	fmt.Fprintf(b, "; %s from the cache), output %s (reasoning %s)\n", fmtRatio(u), fmtCount(u.Output), fmtCount(u.Reasoning))
	fmt.Fprintf(b, "cost: %s at the prices of profile %s", fmtCost(c), p.Name)
	if u.CostReported > 0 {
		fmt.Fprintf(b, "; the upstream reported %s", fmtUSD(u.Cost))
	}
	fmt.Fprintln(b)
}
