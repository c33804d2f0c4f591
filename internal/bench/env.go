package bench

import (
	"bytes"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/shaperproxy/shaperproxy/internal/config"
	"github.com/shaperproxy/shaperproxy/internal/fakeupstream"
	"github.com/shaperproxy/shaperproxy/internal/heapwarm"
	"github.com/shaperproxy/shaperproxy/proxy"
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
	proxyPID map[string]int // the proxy's process per variant (0: this process)
	build    Build
	child    []string // the command line that runs ServeChild
	proxies  []Proxy
	closers  []func()
	dir      string
	profile  string    // ProfileEnv for the children of the cost section
	without  string    // Options.Without (WithoutEnv for the children)
	against  string    // Options.Against: the binary whose proxy+all takes the core's column
	rounds   io.Writer // Options.Rounds: each saturation and latency round's line, or nil
}

// The proxy variants measured against the direct baseline.
const (
	bare     = "proxy"         // shaping, capture and guard off: the transparent core
	captured = "proxy+capture" // capture on
	shaped   = "proxy+shaping" // shaping and originals on
	full     = "proxy+all"     // the defaults: shaping, originals, guard and capture
	reviewed = "proxy+review"  // the masked review on, everything else off
	// streamedCore is the transparent core with every request body over
	// its max_body_bytes: streamed through unread, as the standard
	// library's reverse proxy sends it (the cost section's cutthrough).
	streamedCore = "proxy-streamed"
)

// newEnv starts the upstreams here and one proxy per variant: each in a
// child process of its own when subprocess is set (as a user runs it: its
// garbage collector and scheduler apart from the client's and the
// upstream's), in this process otherwise (the tests).
func newEnv(o Options) (*env, error) {
	e := &env{fake: fakeupstream.New(), build: o.Build, child: o.Child, profile: o.Profile, without: o.Without, against: o.Against, rounds: o.Rounds}
	subprocess := o.Subprocess
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
	e.proxyURL, e.proxyPID = map[string]string{}, map[string]int{}
	for _, v := range []string{bare, captured, shaped, full, reviewed} {
		start := e.startProxy
		if subprocess {
			start = e.startChild
		}
		if err := start(v); err != nil {
			e.close()
			return nil, err
		}
	}
	return e, nil
}

// Proxy is a proxy under measurement, as the command builds it.
type Proxy interface {
	http.Handler
	Close() error
}

// Build builds the proxy for a configuration (the command's setup).
type Build func(config.Config, *slog.Logger) (Proxy, error)

// variantConfig is the configuration of one proxy variant; without names
// features of proxy+all turned off (Options.Without).
func variantConfig(variant, fakeURL, streamURL, dir, without string) config.Config {
	c := config.Default()
	c.DataDir = filepath.Join(dir, strings.ReplaceAll(variant, "+", "-"))
	c.Routes = []config.Route{
		{Name: "fake", Prefix: "/fake", Upstream: fakeURL},
		{Name: "stream", Prefix: "/stream", Upstream: streamURL},
	}
	c.Shaping.Enabled = variant == shaped || variant == full
	c.Capture.Enabled = variant == captured || variant == full
	c.Guard.Enabled = variant == full
	if variant == streamedCore {
		c.MaxBodyBytes = 1
	}
	if variant == reviewed {
		c.Review.Routes = []string{"fake"}
	}
	if variant == full {
		for f := range strings.SplitSeq(without, ",") {
			switch f {
			case "capture":
				c.Capture.Enabled = false
			case "guard":
				c.Guard.Enabled = false
			case "shaping":
				c.Shaping.Enabled = false
			}
		}
	}
	return c
}

// WithoutEnv carries Options.Without to the children.
const WithoutEnv = "SHAPERPROXY_BENCH_WITHOUT"

// withoutFeatures are the features Options.Without may name.
var withoutFeatures = []string{"capture", "guard", "shaping"}

// checkWithout refuses a -without list that names no feature of
// proxy+all: a typo must not measure everything on under another name.
func checkWithout(without string) error {
	if without == "" {
		return nil
	}
	for f := range strings.SplitSeq(without, ",") {
		if !slices.Contains(withoutFeatures, f) {
			return fmt.Errorf("-without: no feature %q (proxy+all has %s)", f, strings.Join(withoutFeatures, ", "))
		}
	}
	return nil
}

func (e *env) startProxy(variant string) error {
	px, err := e.build(variantConfig(variant, e.fakeURL, e.streamURL, e.dir, e.without), slog.New(slog.DiscardHandler))
	if err != nil {
		return err
	}
	e.proxies = append(e.proxies, px)
	e.proxyURL[variant], err = startServer(px, &e.closers)
	return err
}

// startChild runs the variant's proxy in a child process (the command
// line in Options.Child, which runs ServeChild) and reads the URL it prints.
func (e *env) startChild(variant string) error {
	url, pid, err := e.spawn([]string{variant, e.fakeURL, e.streamURL, e.dir}, false)
	if err != nil {
		return err
	}
	e.proxyURL[variant], e.proxyPID[variant] = url, pid
	return nil
}

// ServeChild is the child side of Options.Subprocess: it serves one
// variant (args: variant, fake upstream URL, stream upstream URL, data
// directory), prints its URL, and returns when stdin closes.
//
// The cost section's children are served here too: "upstream" (no
// arguments), "reverseproxy" and "reverseproxy-read" (the upstream URL). With ProfileEnv set, a
// proxy variant writes its CPU and allocation profiles there.
func ServeChild(build Build, args []string) error {
	if len(args) > 0 && isRole(args[0]) {
		return serveRole(args[0], args[1:])
	}
	if len(args) != 4 {
		return fmt.Errorf("bench child: want variant, fake URL, stream URL and directory, got %q", args)
	}
	defer heapwarm.FromEnv()() // as serve does
	px, err := build(variantConfig(args[0], args[1], args[2], args[3], os.Getenv(WithoutEnv)), slog.New(slog.DiscardHandler))
	if err != nil {
		return err
	}
	defer px.Close()
	defer startProfile(args[0])()
	var closers []func()
	url, err := startServer(px, &closers)
	if err != nil {
		return err
	}
	fmt.Println(url)
	_, _ = io.Copy(io.Discard, os.Stdin)
	for _, c := range closers {
		c()
	}
	return nil
}

func (e *env) close() {
	for i := len(e.closers) - 1; i >= 0; i-- {
		e.closers[i]()
	}
	for _, px := range e.proxies {
		_ = px.Close()
	}
	_ = os.RemoveAll(e.dir)
}

func startServer(h http.Handler, closers *[]func()) (string, error) {
	url, stop, err := proxy.ServeLoopback(h)
	if err != nil {
		return "", err
	}
	*closers = append(*closers, stop)
	return url, nil
}

// newClient returns a client with enough idle connections for the rate.
func newClient() *http.Client {
	return &http.Client{Transport: &http.Transport{
		MaxIdleConns: 512, MaxIdleConnsPerHost: 512, DisableCompression: true,
	}, Timeout: 5 * time.Minute}
}

func gomaxprocs() int { return runtime.GOMAXPROCS(0) }

// rssBytes reads the resident set size of process pid (0: this one).
func rssBytes(pid int) int64 { return statusBytes(pid, "VmRSS:") }

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
