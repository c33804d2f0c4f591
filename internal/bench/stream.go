package bench

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"time"

	"github.com/tidwall/gjson"
)

// epoch is the common clock of the upstream and the client (same process).
var epoch = time.Now()

// stampedStream streams ?n events, ?gap apart, each stamped with the
// monotonic time it was written, or ?bytes of 1 KiB events as fast as
// possible (for the memory run), or a hostile body (serveAbuse).
func stampedStream(w http.ResponseWriter, r *http.Request) {
	_, _ = io.Copy(io.Discard, r.Body)
	if serveAbuse(w, r) {
		return
	}
	w.Header().Set("Content-Type", "text/event-stream")
	rc := http.NewResponseController(w)
	q := r.URL.Query()
	if total, _ := strconv.ParseInt(q.Get("bytes"), 10, 64); total > 0 {
		bulk(w, total)
		return
	}
	n, _ := strconv.Atoi(q.Get("n"))
	gap, _ := time.ParseDuration(q.Get("gap"))
	pad := bytes.Repeat([]byte("x"), 40)
	for i := 0; i < n; i++ {
		if i > 0 {
			time.Sleep(gap)
		}
		fmt.Fprintf(w, "data: {\"t\":%d,\"i\":%d,\"choices\":[{\"index\":0,\"delta\":{\"content\":\"%s\"}}]}\n\n", time.Since(epoch), i, pad)
		if rc.Flush() != nil {
			return
		}
	}
	fmt.Fprint(w, "data: [DONE]\n\n")
}

func bulk(w io.Writer, total int64) {
	ev := []byte("data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"" + string(bytes.Repeat([]byte("y"), 1024-64)) + "\"}}]}\n\n")
	for sent := int64(0); sent < total; sent += int64(len(ev)) {
		if _, err := w.Write(ev); err != nil {
			return
		}
	}
	_, _ = w.Write([]byte("data: [DONE]\n\n"))
}

// streamStats are the client-side measurements of a set of streams.
type streamStats struct {
	ttfb     []time.Duration // request sent -> first event received
	gaps     []time.Duration // between consecutive events at the client
	delivery []time.Duration // upstream write -> client receipt, per event
	// coalesced counts events that arrived in the same read as the next
	// one; late counts events received after the upstream had already
	// written the next one (the definition of a missed flush).
	// Both also happen when the client is scheduled late: compare with
	// the direct baseline.
	coalesced, late int
	events          int
}

// readStamped runs one stream and records its timings.
func readStamped(ctx context.Context, c *http.Client, url string, st *streamStats) error {
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader([]byte(`{"model":"m","stream":true,"messages":[{"role":"user","content":"go"}]}`)))
	start := time.Now()
	resp, err := c.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	buf := make([]byte, 64<<10)
	var pending []byte
	var last time.Time
	var prevRecv time.Duration = -1 // receipt of the previous event, since epoch
	for {
		n, err := resp.Body.Read(buf)
		now := time.Now()
		pending = append(pending, buf[:n]...)
		inRead := 0
		for {
			i := bytes.Index(pending, []byte("\n\n"))
			if i < 0 {
				break
			}
			ev := pending[:i]
			pending = pending[i+2:]
			t := gjson.GetBytes(bytes.TrimPrefix(ev, []byte("data: ")), "t")
			if !t.Exists() {
				continue
			}
			inRead++
			st.events++
			stamp := time.Duration(t.Int())
			if prevRecv > stamp {
				st.late++ // the previous event reached us after this one was written
			}
			prevRecv = now.Sub(epoch)
			st.delivery = append(st.delivery, now.Sub(epoch)-stamp)
			if last.IsZero() {
				st.ttfb = append(st.ttfb, now.Sub(start))
			} else {
				st.gaps = append(st.gaps, now.Sub(last))
			}
			last = now
		}
		if inRead > 1 {
			st.coalesced += inRead - 1
		}
		if err != nil {
			if err == io.EOF {
				return nil
			}
			return err
		}
	}
}

