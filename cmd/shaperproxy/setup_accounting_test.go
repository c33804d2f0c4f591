package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/shaperproxy/shaperproxy/internal/config"
	"github.com/shaperproxy/shaperproxy/internal/demo"
	"github.com/shaperproxy/shaperproxy/internal/fakeupstream"
	"github.com/shaperproxy/shaperproxy/internal/render"
	"github.com/shaperproxy/shaperproxy/internal/reqshape"
)

// accountingModel resolves to the deepseek-v4 profile (prices known),
// whose prompts the fake upstream's cache renders with the V4 encoder.
const accountingModel = "deepseek-v4-flash"

// capturedRun is a conversation driven through the proxy with capture on
// and the fake upstream's prompt cache billing every reply.
type capturedRun struct {
	*rig
	usages []fakeupstream.Usage
	bodies [][]byte // the chat requests the upstream received, in order
}

// runCaptured drives sc through a proxy built from the default
// configuration changed by mod; handle, when set, answers the requests it
// recognises (the review's) before the script.
func runCaptured(t *testing.T, sc script, mod func(*config.Config), handle func(fakeupstream.Recorded) (fakeupstream.Response, bool)) *capturedRun {
	t.Helper()
	r := newRig(t, mod)
	rd, err := render.Named(render.V4)
	if err != nil {
		t.Fatal(err)
	}
	cache := fakeupstream.NewPromptCache(rd, 0)
	r.up.SetPromptCache(cache)
	if handle != nil {
		r.up.Handle(handle)
	}
	sc.push(r.up)
	a := &demo.Agent{BaseURL: r.url, Model: accountingModel, Client: &http.Client{Timeout: 30 * time.Second}, ToolDefs: convTools,
		Tools: func(name, args string) string { return toolOutput(name, args, 8+len(args)%3*8) }}
	a.System("You are a coding agent. Use the tools; be brief.")
	for i := 0; i < sc.turns; i++ {
		if err := a.Turn(context.Background(), fmt.Sprintf("User turn %d: fix the next failing test.", i), func(demo.StepReport) {}); err != nil {
			t.Fatal(err)
		}
	}
	if err := r.app.Flush(); err != nil {
		t.Fatal(err)
	}
	run := &capturedRun{rig: r, usages: cache.Usages()}
	for _, rq := range r.up.Requests() {
		if strings.HasSuffix(rq.Path, "/chat/completions") {
			run.bodies = append(run.bodies, rq.Body)
		}
	}
	if len(run.bodies) != len(run.usages) {
		t.Fatalf("%d chat requests, %d usages billed", len(run.bodies), len(run.usages))
	}
	return run
}

// cli runs the command line and returns its stdout.
func cli(t *testing.T, args ...string) []byte {
	t.Helper()
	var out, errOut bytes.Buffer
	if err := run(context.Background(), args, &out, &errOut); err != nil {
		t.Fatalf("%v: %v\n%s", args, err, errOut.String())
	}
	return out.Bytes()
}

// kindOf classifies a request the upstream received.
func kindOf(body []byte) string {
	switch {
	case isChild(body):
		return "review-child"
	case isContinuation(body):
		return "review-continuation"
	}
	return "primary"
}

// tokenSum is what the fake upstream billed, per kind.
type tokenSum struct{ calls, prompt, hit, output, reasoning int64 }

func billedByKind(run *capturedRun) map[string]tokenSum {
	m := map[string]tokenSum{}
	for i, u := range run.usages {
		k := kindOf(run.bodies[i])
		s := m[k]
		s.calls++
		s.prompt += int64(u.PromptTokens)
		s.hit += int64(u.CacheHitTokens)
		s.output += int64(u.CompletionTokens)
		s.reasoning += int64(u.ReasoningTokens)
		m[k] = s
	}
	return m
}

// reviewHandle answers the review's child with an update (a reply the
// prompt cache bills) and its continuation with a revision.
func reviewHandle(req fakeupstream.Recorded) (fakeupstream.Response, bool) {
	switch {
	case isChild(req.Body):
		return fakeupstream.Response{Reply: &fakeupstream.Reply{Content: packetUpdate}}, true
	case isContinuation(req.Body):
		return fakeupstream.Response{Reply: &fakeupstream.Reply{Reasoning: "The reviewer is right; checking cmd/report.", Content: revised}}, true
	}
	return fakeupstream.Response{}, false
}

