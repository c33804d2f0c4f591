package main

import (
	"context"
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/shaperproxy/shaperproxy/capture"
	"github.com/shaperproxy/shaperproxy/internal/accounting"
	"github.com/shaperproxy/shaperproxy/internal/replay"
	"github.com/shaperproxy/shaperproxy/internal/reqshape"
)

// policyNone is the what-if of no shaping at all.
const policyNone = "none"

// costOptions configure costCmd.
type costOptions struct {
	captureOptions
	Policy       string          // the what-if: policyNone or a reqshape policy
	Shaping      reqshape.Config // the shaping configuration it replays under
	Conversation string          // only conversations whose key starts with it
	Since        time.Time
}

func captureCost(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	f := newCaptureFlags("cost", `cost [--policy P] [--conversation KEY] [--since TIME] [flags]

What would the captured calls have cost under another shaping policy? The
client's requests, as sent upstream, are replayed under --policy (none:
no shaping, the default; or cache-aware, free-only, keep-recent with the
configuration's other shaping settings), each shaped block first put back
to the reply it came from. Both versions are billed on a simulated prefix
prompt cache (DeepSeek's rules, prompts rendered with the route profile's
template), and the difference is applied to the usage the upstream really
reported, scaled by the ratio of reported to simulated prompt tokens.
Prints, per route and model, actual vs what-if: bytes sent, prompt tokens,
cache hits and misses, cost; then whether shaping saved money.

TIME is `+timeHelp+`.
`, stdout)
	o := costOptions{}
	f.StringVar(&o.Policy, "policy", policyNone, "the what-if `policy`: none, cache-aware, free-only or keep-recent")
	f.StringVar(&o.Conversation, "conversation", "", "only the conversation whose key starts with `KEY` (capture show prints keys)")
	f.Var(timeValue{t: &o.Since}, "since", "only calls sent at or after `TIME`")
	cmd, err := f.parseNone(args, stderr)
	if err != nil {
		return err
	}
	c, err := f.forensicConfig()
	if err != nil {
		return err
	}
	if o.Shaping, err = whatIfShaping(c.Shaping, o.Policy); err != nil {
		return f.usageErr("--policy: %w", err)
	}
	o.captureOptions = cmd
	return costCmd(ctx, stdout, o)
}

// whatIfShaping is the shaping configuration of a what-if policy: none
// turns shaping off; a policy replaces the policy of every rule.
func whatIfShaping(c reqshape.Config, policy string) (reqshape.Config, error) {
	if policy == policyNone {
		c.Enabled = false
		return c, nil
	}
	c.Enabled = true
	c.Policy = reqshape.Policy(policy)
	c.Rules = append([]reqshape.RuleConfig(nil), c.Rules...)
	for i := range c.Rules {
		c.Rules[i].Policy = c.Policy
	}
	if err := c.Validate(); err != nil {
		return c, fmt.Errorf("want none, cache-aware, free-only or keep-recent: %w", err)
	}
	return c, nil
}

// costCmd replays the log under the what-if and prints the comparison.
func costCmd(ctx context.Context, w io.Writer, o costOptions) error {
	r, err := capture.OpenReader(o.Dir)
	if err != nil {
		return err
	}
	defer r.Close()
	rep, err := replay.Run(ctx, r, replay.Options{
		Shaping: o.Shaping, Policy: o.Policy, Profiles: o.profiles(), Since: o.Since, Conversation: o.Conversation,
	})
	if err != nil {
		return err
	}
	if o.JSON {
		return newJSONLines(w).write(toCostReportJSON(rep, o.Conversation))
	}
	return printCostReport(w, rep)
}

// printCostReport writes the replay's comparison.
func printCostReport(w io.Writer, rep *replay.Report) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "capture cost: what was sent against the what-if %s\n", whatIfName(rep.Policy))
	if rep.Calls == 0 {
		fmt.Fprintf(tw, "  no call of a client to replay")
		if !rep.Since.IsZero() {
			fmt.Fprintf(tw, " since %s", fmtTime(rep.Since))
		}
		fmt.Fprintln(tw)
		return tw.Flush()
	}
	fmt.Fprintf(tw, "  %s of the client in %s, %s to %s", plural(rep.Calls, "call"), plural(rep.Conversations, "conversation"), fmtTime(rep.First), fmtTime(rep.Last))
	if rep.Skipped > 0 {
		fmt.Fprintf(tw, " (%d calls left out: not chat requests or bodies not in the log)", rep.Skipped)
	}
	fmt.Fprintf(tw, "\n  reasoning blocks put back to their original: %d; without a captured reply, left as sent: %d\n", rep.Restored, rep.Unmatched)
	for _, g := range rep.Groups {
		printCostGroup(tw, g)
	}
	fmt.Fprintf(tw, "\n%s\n", costVerdict(rep))
	return tw.Flush()
}

