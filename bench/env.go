package main

import (
	"bytes"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/shaperproxy/shaperproxy/app"
	"github.com/shaperproxy/shaperproxy/config"
	"github.com/shaperproxy/shaperproxy/fakeupstream"
)

// env is one fake upstream, a stamping stream upstream and the proxy in
// front of them, all on loopback in this process.
type env struct {
	fake      *fakeupstream.Server
	fakeURL   string
	streamURL string
	// proxies by variant; each routes /fake -> fake upstream and
	// /stream -> stream upstream.
	proxyURL map[string]string
	apps     []*app.App
	closers  []func()
	dir      string
}

// The proxy variants measured against the direct baseline.
const (
	bare     = "proxy"         // shaping, capture and guard off: the transparent core
	captured = "proxy+capture" // capture on
	shaped   = "proxy+shaping" // shaping and originals on
	full     = "proxy+all"     // the defaults: shaping, originals, guard and capture
	reviewed = "proxy+review"  // the masked review on, everything else off
)

func newEnv() (*env, error) {
	e := &env{fake: fakeupstream.New()}
	var err error
	if e.fakeURL, err = startServer(e.fake, &e.closers); err != nil {
		return nil, err
	}
	if e.streamURL, err = startServer(http.HandlerFunc(stampedStream), &e.closers); err != nil {
		return nil, err
	}
	if e.dir, err = os.MkdirTemp("", "shaperproxy-bench-"); err != nil {
		return nil, err
	}
	e.proxyURL = map[string]string{}
	for _, v := range []string{bare, captured, shaped, full, reviewed} {
		if err := e.startProxy(v); err != nil {
			return nil, err
		}
	}
	return e, nil
}

func (e *env) startProxy(variant string) error {
	c := config.Default()
	c.DataDir = filepath.Join(e.dir, strings.ReplaceAll(variant, "+", "-"))
	c.Routes = []config.Route{
		{Name: "fake", Prefix: "/fake", Upstream: e.fakeURL},
		{Name: "stream", Prefix: "/stream", Upstream: e.streamURL},
	}
	c.Shaping.Enabled = variant == shaped || variant == full
	c.Capture.Enabled = variant == captured || variant == full
	c.Guard.Enabled = variant == full
	if variant == reviewed {
		c.Review.Routes = []string{"fake"}
	}
	a, err := app.Build(c, slog.New(slog.DiscardHandler))
	if err != nil {
		return err
	}
	e.apps = append(e.apps, a)
	e.proxyURL[variant], err = startServer(a.Proxy, &e.closers)
	return err
}

func (e *env) close() {
	for i := len(e.closers) - 1; i >= 0; i-- {
		e.closers[i]()
	}
	for _, a := range e.apps {
		_ = a.Close()
	}
	_ = os.RemoveAll(e.dir)
}

func startServer(h http.Handler, closers *[]func()) (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	*closers = append(*closers, func() { _ = srv.Close() })
	return "http://" + ln.Addr().String(), nil
}

// newClient returns a client with enough idle connections for the rate.
func newClient() *http.Client {
	return &http.Client{Transport: &http.Transport{
		MaxIdleConns: 512, MaxIdleConnsPerHost: 512, DisableCompression: true,
	}, Timeout: 5 * time.Minute}
}

func gomaxprocs() int { return runtime.GOMAXPROCS(0) }

// rssBytes reads the resident set size of this process.
func rssBytes() int64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return -1
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")), 10, 64)
			return kb << 10
		}
	}
	return -1
}

func fmtDur(d time.Duration) string {
	switch {
	case d < 0:
		return "-" + fmtDur(-d)
	case d < time.Millisecond:
		return fmt.Sprintf("%d µs", d.Microseconds())
	default:
		return fmt.Sprintf("%.2f ms", float64(d)/float64(time.Millisecond))
	}
}

// timedPost sends body to url, reads the whole answer and returns how long
// that took.
func timedPost(c *http.Client, url string, body []byte) (time.Duration, error) {
	start := time.Now()
	resp, err := c.Post(url, "application/json", bytes.NewReader(body))
	if err != nil {
		return 0, err
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return time.Since(start), nil
}