// TestCaptureStatsUsageMatchesUpstream drives a reviewed conversation
// through the proxy (the fake upstream's prompt cache billing every
// primary, review child and continuation call): `capture stats --json`
// sums, per kind of call, exactly the usage the upstream reported; the
// /metrics counters hold the same sums; `capture show` prints a child's
// usage and cost.
func TestCaptureStatsUsageMatchesUpstream(t *testing.T) {
	run := runCaptured(t, shortScript, func(c *config.Config) { c.Review.Routes = []string{"default"} }, reviewHandle)
	want := billedByKind(run)
	if want["review-child"].calls == 0 || want["review-continuation"].calls == 0 || want["primary"].hit == 0 {
		t.Fatalf("the run has no review calls or no cache hits: %+v", want)
	}
	var st struct {
		CostByKind []struct {
			Kind             string   `json:"kind"`
			Calls            int64    `json:"calls"`
			Reported         int64    `json:"reported"`
			PromptTokens     int64    `json:"prompt_tokens"`
			CacheHitTokens   int64    `json:"cache_hit_tokens"`
			CacheMissTokens  int64    `json:"cache_miss_tokens"`
			CompletionTokens int64    `json:"completion_tokens"`
			ReasoningTokens  int64    `json:"reasoning_tokens"`
			USD              *float64 `json:"usd"`
		} `json:"cost_by_kind"`
		Conversations []struct {
			Calls         int64 `json:"calls"`
			InternalCalls int64 `json:"internal_calls"`
			PromptTokens  int64 `json:"prompt_tokens"`
		} `json:"conversations"`
	}
	out := cli(t, "capture", "stats", "--json", "--data-dir", run.dataDir)
	if err := json.Unmarshal(out, &st); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if len(st.CostByKind) != len(want) {
		t.Fatalf("kinds %+v, want %v", st.CostByKind, want)
	}
	var all tokenSum
	for _, k := range st.CostByKind {
		w := want[k.Kind]
		got := tokenSum{k.Calls, k.PromptTokens, k.CacheHitTokens, k.CompletionTokens, k.ReasoningTokens}
		if got != w || k.Reported != k.Calls || k.CacheMissTokens != w.prompt-w.hit || k.USD == nil || *k.USD <= 0 {
			t.Errorf("%s: stats %+v (reported %d, miss %d, usd %v), the upstream billed %+v", k.Kind, got, k.Reported, k.CacheMissTokens, k.USD, w)
		}
		all.calls += w.calls
		all.prompt += w.prompt
	}
	if len(st.Conversations) != 1 || st.Conversations[0].Calls != all.calls || st.Conversations[0].PromptTokens != all.prompt ||
		st.Conversations[0].InternalCalls != want["review-child"].calls+want["review-continuation"].calls {
		t.Errorf("conversations %+v, want one of %d calls and %d prompt tokens", st.Conversations, all.calls, all.prompt)
	}
	checkUsageMetrics(t, strings.TrimSuffix(run.url, "/v1")+"/metrics", want)
	checkShowChild(t, run)
	text := string(cli(t, "capture", "stats", "--data-dir", run.dataDir))
	for _, s := range []string{"tokens and cost", "review-child", "review-continuation", "by kind of call", "the proxy's own calls", "markers found", "conversations (1"} {
		if !strings.Contains(text, s) {
			t.Errorf("capture stats text lacks %q:\n%s", s, text)
		}
	}
	t.Logf("capture stats:\n%s", text)
}

// checkUsageMetrics scrapes /metrics: the token counters per kind equal
// what the upstream billed.
func checkUsageMetrics(t *testing.T, url string, want map[string]tokenSum) {
	t.Helper()
	// A call is counted after its answer is sent: the last one may be a
	// moment late.
	var missing []string
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		missing = missingUsageMetrics(t, url, want)
		if len(missing) == 0 || time.Now().After(deadline) {
			break
		}
	}
	for _, m := range missing {
		t.Errorf("/metrics lacks %s", m)
	}
}

func missingUsageMetrics(t *testing.T, url string, want map[string]tokenSum) []string {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	var missing []string
	for kind, w := range want {
		for name, v := range map[string]int64{"prompt": w.prompt, "cache_hit": w.hit, "cache_miss": w.prompt - w.hit, "completion": w.output, "reasoning": w.reasoning} {
			series := fmt.Sprintf(`shaperproxy_usage_%s_tokens_total{kind="%s",model="%s",route="default"} %d`, name, kind, accountingModel, v)
			if !bytes.Contains(body, []byte(series+"\n")) {
				missing = append(missing, series)
			}
		}
		calls := fmt.Sprintf(`shaperproxy_usage_calls_total{kind="%s",model="%s",route="default",usage="reported"} %d`, kind, accountingModel, w.calls)
		if !bytes.Contains(body, []byte(calls+"\n")) {
			missing = append(missing, calls)
		}
	}
	if !bytes.Contains(body, []byte(`shaperproxy_usage_cost_dollars_total{kind="primary",model="`+accountingModel+`",route="default"}`)) {
		missing = append(missing, "a cost for the primary calls")
	}
	return missing
}