// plural is "1 call", "2 calls".
func plural(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return fmt.Sprintf("%d %ss", n, noun)
}

// whatIfName describes a what-if policy.
func whatIfName(policy string) string {
	if policy == policyNone {
		return `"none" (no shaping)`
	}
	return fmt.Sprintf("policy %q", policy)
}

// printCostGroup writes the comparison of one route and model.
func printCostGroup(w io.Writer, g *replay.Group) {
	renderer := g.Renderer
	if renderer == "" {
		renderer = "no template known: the raw messages"
	}
	fmt.Fprintf(w, "\nroute %s, model %s: profile %s, prompts rendered with %s\n", g.Route, g.Model, g.Profile, renderer)
	if g.Calls > 0 {
		fmt.Fprintf(w, "  %d calls (%d with a usage); calibration %.3f reported prompt tokens per simulated one\n", g.Calls, g.Reported, g.Scale())
		wi := g.WhatIf()
		a, b := accounting.Price(g.Prices, g.Actual), accounting.Price(g.Prices, wi)
		fmt.Fprintf(w, "  \tactual\twhat-if\tdifference\n")
		fmt.Fprintf(w, "  bytes sent\t%s\t%s\t%s\n", fmtBytes(g.SentBytes), fmtBytes(g.WhatIfBytes), diffBytes(g.SentBytes, g.WhatIfBytes))
		for _, row := range []struct {
			name string
			a, b int64
		}{{"prompt tokens", g.Actual.Prompt, wi.Prompt}, {"cache hit", g.Actual.Hit, wi.Hit}, {"cache miss", g.Actual.Miss, wi.Miss}, {"output", g.Actual.Output, wi.Output}} {
			fmt.Fprintf(w, "  %s\t%s\t%s\t%s\n", row.name, fmtCount(row.a), fmtCount(row.b), diffCount(row.a, row.b))
		}
		fmt.Fprintf(w, "  hit %%\t%s\t%s\t\n", fmtRatio(g.Actual), fmtRatio(wi))
		fmt.Fprintf(w, "  cost\t%s\t%s\t%s\n", fmtCost(a), fmtCost(b), diffCost(a, b))
	}
	if g.InternalCalls > 0 {
		fmt.Fprintf(w, "  the proxy's own calls: %d, %s as reported (the same in the what-if)\n", g.InternalCalls, fmtCost(accounting.Price(g.Prices, g.Internal)))
	}
}

// costVerdict answers "did shaping save money?" for the whole replay.
func costVerdict(rep *replay.Report) string {
	t := rep.Totals()
	if len(rep.Groups) == t.Unpriced {
		return "no route's profile knows prices: compare the miss-token equivalents above"
	}
	d := t.WhatIfUSD - t.ActualUSD
	pct := ""
	if t.WhatIfUSD > 0 {
		pct = fmt.Sprintf(" (%.1f%%)", 100*max(d, -d)/t.WhatIfUSD)
	}
	against := "no shaping"
	if rep.Policy != policyNone {
		against = fmt.Sprintf("the policy %q", rep.Policy)
	}
	s := fmt.Sprintf("total: actual %s, what-if %s: ", fmtUSD(t.ActualUSD), fmtUSD(t.WhatIfUSD))
	switch {
	case d > 0:
		s += fmt.Sprintf("what was sent saved %s%s against %s", fmtUSD(d), pct, against)
	case d < 0:
		s += fmt.Sprintf("what was sent cost %s%s more than %s would have", fmtUSD(-d), pct, against)
	default:
		s += "no difference against " + against
	}
	if t.Unpriced > 0 {
		s += fmt.Sprintf(" (%d route/model without prices left out)", t.Unpriced)
	}
	return s
}

func diffCount(a, b int64) string {
	if a == b {
		return "0"
	}
	s := fmtCount(b - a)
	if b > a {
		s = "+" + s
	}
	return s + pctOf(a, b)
}

func diffBytes(a, b int64) string {
	sign := "+"
	if b < a {
		sign = "-"
	}
	return sign + fmtBytes(max(b-a, a-b)) + pctOf(a, b)
}

func diffCost(a, b accounting.Cost) string {
	switch {
	case a.USDKnown && b.USDKnown:
		d := b.USD - a.USD
		sign := "+"
		if d < 0 {
			sign = "-"
		}
		return sign + fmtUSD(max(d, -d)) + pctOfF(a.USD, b.USD)
	case a.RatioKnown && b.RatioKnown:
		return diffCount(int64(a.MissEquivalents+0.5), int64(b.MissEquivalents+0.5)) + " miss-eq"
	}
	return "-"
}

