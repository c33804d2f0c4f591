package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"sync"
	"time"

	"github.com/shaperproxy/shaperproxy/fakeupstream"
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
	if _, err := fire(ctx, c, e.fakeURL+"/v1/chat/completions", body, sz.warmup, sz.rate); err != nil {
		return err
	}
	if _, err := fire(ctx, c, e.proxyURL+"/fake/v1/chat/completions", body, sz.warmup, sz.rate); err != nil {
		return err
	}
	var direct, proxied []time.Duration
	for round := 0; round < 4; round++ {
		d, err := fire(ctx, c, e.fakeURL+"/v1/chat/completions", body, sz.nonStream/4, sz.rate)
		if err != nil {
			return err
		}
		p, err := fire(ctx, c, e.proxyURL+"/fake/v1/chat/completions", body, sz.nonStream/4, sz.rate)
		if err != nil {
			return err
		}
		direct, proxied = append(direct, d...), append(proxied, p...)
	}
	title := fmt.Sprintf("non-streaming, %d requests at %d/s", sz.nonStream, sz.rate)
	t.add(title, "latency p50", pct(direct, 50), pct(proxied, 50), "added ≤ 150 µs")
	t.add(title, "latency p99", pct(direct, 99), pct(proxied, 99), "added ≤ 1 ms")
	e.fake.Reset()
	return nil
}

// fire sends n requests at rate per second without waiting for answers
// (open loop), and returns every latency.
func fire(ctx context.Context, c *http.Client, url string, body []byte, n, rate int) ([]time.Duration, error) {
	lat := make([]time.Duration, n)
	errs := make(chan error, n)
	var wg sync.WaitGroup
	tick := time.NewTicker(time.Second / time.Duration(rate))
	defer tick.Stop()
	for i := 0; i < n; i++ {
		<-tick.C
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			start := time.Now()
			req, _ := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
			req.Header.Set("Content-Type", "application/json")
			resp, err := c.Do(req)
			if err != nil {
				errs <- err
				return
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			lat[i] = time.Since(start)
			if resp.StatusCode != http.StatusOK {
				errs <- fmt.Errorf("status %d", resp.StatusCode)
			}
		}(i)
	}
	wg.Wait()
	close(errs)
	return lat, <-errs
}
