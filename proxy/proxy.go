package proxy

import (
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/elazarl/goproxy"
)

// Route sends requests whose path starts with Prefix to Upstream.
type Route struct {
	// Name labels the route in logs, metrics and captures.
	Name string
	// Prefix is removed from the path before forwarding ("/deepseek").
	// The default route has no prefix.
	Prefix string
	// Upstream is the base URL requests are forwarded to; its path is
	// joined in front of the request path.
	Upstream *url.URL
	// APIKey, when set, replaces the client's Authorization header.
	APIKey string
}

// Options configure a Proxy. The zero value of each field is a working
// default, except Routes, which needs at least one route.
type Options struct {
	// Routes are tried by longest prefix; Default names the route used
	// when no prefix matches ("" = the route with an empty prefix).
	Routes  []Route
	Default string
	// Intercept lists hosts whose CONNECT tunnels are decrypted with CA
	// and served through the pipeline. CONNECT to other hosts is
	// tunnelled without decryption.
	Intercept []string
	// CA signs the certificates for intercepted hosts. Required when
	// Intercept is not empty.
	CA *tls.Certificate
	// Transport sends requests upstream. If nil, a transport built from
	// the timeouts below is used.
	Transport http.RoundTripper
	// ConnectTimeout bounds dialing upstream (default 10s);
	// ResponseHeaderTimeout bounds the wait for the response header
	// (default 10m); StreamIdleTimeout bounds the silence between two
	// reads of a response body (default 5m).
	ConnectTimeout        time.Duration
	ResponseHeaderTimeout time.Duration
	StreamIdleTimeout     time.Duration
	// MaxBodyBytes: request bodies larger than this are streamed through
	// unparsed (default 64 MiB).
	MaxBodyBytes int64
	// Transforms run in order on parsed chat requests.
	Transforms []RequestTransform
	// Observers see every call.
	Observers []Observer
	// Finishers may take over the end of chat responses (see Finisher).
	Finishers []Finisher
	// Logger receives one line per call; nil discards. No body and no
	// header value is ever logged.
	Logger *slog.Logger
	// Metrics collects the proxy's metrics; nil creates a new set.
	Metrics *Metrics
	// Admin, when set, serves the paths under AdminPrefix (the program's
	// own endpoints, such as the originals lookup) on both listeners.
	Admin http.Handler
}

// AdminPrefix is the path prefix of the program's own endpoints. Requests
// under it are never forwarded upstream.
const AdminPrefix = "/_shaperproxy/"

// Proxy is an http.Handler that serves base-URL requests, proxy-form
// requests and CONNECT tunnels on one listener. It is safe for concurrent
// use.
type Proxy struct {
	opts      Options
	routes    []Route
	def       *Route
	transport http.RoundTripper
	log       *slog.Logger
	metrics   *Metrics
	intercept map[string]bool
	gp        *goproxy.ProxyHttpServer
}

// New returns a Proxy for opts.
func New(opts Options) (*Proxy, error) {
	p := &Proxy{opts: opts, log: opts.Logger, metrics: opts.Metrics}
	if p.log == nil {
		p.log = slog.New(slog.DiscardHandler)
	}
	if p.metrics == nil {
		p.metrics = NewMetrics()
	}
	if p.opts.MaxBodyBytes <= 0 {
		p.opts.MaxBodyBytes = 64 << 20
	}
	if p.opts.StreamIdleTimeout <= 0 {
		p.opts.StreamIdleTimeout = 5 * time.Minute
	}
	if err := p.setRoutes(opts.Routes, opts.Default); err != nil {
		return nil, err
	}
	p.transport = opts.Transport
	if p.transport == nil {
		p.transport = newTransport(opts.ConnectTimeout, opts.ResponseHeaderTimeout)
	}
	if err := p.setIntercept(opts.Intercept, opts.CA); err != nil {
		return nil, err
	}
	return p, nil
}

