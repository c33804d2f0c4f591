package bench

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/klauspost/compress/gzip"
)

// The hostile upstream answers of the "abuse" section (issue 10): what an
// upstream can send to exhaust the proxy's memory.
//
//	?bomb=N  a gzip body that decodes to one SSE event of N bytes
//	?flat=N  an SSE body of N bytes with no newline at all
func serveAbuse(w http.ResponseWriter, r *http.Request) bool {
	q := r.URL.Query()
	if n, _ := strconv.ParseInt(q.Get("bomb"), 10, 64); n > 0 {
		w.Header().Set("Content-Type", "text/event-stream")
		w.Header().Set("Content-Encoding", "gzip")
		_, _ = w.Write(gzipBomb(n))
		return true
	}
	if n, _ := strconv.ParseInt(q.Get("flat"), 10, 64); n > 0 {
		w.Header().Set("Content-Type", "text/event-stream")
		_, _ = io.Copy(w, io.LimitReader(repeatByte('z'), n))
		return true
	}
	return false
}

var bombs sync.Map // decoded size -> compressed body

// gzipBomb returns (once per size) a gzip stream of "data: " followed by
// n-6 bytes of 'a' and one blank line: one event of n bytes. 1 GiB
// compresses to about 1 MiB.
func gzipBomb(n int64) []byte {
	if b, ok := bombs.Load(n); ok {
		return b.([]byte)
	}
	var buf bytes.Buffer
	zw, _ := gzip.NewWriterLevel(&buf, gzip.BestCompression)
	_, _ = zw.Write([]byte("data: "))
	_, _ = io.Copy(zw, io.LimitReader(repeatByte('a'), n-8))
	_, _ = zw.Write([]byte("\n\n"))
	_ = zw.Close()
	b, _ := bombs.LoadOrStore(n, buf.Bytes())
	return b.([]byte)
}

type repeatByte byte

func (b repeatByte) Read(p []byte) (int, error) {
	for i := range p {
		p[i] = byte(b)
	}
	return len(p), nil
}

// benchAbuse measures the proxy's peak RSS (the default configuration,
// capture on) while (a) a gzip bomb decoding to one huge SSE event, (b) a
// newline-free SSE body and (c) many concurrent streams pass through it.
// With -subprocess the figure is the proxy process's own high-water mark
// (VmHWM, reset before each workload); in one process it is the whole
// process's, client and upstream included.
func benchAbuse(ctx context.Context, e *env, sz sizes, t *table) error {
	bomb, flat, streams, events, gap := sz.bomb, sz.flat, sz.abuseStreams, sz.abuseEv, 5*time.Millisecond
	v := full
	pid := e.proxyPID[v]
	base := e.proxyURL[v] + "/stream/v1/chat/completions"
	title := "abuse: what an upstream can send (default configuration, capture on)"
	what, target := "peak RSS of the proxy process", "target < 256 MB; "
	if pid == 0 {
		what, target = "peak RSS of the benchmark's process (client, upstream and proxy; use -subprocess)", ""
	}
	gzipBomb(bomb) // compressed before the measurement
	runs := []struct {
		name string
		fn   func() (int64, error)
	}{
		{fmt.Sprintf("gzip bomb: %d KiB decoding to one %d MiB event", len(gzipBomb(bomb))>>10, bomb>>20), func() (int64, error) {
			return drain(ctx, base+"?bomb="+strconv.FormatInt(bomb, 10))
		}},
		{fmt.Sprintf("%d MiB SSE body with no newline", flat>>20), func() (int64, error) {
			return drain(ctx, base+"?flat="+strconv.FormatInt(flat, 10))
		}},
		{fmt.Sprintf("%d concurrent streams × %d events, %s apart", streams, events, gap), func() (int64, error) {
			return concurrentStreams(ctx, fmt.Sprintf("%s?n=%d&gap=%s", base, events, gap), streams)
		}},
	}
	for _, run := range runs {
		before := rssBytes(pid)
		peak, n, err := measurePeak(pid, run.fn)
		if err != nil {
			return fmt.Errorf("%s: %w", run.name, err)
		}
		t.note(title, run.name+": "+what, fmt.Sprintf("%s (%s%s before; %s passed to the client)", mb(peak), target, mb(before), mb(n)))
	}
	return nil
}

func mb(b int64) string { return fmt.Sprintf("%.1f MB", float64(b)/1e6) }

// measurePeak runs fn and returns the peak resident set of process pid
// (0: this one) meanwhile: the kernel's high-water mark when it can be
// reset, else the highest of samples taken every 10 ms.
func measurePeak(pid int, fn func() (int64, error)) (peak, n int64, err error) {
	reset := resetPeak(pid)
	stop, sampled := sampleRSS(pid, 10*time.Millisecond)
	n, err = fn()
	stop()
	peak = max(<-sampled, rssBytes(pid))
	if reset {
		peak = max(peak, statusBytes(pid, "VmHWM:"))
	}
	return peak, n, err
}

// resetPeak resets the high-water mark of process pid (Linux 4.0+).
func resetPeak(pid int) bool {
	path := "/proc/self/clear_refs"
	if pid != 0 {
		path = fmt.Sprintf("/proc/%d/clear_refs", pid)
	}
	return os.WriteFile(path, []byte("5"), 0) == nil
}

// statusBytes reads a "Name: N kB" line of /proc/PID/status.
func statusBytes(pid int, name string) int64 {
	path := "/proc/self/status"
	if pid != 0 {
		path = fmt.Sprintf("/proc/%d/status", pid)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return -1
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, name); ok {
			kb, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")), 10, 64)
			return kb << 10
		}
	}
	return -1
}

// drain posts a streaming chat request and reads the whole answer as it
// came (no decompression); it returns the bytes read.
func drain(ctx context.Context, url string) (int64, error) {
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, url, strings.NewReader(`{"model":"m","stream":true,"messages":[]}`))
	req.Header.Set("Accept-Encoding", "gzip")
	resp, err := newClient().Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	return io.Copy(io.Discard, resp.Body)
}

// concurrentStreams runs n streams at once and returns the bytes read.
func concurrentStreams(ctx context.Context, url string, n int) (int64, error) {
	var wg sync.WaitGroup
	var mu sync.Mutex
	var total int64
	var first error
	c := newClient()
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			req, _ := http.NewRequestWithContext(ctx, http.MethodPost, url, strings.NewReader(`{"model":"m","stream":true,"messages":[]}`))
			resp, err := c.Do(req)
			var k int64
			if err == nil {
				k, err = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
			mu.Lock()
			total += k
			if first == nil {
				first = err
			}
			mu.Unlock()
		}()
	}
	wg.Wait()
	return total, first
}