// checkShowChild shows the first review child: its kind, purpose and
// usage, priced, in JSON and text.
func checkShowChild(t *testing.T, run *capturedRun) {
	t.Helper()
	var found struct {
		Call     string `json:"call"`
		Internal bool   `json:"internal"`
	}
	out := cli(t, "capture", "find", "--text", "Automatic masked review, requested by the proxy", "--in", "request", "--json", "--data-dir", run.dataDir)
	if err := json.Unmarshal(bytes.SplitN(out, []byte("\n"), 2)[0], &found); err != nil || !found.Internal {
		t.Fatalf("no review child found: %v\n%s", err, out)
	}
	var show struct {
		Kind, Purpose, Conversation string
		Response                    struct {
			Choices []struct{ Content string }
		}
		Cost *struct {
			Profile        string   `json:"profile"`
			UsageShape     string   `json:"usage_shape"`
			PromptTokens   int64    `json:"prompt_tokens"`
			CacheHitTokens int64    `json:"cache_hit_tokens"`
			USD            *float64 `json:"usd"`
		}
	}
	out = cli(t, "capture", "show", found.Call, "--json", "--data-dir", run.dataDir)
	if err := json.Unmarshal(out, &show); err != nil {
		t.Fatal(err)
	}
	var child fakeupstream.Usage
	for i, b := range run.bodies {
		if isChild(b) {
			child = run.usages[i]
			break
		}
	}
	c := show.Cost
	if show.Kind != "review-child" || show.Purpose != "review-child" || show.Conversation == "" || c == nil ||
		c.Profile != "deepseek-v4" || c.UsageShape != "deepseek" || c.PromptTokens != int64(child.PromptTokens) ||
		c.CacheHitTokens != int64(child.CacheHitTokens) || c.USD == nil ||
		len(show.Response.Choices) != 1 || show.Response.Choices[0].Content != packetUpdate { // the body, read in pieces, rebuilt whole
		t.Errorf("capture show of the child: %s\nwant the usage %+v", out, child)
	}
	text := string(cli(t, "capture", "show", found.Call, "--data-dir", run.dataDir))
	if !strings.Contains(text, "internal: review-child") || !strings.Contains(text, fmt.Sprintf("prompt %s (cache hit %s", fmtCount(int64(child.PromptTokens)), fmtCount(int64(child.CacheHitTokens)))) ||
		!strings.Contains(text, "cost: $") {
		t.Errorf("capture show text:\n%s", text)
	}
	t.Logf("capture show (a review child):\n%s", text)
}

// costReport is the part of `capture cost --json` the tests read.
type costReport struct {
	Calls           int `json:"calls"`
	RestoredBlocks  int `json:"restored_blocks"`
	UnmatchedBlocks int `json:"unmatched_blocks"`
	Groups          []struct {
		Scale  float64 `json:"scale"`
		Actual struct {
			BytesSent       int64 `json:"bytes_sent"`
			PromptTokens    int64 `json:"prompt_tokens"`
			CacheHitTokens  int64 `json:"cache_hit_tokens"`
			CacheMissTokens int64 `json:"cache_miss_tokens"`
		} `json:"actual"`
		WhatIf struct {
			BytesSent       int64 `json:"bytes_sent"`
			PromptTokens    int64 `json:"prompt_tokens"`
			CacheHitTokens  int64 `json:"cache_hit_tokens"`
			CacheMissTokens int64 `json:"cache_miss_tokens"`
		} `json:"what_if"`
	} `json:"groups"`
	Total struct {
		ActualUSD float64 `json:"actual_usd"`
		WhatIfUSD float64 `json:"what_if_usd"`
		SavedUSD  float64 `json:"saved_usd"`
	} `json:"total"`
}

func costOf(t *testing.T, dataDir string, args ...string) costReport {
	t.Helper()
	var rep costReport
	out := cli(t, append([]string{"capture", "cost", "--json", "--data-dir", dataDir}, args...)...)
	if err := json.Unmarshal(out, &rep); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if len(rep.Groups) != 1 {
		t.Fatalf("groups: %s", out)
	}
	return rep
}

