// Package app assembles shaperproxy from its configuration: the proxy,
// its request transforms and response observers, and the stores they
// write to. `serve`, `demo` and the benchmarks all build through it, so
// there is one wiring.
package app

import (
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"os"

	"github.com/shaperproxy/shaperproxy/config"
	"github.com/shaperproxy/shaperproxy/proxy"
)

// App is a configured proxy with the resources it owns. Close releases
// them; the proxy must not serve after Close.
type App struct {
	Proxy   *proxy.Proxy
	Config  config.Config
	closers []func() error
}

// Build assembles the App for c. c must be validated; c.DataDir must be
// set.
func Build(c config.Config, logger *slog.Logger) (*App, error) {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	a := &App{Config: c}
	opts, err := proxyOptions(c, logger)
	if err != nil {
		return nil, err
	}
	if a.Proxy, err = proxy.New(opts); err != nil {
		return nil, err
	}
	return a, nil
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