// pctOf is " (+x%)", b against a; "" when a is 0.
func pctOf(a, b int64) string { return pctOfF(float64(a), float64(b)) }

func pctOfF(a, b float64) string {
	if a == 0 {
		return ""
	}
	return fmt.Sprintf(" (%+.1f%%)", 100*(b-a)/a)
}

// costReportJSON is the replay of capture cost.
type costReportJSON struct {
	Policy          string          `json:"policy"`
	Conversation    string          `json:"conversation"` // the --conversation filter
	Since           jsonTime        `json:"since"`
	First           jsonTime        `json:"first"`
	Last            jsonTime        `json:"last"`
	Conversations   int             `json:"conversations"`
	Calls           int             `json:"calls"`
	Skipped         int             `json:"skipped"`
	RestoredBlocks  int             `json:"restored_blocks"`
	UnmatchedBlocks int             `json:"unmatched_blocks"`
	Groups          []costGroupJSON `json:"groups"`
	Total           costTotalJSON   `json:"total"`
}

// costGroupJSON is the replay of one route and model.
type costGroupJSON struct {
	Route           string       `json:"route"`
	Model           string       `json:"model"`
	Profile         string       `json:"profile"`
	Renderer        string       `json:"renderer"` // "" = the raw messages
	Calls           int          `json:"calls"`
	Reported        int          `json:"reported"`
	Scale           float64      `json:"scale"`
	Actual          costBillJSON `json:"actual"`
	WhatIf          costBillJSON `json:"what_if"`
	SimulatedSent   simJSON      `json:"simulated_sent"`
	SimulatedWhatIf simJSON      `json:"simulated_what_if"`
	InternalCalls   int          `json:"internal_calls"`
	Internal        costBillJSON `json:"internal"`
}

// costBillJSON is one side of the comparison.
type costBillJSON struct {
	BytesSent int64 `json:"bytes_sent"`
	tokensJSON
	costJSON
}

type simJSON struct {
	PromptTokens   int64 `json:"prompt_tokens"`
	CacheHitTokens int64 `json:"cache_hit_tokens"`
}

// costTotalJSON sums the groups; dollars over the priced ones.
type costTotalJSON struct {
	Calls          int     `json:"calls"`
	BytesSent      int64   `json:"bytes_sent"`
	WhatIfBytes    int64   `json:"what_if_bytes"`
	ActualUSD      float64 `json:"actual_usd"`
	WhatIfUSD      float64 `json:"what_if_usd"`
	SavedUSD       float64 `json:"saved_usd"` // what-if minus actual: > 0 when what was sent cost less
	InternalUSD    float64 `json:"internal_usd"`
	UnpricedGroups int     `json:"unpriced_groups"`
}

func toCostReportJSON(rep *replay.Report, conversation string) costReportJSON {
	t := rep.Totals()
	j := costReportJSON{
		Policy: rep.Policy, Conversation: conversation, Since: jsonTime(rep.Since), First: jsonTime(rep.First), Last: jsonTime(rep.Last),
		Conversations: rep.Conversations, Calls: rep.Calls, Skipped: rep.Skipped, RestoredBlocks: rep.Restored,
		UnmatchedBlocks: rep.Unmatched, Groups: []costGroupJSON{},
		Total: costTotalJSON{t.Calls, t.SentBytes, t.WhatIfBytes, t.ActualUSD, t.WhatIfUSD, t.WhatIfUSD - t.ActualUSD, t.InternalUSD, t.Unpriced},
	}
	for _, g := range rep.Groups {
		wi := g.WhatIf()
		j.Groups = append(j.Groups, costGroupJSON{
			Route: g.Route, Model: g.Model, Profile: g.Profile, Renderer: g.Renderer, Calls: g.Calls, Reported: g.Reported, Scale: g.Scale(),
			Actual:          costBillJSON{g.SentBytes, toTokensJSON(g.Actual), toCostJSON(accounting.Price(g.Prices, g.Actual))},
			WhatIf:          costBillJSON{g.WhatIfBytes, toTokensJSON(wi), toCostJSON(accounting.Price(g.Prices, wi))},
			SimulatedSent:   simJSON{g.SimSent.Prompt, g.SimSent.Hit},
			SimulatedWhatIf: simJSON{g.SimWhatIf.Prompt, g.SimWhatIf.Hit},
			InternalCalls:   g.InternalCalls,
			Internal:        costBillJSON{0, toTokensJSON(g.Internal), toCostJSON(accounting.Price(g.Prices, g.Internal))},
		})
	}
	return j
}
