package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/shaperproxy/shaperproxy/capture"
	"github.com/shaperproxy/shaperproxy/internal/accounting"
	"github.com/shaperproxy/shaperproxy/internal/config"
	"github.com/shaperproxy/shaperproxy/internal/deliberate"
	"github.com/shaperproxy/shaperproxy/internal/guard"
	"github.com/shaperproxy/shaperproxy/internal/heapwarm"
	"github.com/shaperproxy/shaperproxy/internal/ledger"
	"github.com/shaperproxy/shaperproxy/internal/profile"
	"github.com/shaperproxy/shaperproxy/internal/reqshape"
	"github.com/shaperproxy/shaperproxy/internal/review"
	"github.com/shaperproxy/shaperproxy/originals"
	"github.com/shaperproxy/shaperproxy/proxy"
)

// stack is the proxy with the stores and hooks it owns, built from the
// configuration in one direction: stores, then hooks, then the proxy.
// `serve`, `demo`, `bench` and the tests all build through it.
type stack struct {
	*proxy.Proxy
	store     *originals.Store
	originals *originals.Writer
	capture   *capture.Writer // nil when capture is off
	closers   []func() error
}

// build assembles the stack for c. c must be valid; c.DataDir must be set.
// The transforms run in this order: restore revised turns, the deliberate
// tool, the guard (reads the history as the client sent it), shaping.
func build(c config.Config, logger *slog.Logger) (_ *stack, err error) {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	st := &stack{} // not the named result: a failure returns nil, and what was opened is closed
	defer func() {
		if err != nil {
			_ = st.Close()
		}
	}()
	opts, err := proxyOptions(c, logger)
	if err != nil {
		return nil, err
	}
	if err := ensureDataDir(c.DataDir); err != nil {
		return nil, err
	}
	led, err := ledger.Open(filepath.Join(c.DataDir, ledger.FileName), ledger.Options{})
	if err != nil {
		return nil, err
	}
	st.closers = append(st.closers, led.Close)
	st.run(func(ctx context.Context) {
		every(ctx, time.Hour, func() {
			if _, err := led.Purge(time.Now()); err != nil {
				logger.Warn("state purge", "err", err)
			}
		})
	})
	if err := st.openOriginals(c.Originals, c.DataDir, logger); err != nil {
		return nil, err
	}
	opts.Admin = st.adminHandler()
	var collectors []prometheus.Collector
	add := func(t proxy.RequestTransform, cs []prometheus.Collector) {
		opts.Transforms = append(opts.Transforms, t)
		collectors = append(collectors, cs...)
	}

	collectors = append(collectors, ledger.Collectors(led)...)
	collectors = append(collectors, heapwarm.Collectors()...)
	restorer := review.NewRestorer(led)
	st.closers = append(st.closers, restorer.Close)
	add(restorer, restorer.Collectors())
	if len(c.Deliberate.Routes) > 0 {
		d := deliberate.New(c.Deliberate, led, logger)
		st.closers = append(st.closers, d.Close)
		add(d, d.Collectors())
		opts.Finishers = append(opts.Finishers, d)
	}
	if c.Guard.Enabled {
		g, err := guard.New(c.Guard)
		if err != nil {
			return nil, err
		}
		h := guard.NewHook(g, led, upstreams(c.Routes), logger)
		add(h, h.Collectors())
		opts.Observers = append(opts.Observers, h)
	}
	profiles := profile.NewTable(c.Profiles, upstreams(c.Routes))
	shaper := reqshape.NewShaper(c.Shaping, reqshape.Options{Originals: st.originals, Profiles: profiles, State: led, Log: logger})
	st.closers = append(st.closers, shaper.Close)
	add(shaper, shaper.Collectors())
	collectors = append(collectors, originals.Collectors(st.originals)...)
	meter := accounting.NewMeter(profiles, 0) // tokens and cost the upstreams report, in /metrics
	opts.Observers = append(opts.Observers, meter)
	collectors = append(collectors, meter.Collectors()...)

	if c.Capture.Enabled {
		copts := c.Capture.Options(filepath.Join(c.DataDir, capture.Dir))
		copts.Logger = logger // losses: one warning per period, with counts
		w, err := capture.Open(copts)
		if err != nil {
			return nil, err
		}
		st.capture = w
		st.closers = append(st.closers, w.Close)
		opts.Observers = append(opts.Observers, capture.NewObserver(w, c.Capture.ClientRequests))
		collectors = append(collectors, capture.Collectors(w)...)
	}
	if len(c.Review.Routes) > 0 {
		rv := review.NewReviewer(c.Review, led, profiles, logger)
		opts.Finishers = append(opts.Finishers, rv)
		collectors = append(collectors, rv.Collectors()...)
	}
	if err := opts.Metrics.Register(collectors...); err != nil {
		return nil, err
	}
	if st.Proxy, err = proxy.New(opts); err != nil {
		return nil, err
	}
	st.closers = append(st.closers, func() error { st.Proxy.CloseIdleConnections(); return nil })
	return st, nil
}

