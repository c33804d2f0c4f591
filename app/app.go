// Package app assembles shaperproxy from its configuration: the proxy,
// its request transforms and response observers, and the stores they
// write to. `serve`, `demo` and the benchmarks all build through it, so
// there is one wiring.
package app

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/shaperproxy/shaperproxy/capture"
	"github.com/shaperproxy/shaperproxy/guard"
	"github.com/shaperproxy/shaperproxy/ledger"
	"github.com/shaperproxy/shaperproxy/originals"

	"github.com/shaperproxy/shaperproxy/config"
	"github.com/shaperproxy/shaperproxy/proxy"
)

// App is a configured proxy with the resources it owns. Close releases
// them; the proxy must not serve after Close.
type App struct {
	Proxy     *proxy.Proxy
	Config    config.Config
	Metrics   *proxy.Metrics
	Store     *originals.Store
	Originals *originals.Writer
	Capture   *capture.Writer // nil when capture is off
	Ledger    *ledger.Store
	closers   []func() error
}

// Build assembles the App for c. c must be validated; c.DataDir must be
// set.
func Build(c config.Config, logger *slog.Logger) (*App, error) {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	a := &App{Config: c, Metrics: proxy.NewMetrics()}
	opts, err := proxyOptions(c, logger)
	if err != nil {
		return nil, err
	}
	opts.Metrics = a.Metrics
	rv, err := a.addLedger(&opts, logger)
	if err != nil {
		a.Close()
		return nil, err
	}
	gh, err := a.addGuard(&opts, logger)
	if err != nil {
		a.Close()
		return nil, err
	}
	if err := a.addShaping(&opts, logger); err != nil {
		a.Close()
		return nil, err
	}
	if err := a.addCapture(&opts); err != nil {
		a.Close()
		return nil, err
	}
	if rv != nil {
		rv.capture = a.Capture
		opts.Finishers = append(opts.Finishers, rv)
	}
	if gh != nil {
		gh.capture = a.Capture
	}
	if a.Proxy, err = proxy.New(opts); err != nil {
		a.Close()
		return nil, err
	}
	if rv != nil {
		rv.px = a.Proxy
	}
	return a, nil
}

// LedgerFile is the file of the proxy's own state (review insertions and
// checkpoints, guard acknowledgements) in the data directory.
const LedgerFile = "state.db"

// addLedger opens the ledger, adds the transform that restores revised
// turns (always: a turn revised while the review was on must stay
// consistent after it is turned off) and returns the reviewer when the
// review is on for some route.
func (a *App) addLedger(opts *proxy.Options, logger *slog.Logger) (*reviewer, error) {
	if err := os.MkdirAll(a.Config.DataDir, 0o700); err != nil {
		return nil, fmt.Errorf("data dir: %w", err)
	}
	st, err := ledger.Open(filepath.Join(a.Config.DataDir, LedgerFile), ledger.Options{})
	if err != nil {
		return nil, err
	}
	a.Ledger = st
	a.closers = append(a.closers, st.Close)
	ctx, cancel := context.WithCancel(context.Background())
	a.closers = append(a.closers, func() error { cancel(); return nil })
	go purgeEvery(ctx, time.Hour, func() { _, _ = st.Purge(time.Now()) })
	restored := prometheus.NewCounter(prometheus.CounterOpts{
		Name: "shaperproxy_review_restored_total", Help: "Revised turns put back into requests as draft, notice and continuation.",
	})
	opts.Transforms = append(opts.Transforms, &restorer{ledger: st, restored: restored})
	if err := a.Metrics.Register(restored); err != nil {
		return nil, err
	}
	if len(a.Config.Review.Routes) == 0 {
		return nil, nil
	}
	rv := &reviewer{cfg: a.Config.Review, ledger: st, log: logger, seen: newBoundedSet(4096), m: newReviewMetrics()}
	return rv, a.Metrics.Register(rv.m.collectors()...)
}

