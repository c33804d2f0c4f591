package bench

import (
	"bytes"
	"context"
	"fmt"
	"path/filepath"
	"time"

	"github.com/shaperproxy/shaperproxy/fixtures"
	"github.com/shaperproxy/shaperproxy/internal/fakeupstream"
	"github.com/shaperproxy/shaperproxy/originals"
	"github.com/tidwall/sjson"
)

// benchShaping sends the seed's 631-message, 856k-character request
// through the proxy with shaping off and on. The first shaped request
// shapes every block; the later ones find them in the memo, which is the
// common case (agents re-send the same history).
func benchShaping(ctx context.Context, e *env, sz sizes, t *table) error {
	body, _ := sjson.SetBytes(fixtures.SeedHistory(), "stream", false)
	e.fake.Handle(func(fakeupstream.Recorded) (fakeupstream.Response, bool) {
		return fakeupstream.Response{Status: 200, Body: []byte(`{"choices":[{"index":0,"message":{"role":"assistant","content":"ok"},"finish_reason":"stop"}]}`)}, true
	})
	defer e.fake.Reset()
	c := newClient()
	send := func(url string) (time.Duration, error) { return timedPost(c, url, body) }
	urls := []string{e.fakeURL + "/v1/chat/completions", e.proxyURL[bare] + "/fake/v1/chat/completions", e.proxyURL[shaped] + "/fake/v1/chat/completions"}
	first, err := send(urls[2]) // cold: every block shaped
	if err != nil {
		return err
	}
	lat := make([][]time.Duration, len(urls))
	for i := 0; i < sz.shapeRequests; i++ {
		for k, u := range urls {
			d, err := send(u)
			if err != nil {
				return err
			}
			lat[k] = append(lat[k], d)
		}
	}
	title := fmt.Sprintf("the seed's request: 631 messages, %d KB, %d requests", len(body)>>10, sz.shapeRequests)
	t.add(title, "latency p50 via "+bare+" (shaping off)", pct(lat[0], 50), pct(lat[1], 50), "")
	t.add(title, "latency p50 via "+shaped+" (memo warm)", pct(lat[0], 50), pct(lat[2], 50), "")
	t.add(title, "first request via "+shaped+" (every block shaped)", pct(lat[0], 50), first, "")
	added := func(k int) float64 { return float64(pct(lat[k], 50) - pct(lat[0], 50)) }
	if a := added(1); a > 0 {
		t.ratio(title, "shaping's added cost as a share of the bare proxy's", added(2)/a-1, "")
	}
	return benchOriginals(e, sz, t)
}

// benchOriginals measures a synchronous Put of one request's originals
// (25 blocks of ~2 KB, one bbolt transaction with fsync) and the
// asynchronous enqueue the request path pays.
func benchOriginals(e *env, sz sizes, t *table) error {
	st, err := originals.Open(filepath.Join(e.dir, "bench-originals.db"), originals.Options{})
	if err != nil {
		return err
	}
	defer st.Close()
	entries := func(i int) []originals.Entry {
		es := make([]originals.Entry, 25)
		for k := range es {
			es[k] = originals.Entry{Shaped: fmt.Sprintf("shaped %d %d", i, k), Original: string(bytes.Repeat([]byte{'x'}, 2000)) + fmt.Sprint(i, k), Conversation: "c", Turn: 1}
		}
		return es
	}
	var put, enq []time.Duration
	for i := 0; i < sz.originalsPuts; i++ {
		es := entries(i)
		start := time.Now()
		if err := st.Put(es); err != nil {
			return err
		}
		put = append(put, time.Since(start))
	}
	w := st.Async(1024)
	for i := 0; i < sz.originalsPuts; i++ {
		es := entries(sz.originalsPuts + i)
		start := time.Now()
		w.Put(es)
		enq = append(enq, time.Since(start))
		time.Sleep(time.Millisecond)
	}
	w.Close()
	title := fmt.Sprintf("originals, %d writes of 25 blocks × 2 KB", sz.originalsPuts)
	t.add(title, "synchronous Put p50 (one transaction, fsync)", 0, pct(put, 50), "")
	t.add(title, "synchronous Put p99", 0, pct(put, 99), "")
	t.add(title, "enqueue on the request path p50", 0, pct(enq, 50), "")
	t.add(title, "enqueue on the request path p99", 0, pct(enq, 99), "")
	return nil
}