// openOriginals opens the side table, its writer and its maintenance.
func (st *stack) openOriginals(c originals.Config, dataDir string, logger *slog.Logger) error {
	store, err := originals.Open(filepath.Join(dataDir, originals.FileName), originals.Options{
		TTL: c.TTL, MaxBytes: c.MaxBytes,
		Logger: logger, // losses and errors: one warning per period, with counts
	})
	if err != nil {
		return err
	}
	st.store = store
	st.closers = append(st.closers, store.Close)
	st.run(func(ctx context.Context) { store.Maintain(ctx, originals.DefaultMaintainEvery) })
	st.originals = store.Async(c.Queue)
	st.closers = append(st.closers, st.originals.Close)
	return nil
}

// run starts fn in a goroutine; Close cancels its context and waits for
// it to return.
func (st *stack) run(fn func(ctx context.Context)) {
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		fn(ctx)
	}()
	st.closers = append(st.closers, func() error { cancel(); wg.Wait(); return nil })
}

// every calls fn now and every period until ctx ends.
func every(ctx context.Context, period time.Duration, fn func()) {
	t := time.NewTicker(period)
	defer t.Stop()
	for {
		fn()
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// Flush writes what the queues hold (originals and capture) to disk,
// first letting the calls in flight end (up to flushWait): a call's last
// records are handed over after its client has the answer.
func (st *stack) Flush() error {
	if st.Proxy != nil {
		ctx, cancel := context.WithTimeout(context.Background(), flushWait)
		_ = st.Wait(ctx) // past flushWait, what has ended is written
		cancel()
	}
	st.originals.Flush()
	if st.capture != nil {
		return st.capture.Flush()
	}
	return nil
}

// flushWait bounds how long Flush waits for the calls in flight.
const flushWait = 5 * time.Second

// Close releases what the stack opened, in reverse order.
func (st *stack) Close() error {
	var errs []error
	for i := len(st.closers) - 1; i >= 0; i-- {
		errs = append(errs, st.closers[i]())
	}
	st.closers = nil
	return errors.Join(errs...)
}

// upstreams maps route names to their upstream URLs.
func upstreams(routes []config.Route) map[string]string {
	m := map[string]string{}
	for _, r := range routes {
		m[r.Name] = r.Upstream
	}
	return m
}

// proxyOptions turns the configuration into proxy options (routes and
// their CAs, timeouts, intercept and its CA, the tunnel list, the Host,
// Origin and client key checks).
func proxyOptions(c config.Config, logger *slog.Logger) (proxy.Options, error) {
	opts := proxy.Options{
		Intercept:             c.Intercept,
		Tunnel:                c.Tunnel,
		AllowedHosts:          c.AllowedHosts,
		AllowedOrigins:        c.AllowedOrigins,
		ConnectTimeout:        c.Timeouts.Connect,
		ResponseHeaderTimeout: c.Timeouts.ResponseHeader,
		StreamIdleTimeout:     c.Timeouts.StreamIdle,
		ClientIdleTimeout:     c.Timeouts.ClientIdle,
		RequestBodyTimeout:    c.Timeouts.RequestBody,
		MaxBodyBytes:          c.MaxBodyBytes,
		Logger:                logger,
		Metrics:               proxy.NewMetrics(),
	}
	keys, err := clientKeys(c, os.Getenv)
	if err != nil {
		return opts, err
	}
	opts.ClientKeys = keys
	for _, r := range c.Routes {
		u, err := url.Parse(r.Upstream)
		if err != nil {
			return opts, fmt.Errorf("route %q: %w", r.Name, err)
		}
		route := proxy.Route{Name: r.Name, Prefix: r.Prefix, Upstream: u, APIKey: r.Key(os.Getenv)}
		if r.CAFile != "" {
			if route.RootCAs, err = routeRoots(r); err != nil {
				return opts, err
			}
		}
		opts.Routes = append(opts.Routes, route)
		if r.Default {
			opts.Default = r.Name
		}
	}
	if len(c.Intercept) > 0 {
		ca, err := proxy.LoadCA(c.DataDir)
		if err != nil {
			return opts, fmt.Errorf("intercept: %w", err)
		}
		opts.CA = ca
	}
	return opts, nil
}

// adminHandler serves the program's own endpoints under proxy.AdminPrefix.
func (st *stack) adminHandler() http.Handler {
	mux := http.NewServeMux()
	mux.Handle(originals.AdminPath, originals.Handler(st.store))
	return mux
}