func (p *Proxy) setRoutes(routes []Route, def string) error {
	if len(routes) == 0 {
		return errors.New("proxy: no route")
	}
	for i := range routes {
		r := routes[i]
		if r.Upstream == nil || r.Upstream.Host == "" {
			return fmt.Errorf("proxy: route %q has no upstream", r.Name)
		}
		p.routes = append(p.routes, r)
	}
	for i := range p.routes {
		r := &p.routes[i]
		if (def != "" && r.Name == def) || (def == "" && r.Prefix == "" && p.def == nil) {
			p.def = r
		}
	}
	if def != "" && p.def == nil {
		return fmt.Errorf("proxy: default route %q not found", def)
	}
	return nil
}

// newTransport returns the upstream transport. It never decompresses
// (DisableCompression): the client's Accept-Encoding goes upstream as it
// is and the body comes back as the upstream sent it.
func newTransport(connect, header time.Duration) *http.Transport {
	if connect <= 0 {
		connect = 10 * time.Second
	}
	if header <= 0 {
		header = 10 * time.Minute
	}
	return &http.Transport{
		DialContext:           (&net.Dialer{Timeout: connect, KeepAlive: 30 * time.Second}).DialContext,
		ForceAttemptHTTP2:     true,
		MaxIdleConns:          256,
		MaxIdleConnsPerHost:   64,
		IdleConnTimeout:       90 * time.Second,
		TLSHandshakeTimeout:   connect,
		ResponseHeaderTimeout: header,
		ExpectContinueTimeout: time.Second,
		DisableCompression:    true,
	}
}

// ServeHTTP dispatches: /healthz and /metrics, CONNECT and proxy-form
// requests (HTTPS_PROXY / HTTP_PROXY mode), and base-URL requests.
func (p *Proxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	switch {
	case r.Method == http.MethodConnect || r.URL.IsAbs():
		p.serveProxyForm(w, r)
	case r.URL.Path == "/healthz":
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		fmt.Fprintln(w, "ok")
	case r.URL.Path == "/metrics":
		p.metrics.Handler().ServeHTTP(w, r)
	case strings.HasPrefix(r.URL.Path, AdminPrefix):
		p.serveAdmin(w, r)
	default:
		route, path := p.route(r.URL.Path)
		if route == nil {
			writeError(w, http.StatusNotFound, "no_route", "shaperproxy: no route for this path and no default route")
			return
		}
		p.forward(w, r, route, path)
	}
}

// AdminHandler serves /healthz and /metrics alone, for a separate admin
// listener.
func (p *Proxy) AdminHandler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "ok") })
	mux.Handle("/metrics", p.metrics.Handler())
	mux.HandleFunc(AdminPrefix, p.serveAdmin)
	return mux
}

func (p *Proxy) serveAdmin(w http.ResponseWriter, r *http.Request) {
	if p.opts.Admin == nil {
		http.NotFound(w, r)
		return
	}
	p.opts.Admin.ServeHTTP(w, r)
}

// route finds the route for a base-URL path by longest prefix and returns
// the path with the prefix removed.
func (p *Proxy) route(path string) (*Route, string) {
	var best *Route
	for i := range p.routes {
		r := &p.routes[i]
		if r.Prefix == "" || !hasPathPrefix(path, r.Prefix) {
			continue
		}
		if best == nil || len(r.Prefix) > len(best.Prefix) {
			best = r
		}
	}
	if best != nil {
		rest := strings.TrimPrefix(path, best.Prefix)
		if rest == "" {
			rest = "/"
		}
		return best, rest
	}
	return p.def, path
}

func hasPathPrefix(path, prefix string) bool {
	return strings.HasPrefix(path, prefix) && (len(path) == len(prefix) || path[len(prefix)] == '/')
}

// routeForHost returns the route for an intercepted host: a route whose
// upstream is that host, or a passthrough route to the host itself.
func (p *Proxy) routeForHost(scheme, host string) *Route {
	for i := range p.routes {
		r := &p.routes[i]
		if strings.EqualFold(r.Upstream.Host, host) || strings.EqualFold(r.Upstream.Hostname(), host) {
			if r.Upstream.Path == "" || r.Upstream.Path == "/" {
				return r
			}
		}
	}
	return &Route{Name: hostRouteName(host), Upstream: &url.URL{Scheme: scheme, Host: host}}
}

func hostRouteName(host string) string {
	if h, _, err := net.SplitHostPort(host); err == nil {
		return h
	}
	return host
}