// addGuard adds the ECHO/STALL guard (transform and observer) when it is
// enabled. It runs after the restorer and before shaping: it reads the
// history as the client sent it.
func (a *App) addGuard(opts *proxy.Options, logger *slog.Logger) (*guardHook, error) {
	if !a.Config.Guard.Enabled {
		return nil, nil
	}
	g, err := guard.New(a.Config.Guard)
	if err != nil {
		return nil, err
	}
	upstreams := map[string]string{}
	for _, r := range a.Config.Routes {
		upstreams[r.Name] = r.Upstream
	}
	h := newGuardHook(g, a.Ledger, upstreams, logger)
	opts.Transforms = append(opts.Transforms, h)
	opts.Observers = append(opts.Observers, h)
	return h, a.Metrics.Register(h.events)
}

func purgeEvery(ctx context.Context, every time.Duration, fn func()) {
	t := time.NewTicker(every)
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

// addShaping opens the originals table and adds the shaping transform.
func (a *App) addShaping(opts *proxy.Options, logger *slog.Logger) error {
	if err := os.MkdirAll(a.Config.DataDir, 0o700); err != nil {
		return fmt.Errorf("data dir: %w", err)
	}
	oc := a.Config.Originals
	store, err := originals.Open(filepath.Join(a.Config.DataDir, originals.FileName), originals.Options{
		TTL: oc.TTL.Duration, MaxBytes: oc.MaxBytes,
		OnError: func(err error) { logger.Warn("originals table", "err", err) },
	})
	if err != nil {
		return err
	}
	a.Store = store
	a.closers = append(a.closers, store.Close)
	ctx, cancel := context.WithCancel(context.Background())
	go store.Maintain(ctx, 10*time.Minute)
	a.closers = append(a.closers, func() error { cancel(); return nil })
	a.Originals = store.Async(oc.Queue)
	a.closers = append(a.closers, a.Originals.Close)
	sh, err := newShaper(a.Config.Shaping, a.Originals, logger)
	if err != nil {
		return fmt.Errorf("shaping: %w", err)
	}
	dropped := prometheus.NewCounterFunc(prometheus.CounterOpts{
		Name: "shaperproxy_originals_dropped_total", Help: "Originals not recorded because the write queue was full.",
	}, func() float64 { return float64(a.Originals.Dropped()) })
	if err := a.Metrics.Register(append(sh.collectors(), dropped)...); err != nil {
		return err
	}
	opts.Transforms = append(opts.Transforms, sh)
	mux := http.NewServeMux()
	mux.Handle(OriginalsAdminPath, OriginalsHandler(store))
	opts.Admin = mux
	return nil
}

// Close releases what the App opened, in reverse order.
func (a *App) Close() error {
	var errs []error
	for i := len(a.closers) - 1; i >= 0; i-- {
		errs = append(errs, a.closers[i]())
	}
	a.closers = nil
	return errors.Join(errs...)
}

// proxyOptions turns the configuration into proxy options (routes,
// timeouts, intercept and its CA).
func proxyOptions(c config.Config, logger *slog.Logger) (proxy.Options, error) {
	opts := proxy.Options{
		Intercept:             c.Intercept,
		ConnectTimeout:        c.Timeouts.Connect.Duration,
		ResponseHeaderTimeout: c.Timeouts.ResponseHeader.Duration,
		StreamIdleTimeout:     c.Timeouts.StreamIdle.Duration,
		MaxBodyBytes:          c.MaxBodyBytes,
		Logger:                logger,
	}
	for _, r := range c.Routes {
		u, err := url.Parse(r.Upstream)
		if err != nil {
			return opts, fmt.Errorf("route %q: %w", r.Name, err)
		}
		opts.Routes = append(opts.Routes, proxy.Route{Name: r.Name, Prefix: r.Prefix, Upstream: u, APIKey: r.Key(os.Getenv)})
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
