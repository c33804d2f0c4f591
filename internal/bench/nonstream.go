package bench

import (
	"context"
	"fmt"
	"net/http"
	"time"

	"github.com/shaperproxy/shaperproxy/internal/fakeupstream"
)

// benchNonStream sends requests at a fixed rate (open loop) directly and
// through the proxy, alternating, and records each latency.
func benchNonStream(ctx context.Context, e *env, sz sizes, t *table) error {
	reply := fakeupstream.Reply{Reasoning: "Short reasoning.", Content: "ok"}
	e.fake.Handle(func(fakeupstream.Recorded) (fakeupstream.Response, bool) {
		return fakeupstream.Response{Reply: &reply}, true
	})
	body := []byte(`{"model":"deepseek-reasoner","stream":false,"messages":[{"role":"system","content":"be brief"},{"role":"user","content":"hello"}]}`)
	c := newClient()
	urls := map[string]string{"direct": e.fakeURL + "/v1/chat/completions"}
	for _, v := range []string{bare, captured} {
		urls[v] = e.proxyURL[v] + "/fake/v1/chat/completions"
	}
	order := []string{"direct", bare, captured}
	for _, k := range order {
		if _, err := fire(ctx, c, urls[k], body, sz.warmup, sz.rate); err != nil {
			return err
		}
	}
	// Interleaved rounds, so drift hits every side alike. Each round gives
	// its own added p50; their median and range show the noise.
	const rounds = 10
	lat := map[string][]time.Duration{}
	added := map[string][]time.Duration{}
	for round := 0; round < rounds; round++ {
		p50 := map[string]time.Duration{}
		for _, k := range order {
			d, err := fire(ctx, c, urls[k], body, sz.nonStream/rounds, sz.rate)
			if err != nil {
				return err
			}
			lat[k] = append(lat[k], d...)
			p50[k] = pct(d, 50)
		}
		for _, k := range []string{bare, captured} {
			added[k] = append(added[k], p50[k]-p50["direct"])
		}
	}
	title := fmt.Sprintf("non-streaming, %d requests at %d/s", sz.nonStream, sz.rate)
	t.add(title, "latency p50 via "+bare, pct(lat["direct"], 50), pct(lat[bare], 50), "added ≤ 150 µs")
	t.add(title, "latency p99 via "+bare, pct(lat["direct"], 99), pct(lat[bare], 99), "added ≤ 1 ms")
	t.add(title, "latency p50 via "+captured, pct(lat["direct"], 50), pct(lat[captured], 50), "")
	t.add(title, "latency p99 via "+captured, pct(lat["direct"], 99), pct(lat[captured], 99), "")
	for _, k := range []string{bare, captured} {
		t.note(title, fmt.Sprintf("added p50 via %s, median of %d rounds", k, rounds),
			fmt.Sprintf("%s (rounds %s to %s)", fmtDur(pct(added[k], 50)), fmtDur(pct(added[k], 0)), fmtDur(pct(added[k], 100))))
	}
	if b := pct(added[bare], 50); b > 0 {
		t.ratio(title, "capture's share of the added p50 (medians of rounds)", float64(pct(added[captured], 50))/float64(b)-1, "≤ 10%")
	}
	t.ratio(title, "capture's share of the added p50 (all requests pooled)", addedShare(lat, 50), "≤ 10%")
	e.fake.Reset()
	return nil
}

// addedShare is how much capture adds to the proxy's added latency:
// (captured − direct) / (bare − direct) − 1.
func addedShare(lat map[string][]time.Duration, p float64) float64 {
	d := pct(lat["direct"], p)
	b, c := pct(lat[bare], p)-d, pct(lat[captured], p)-d
	if b <= 0 {
		return 0
	}
	return float64(c)/float64(b) - 1
}

// fire sends n requests at rate per second without waiting for answers
// (open loop), and returns every latency; any failed request is an error.
func fire(ctx context.Context, c *http.Client, url string, body []byte, n, rate int) ([]time.Duration, error) {
	var f failures
	lat := fireBodies(ctx, c, url, [][]byte{body}, n, rate, &f)
	return lat, f.first
}