func benchStream(ctx context.Context, e *env, sz sizes, t *table) error {
	c := newClient()
	q := fmt.Sprintf("/v1/chat/completions?n=%d&gap=%s", sz.events, sz.eventGap)
	var direct, proxied, capt streamStats
	for i := 0; i < sz.streams; i++ {
		if err := readStamped(ctx, c, e.streamURL+q, &direct); err != nil {
			return err
		}
		if err := readStamped(ctx, c, e.proxyURL[bare]+"/stream"+q, &proxied); err != nil {
			return err
		}
		if err := readStamped(ctx, c, e.proxyURL[captured]+"/stream"+q, &capt); err != nil {
			return err
		}
	}
	title := fmt.Sprintf("streaming, %d streams × %d events, %s apart", sz.streams, sz.events, sz.eventGap)
	t.add(title, "time to first event p50 via "+bare, pct(direct.ttfb, 50), pct(proxied.ttfb, 50), "")
	t.add(title, "time to first event p99 via "+bare, pct(direct.ttfb, 99), pct(proxied.ttfb, 99), "")
	t.add(title, "inter-chunk gap p50 via "+bare, pct(direct.gaps, 50), pct(proxied.gaps, 50), "")
	t.add(title, "inter-chunk gap p99 via "+bare, pct(direct.gaps, 99), pct(proxied.gaps, 99), "added ≤ 250 µs")
	t.add(title, "event delivery latency p50 via "+bare, pct(direct.delivery, 50), pct(proxied.delivery, 50), "")
	t.add(title, "event delivery latency p99 via "+bare, pct(direct.delivery, 99), pct(proxied.delivery, 99), "")
	t.add(title, "event delivery latency p50 via "+captured, pct(direct.delivery, 50), pct(capt.delivery, 50), "")
	t.add(title, "event delivery latency p99 via "+captured, pct(direct.delivery, 99), pct(capt.delivery, 99), "")
	t.addCount(title, "events received after the next was written, via "+bare, direct.late, proxied.late, "must be 0")
	t.addCount(title, "events received after the next was written, via "+captured, direct.late, capt.late, "must be 0")
	t.addCount(title, "events sharing a client read, via "+bare, direct.coalesced, proxied.coalesced, "")
	for _, n := range []int{direct.events, proxied.events, capt.events} {
		if n != sz.streams*sz.events {
			return fmt.Errorf("stream lost events: direct %d, proxy %d, capture %d", direct.events, proxied.events, capt.events)
		}
	}
	return nil
}

// benchRSS streams sz.bigStream bytes through the proxy and records how
// far the process's resident memory grew.
func benchRSS(ctx context.Context, e *env, sz sizes, t *table) error {
	c := newClient()
	q := fmt.Sprintf("/v1/chat/completions?bytes=%d", sz.bigStream)
	growth := func(url string, pid int) (int64, error) {
		base := rssBytes(pid)
		stop, peak := sampleRSS(pid, 20*time.Millisecond)
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader([]byte(`{"model":"m","stream":true,"messages":[]}`)))
		resp, err := c.Do(req)
		if err != nil {
			stop()
			return 0, err
		}
		n, err := io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		stop()
		if err == nil && n < sz.bigStream {
			err = fmt.Errorf("stream short: %d bytes", n)
		}
		return max(<-peak, rssBytes(pid)) - base, err
	}
	d, err := growth(e.streamURL+q, 0)
	if err != nil {
		return err
	}
	title := fmt.Sprintf("memory, one %d MiB stream", sz.bigStream>>20)
	for _, v := range []string{bare, full} {
		p, err := growth(e.proxyURL[v]+"/stream"+q, e.proxyPID[v])
		if err != nil {
			return err
		}
		what := "RSS growth of the proxy process via "
		if e.proxyPID[v] == 0 {
			what = "RSS growth (one process for all) via "
		}
		t.addBytes(title, what+v, d, p, "< 10 MB")
	}
	return nil
}

// sampleRSS samples the resident set size every period until stop is
// called; the peak is sent on the channel once sampling has ended.
func sampleRSS(pid int, period time.Duration) (stop func(), peak <-chan int64) {
	done, out := make(chan struct{}), make(chan int64, 1)
	go func() {
		tick := time.NewTicker(period)
		defer tick.Stop()
		var p int64
		for {
			select {
			case <-done:
				out <- p
				return
			case <-tick.C:
				p = max(p, rssBytes(pid))
			}
		}
	}()
	return func() { close(done) }, out
}