// TestCaptureCostAgainstGroundTruth captures the benchmark conversation
// through the proxy under a shaping policy, then asks `capture cost`
// what it would have cost without shaping, and compares with the truth:
// the same conversation run without shaping on the same fake upstream.
// The what-if requests are byte for byte the unshaped run's (every shaped
// block put back from the captured replies), its estimated tokens are
// exactly what the upstream billed the unshaped run, replaying under the
// policy that ran reproduces what was sent, and the verdict says which
// cost more.
func TestCaptureCostAgainstGroundTruth(t *testing.T) {
	truth := runCaptured(t, benchScript, noShaping, nil)
	var tBytes, tPrompt, tHit int64
	for i, u := range truth.usages {
		tBytes += int64(len(truth.bodies[i]))
		tPrompt += int64(u.PromptTokens)
		tHit += int64(u.CacheHitTokens)
	}
	for _, policy := range []reqshape.Policy{reqshape.PolicyKeepRecent, reqshape.PolicyCacheAware} {
		t.Run(string(policy), func(t *testing.T) {
			run := runCaptured(t, benchScript, func(c *config.Config) { c.Shaping.Policy = policy }, nil)
			rep := costOf(t, run.dataDir)
			g := rep.Groups[0]
			if rep.Calls != len(run.bodies) || rep.UnmatchedBlocks != 0 || rep.RestoredBlocks == 0 {
				t.Errorf("replayed %d of %d calls, restored %d blocks, %d unmatched", rep.Calls, len(run.bodies), rep.RestoredBlocks, rep.UnmatchedBlocks)
			}
			if g.WhatIf.BytesSent != tBytes || g.Scale != 1 {
				t.Errorf("what-if bytes %d, the unshaped run sent %d (scale %v)", g.WhatIf.BytesSent, tBytes, g.Scale)
			}
			if g.WhatIf.PromptTokens != tPrompt || g.WhatIf.CacheHitTokens != tHit {
				t.Errorf("what-if prompt %d hit %d; the upstream billed the unshaped run prompt %d hit %d", g.WhatIf.PromptTokens, g.WhatIf.CacheHitTokens, tPrompt, tHit)
			}
			same := costOf(t, run.dataDir, "--policy", string(policy))
			if s := same.Groups[0]; s.WhatIf != s.Actual {
				t.Errorf("replayed under %s (the policy that ran): what-if %+v, actual %+v", policy, s.WhatIf, s.Actual)
			}
			saved := rep.Total.WhatIfUSD - rep.Total.ActualUSD
			if math.Abs(rep.Total.SavedUSD-saved) > 1e-12 {
				t.Errorf("saved_usd %v, what-if − actual %v", rep.Total.SavedUSD, saved)
			}
			text := string(cli(t, "capture", "cost", "--data-dir", run.dataDir))
			verdict := "saved $"
			if saved < 0 {
				verdict = "more than no shaping would have"
			}
			if !strings.Contains(text, "total: actual $") || !strings.Contains(text, verdict) {
				t.Errorf("capture cost text:\n%s", text)
			}
			t.Logf("%s run, capture cost:\n%s", policy, text)
			checkCostFilters(t, run.dataDir, rep.Calls)
		})
	}
}

// checkCostFilters: --conversation takes a key prefix, --since leaves out
// older calls, and a policy that does not exist is a usage error.
func checkCostFilters(t *testing.T, dataDir string, calls int) {
	t.Helper()
	for _, tt := range []struct {
		args  []string
		calls int
	}{
		{[]string{"--conversation", "c:"}, calls},
		{[]string{"--conversation", "no-such-key"}, 0},
		{[]string{"--since", "2999-01-01"}, 0},
		{[]string{"--since", "1h"}, calls},
	} {
		var rep costReport
		out := cli(t, append([]string{"capture", "cost", "--json", "--data-dir", dataDir}, tt.args...)...)
		if err := json.Unmarshal(out, &rep); err != nil || rep.Calls != tt.calls {
			t.Errorf("capture cost %v: %d calls (%v), want %d", tt.args, rep.Calls, err, tt.calls)
		}
	}
	err := run(context.Background(), []string{"capture", "cost", "--policy", "cheapest", "--data-dir", dataDir}, io.Discard, io.Discard)
	var ue *usageError
	if !errors.As(err, &ue) {
		t.Errorf("--policy cheapest: %v, want a usage error", err)
	}
}
