package proxy

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/elazarl/goproxy"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/shaperproxy/shaperproxy/conv"
	"github.com/shaperproxy/shaperproxy/sse"
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
	// RootCAs, when set, are the certificate authorities trusted for this
	// route's upstream instead of the system's (setup adds the route's
	// ca_file to the system pool).
	RootCAs *x509.CertPool

	rt http.RoundTripper // the route's own transport (RootCAs), or nil
}

// Options configure a Proxy. The zero value of each field is a working
// default, except Routes, which needs at least one route.
type Options struct {
	// Routes are tried by longest prefix; Default names the route used
	// when no prefix matches ("" = the route with an empty prefix).
	Routes  []Route
	Default string
	// Intercept lists hosts whose CONNECT tunnels are decrypted with CA
	// and served through the pipeline.
	Intercept []string
	// Tunnel lists the other hosts CONNECT and proxy-form requests may
	// reach, without decryption: "host", "host:port", "*.domain" or "*".
	// Hosts and addresses listed exactly may be private; a wildcard
	// reaches public addresses only. Empty: the intercepted hosts only.
	// The proxy's own listeners are never reached. Anything else is
	// answered 403.
	Tunnel []string
	// AllowedHosts are the Host names base-URL requests may carry besides
	// IP addresses, localhost and *.localhost; any other (a DNS-rebinding
	// name) is answered 403.
	AllowedHosts []string
	// AllowedOrigins are the browser origins ("http://localhost:3000")
	// whose requests are served; a request with another Origin, or that
	// Sec-Fetch-Site marks as another site's, is answered 403 ("*"
	// allows every origin). SDKs and agent tools send no Origin.
	AllowedOrigins []string
	// ClientKeys, when set, are required of every request but /healthz
	// (the admin endpoints excepted: they answer direct loopback clients
	// only): X-Shaper-Key, or Authorization: Bearer on a route with its
	// own APIKey, in base-URL mode; Proxy-Authorization for CONNECT and
	// proxy-form requests. Keys are compared in constant time and removed
	// from the request before any hook, observer or log sees it.
	ClientKeys []string
	// CA signs the certificates for intercepted hosts. Required when
	// Intercept is not empty.
	CA *tls.Certificate
	// Transport sends requests upstream. If nil, a transport built from
	// the timeouts below is used: plain-HTTP upstreams get HTTP/1.1
	// connections kept alive and used in the handler's goroutine (a body
	// over 64 KiB written from a goroutine of its own), the rest an
	// http.Transport. The stream idle timeout closes a response body while
	// a Read of it may be waiting: the body must let Close run then and
	// make that Read return (net/http's transports do).
	Transport http.RoundTripper
	// ConnectTimeout bounds dialing upstream (default 10s);
	// ResponseHeaderTimeout bounds the wait for the response header
	// (default 10m); StreamIdleTimeout bounds the silence between two
	// reads of a response body (default 5m).
	ConnectTimeout        time.Duration
	ResponseHeaderTimeout time.Duration
	StreamIdleTimeout     time.Duration
	// ClientIdleTimeout bounds each read of a request body and each write
	// to the client (default 1m): a client that stops sending its body, or
	// stops reading the response, is cut; a stream that flows never is.
	// RequestBodyTimeout bounds the whole read of a body the proxy holds
	// (up to MaxBodyBytes; default 5m).
	ClientIdleTimeout  time.Duration
	RequestBodyTimeout time.Duration
	// MaxEventBytes bounds what the proxy keeps of one SSE event for the
	// observers and finishers (default sse.DefaultMaxEvent, 4 MiB). A
	// longer event still reaches the client whole, as it arrives; the
	// observers get its beginning, marked Truncated.
	MaxEventBytes int
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
	tunnel    []hostPattern
	access    access
	gp        *goproxy.ProxyHttpServer
	flight    flight   // calls, intercepting servers and tunnels in flight
	ownPorts  portSet  // ports of the proxy's listeners
	selfConns sync.Map // local addresses of the proxy's own connections to loopback
	keys      *conv.KeyCache
	reparse   *conv.Reparser
	lastURL   urlMemo               // the upstream URL observers get, printed
	holdSteps []prometheus.Observer // the hold's steps' histograms (holdStep): the parse, each transform, the send
}

// New returns a Proxy for opts.
func New(opts Options) (*Proxy, error) {
	p := &Proxy{opts: opts, log: opts.Logger, metrics: opts.Metrics, keys: conv.NewKeyCache(4096), reparse: conv.NewReparser(reparseBytes)}
	if p.log == nil {
		p.log = slog.New(slog.DiscardHandler)
	}
	if p.metrics == nil {
		p.metrics = NewMetrics()
	}
	if p.opts.MaxBodyBytes <= 0 {
		p.opts.MaxBodyBytes = 64 << 20
	}
	p.setDefaults()
	p.flight.init()
	p.access = newAccess(opts)
	var err error
	if p.tunnel, err = parsePatterns(opts.Tunnel); err != nil {
		return nil, err
	}
	p.transport = opts.Transport
	if p.transport == nil {
		p.transport = p.upstreamTransport(nil)
	}
	if err := p.setRoutes(opts.Routes, opts.Default); err != nil {
		return nil, err
	}
	if err := p.setIntercept(opts.Intercept, opts.CA); err != nil {
		return nil, err
	}
	p.metrics.reparse.add(p.reparse) // counted once the proxy is made
	p.holdSteps = holdStepObservers(p.metrics.holdStep, opts.Transforms)
	return p, nil
}

func (p *Proxy) setDefaults() {
	o := &p.opts
	if o.StreamIdleTimeout <= 0 {
		o.StreamIdleTimeout = 5 * time.Minute
	}
	if o.ClientIdleTimeout <= 0 {
		o.ClientIdleTimeout = time.Minute
	}
	if o.RequestBodyTimeout <= 0 {
		o.RequestBodyTimeout = 5 * time.Minute
	}
	if o.MaxEventBytes <= 0 {
		o.MaxEventBytes = sse.DefaultMaxEvent
	}
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
		if r.RootCAs != nil {
			r.rt = p.routeTransport(r.RootCAs)
		}
		p.routes = append(p.routes, r)
		p.metrics.initRoute(r.Name)
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

// newTransport returns the upstream transport, trusting roots (nil: the
// system's). It never decompresses (DisableCompression): the client's
// Accept-Encoding goes upstream as it is and the body comes back as the
// upstream sent it. Its dialer never connects to the proxy's own
// listeners.
func (p *Proxy) newTransport(roots *x509.CertPool) *http.Transport {
	connect, header := p.opts.ConnectTimeout, p.opts.ResponseHeaderTimeout
	if connect <= 0 {
		connect = 10 * time.Second
	}
	if header <= 0 {
		header = 10 * time.Minute
	}
	t := &http.Transport{
		DialContext:           p.dialer(connect),
		ForceAttemptHTTP2:     true,
		MaxIdleConns:          256,
		MaxIdleConnsPerHost:   64,
		IdleConnTimeout:       90 * time.Second,
		TLSHandshakeTimeout:   connect,
		ResponseHeaderTimeout: header,
		ExpectContinueTimeout: time.Second,
		DisableCompression:    true,
	}
	if roots != nil {
		t.TLSClientConfig = &tls.Config{RootCAs: roots}
	}
	return t
}

// upstreamTransport returns the default transport: plain-HTTP upstreams
// through the h1Transport, the rest through newTransport's.
func (p *Proxy) upstreamTransport(roots *x509.CertPool) http.RoundTripper {
	t := p.newTransport(roots)
	return newH1Transport(t, t.DialContext, t.ResponseHeaderTimeout, t.IdleConnTimeout, t.MaxIdleConnsPerHost, t.MaxIdleConns)
}

// CloseIdleConnections closes the upstream connections kept for later
// requests. Call it when the proxy is done with: the timer that closes
// them after the idle timeout otherwise keeps the proxy reachable until
// then.
func (p *Proxy) CloseIdleConnections() {
	closeIdle(p.transport)
	for i := range p.routes {
		closeIdle(p.routes[i].rt)
	}
}

func closeIdle(rt http.RoundTripper) {
	if c, ok := rt.(interface{ CloseIdleConnections() }); ok {
		c.CloseIdleConnections()
	}
}

// routeTransport returns the transport of a route with its own roots: a
// copy of the configured transport when it is an *http.Transport.
func (p *Proxy) routeTransport(roots *x509.CertPool) http.RoundTripper {
	switch t := p.opts.Transport.(type) {
	case nil:
		return p.upstreamTransport(roots)
	case *http.Transport:
		c := t.Clone()
		if c.TLSClientConfig == nil {
			c.TLSClientConfig = &tls.Config{}
		}
		c.TLSClientConfig.RootCAs = roots
		return c
	}
	return p.transport
}

// transportFor returns the transport that reaches route's upstream.
func (p *Proxy) transportFor(route *Route) http.RoundTripper {
	if route != nil && route.rt != nil {
		return route.rt
	}
	return p.transport
}

// ServeHTTP dispatches: /healthz, CONNECT and proxy-form requests
// (HTTPS_PROXY / HTTP_PROXY mode), and the rest (base-URL requests,
// /metrics, the admin endpoints) after the Host, Origin and client key
// checks.
func (p *Proxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	p.noteListener(r)
	// Each write sets its own deadline; none is left from an earlier
	// request on this connection.
	_ = http.NewResponseController(w).SetWriteDeadline(time.Time{})
	switch {
	case r.Method == http.MethodConnect || r.URL.IsAbs():
		p.serveProxyForm(w, r)
	case r.URL.Path == "/healthz":
		serveHealth(w)
	default:
		p.serveLocal(w, r, false)
	}
}

// serveLocal serves a request addressed to the proxy itself (not in
// proxy form). adminOnly: the separate admin listener, which forwards
// nothing.
func (p *Proxy) serveLocal(w http.ResponseWriter, r *http.Request, adminOnly bool) {
	switch {
	case !p.access.hostAllowed(r.Host):
		p.refuse(w, r, refuseHost)
	case !p.access.browserAllowed(r):
		p.refuse(w, r, refuseOrigin)
	case strings.HasPrefix(r.URL.Path, AdminPrefix):
		p.serveAdmin(w, r)
	case r.URL.Path == "/metrics":
		if !p.access.baseKeyOK(r, true) {
			p.refuse(w, r, refuseKey)
			return
		}
		p.metrics.Handler().ServeHTTP(w, r)
	case adminOnly:
		http.NotFound(w, r)
	default:
		route, path := p.route(r.URL.Path)
		if !p.access.baseKeyOK(r, route != nil && route.APIKey != "") {
			p.refuse(w, r, refuseKey)
			return
		}
		if route == nil {
			writeError(w, http.StatusNotFound, "no_route", "shaperproxy: no route for this path and no default route")
			return
		}
		p.forward(w, r, route, path)
	}
}

func serveHealth(w http.ResponseWriter) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	fmt.Fprintln(w, "ok")
}

// AdminHandler serves /healthz, /metrics and the admin endpoints alone,
// for a separate admin listener, with the same checks as the main one.
func (p *Proxy) AdminHandler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p.noteListener(r)
		if r.URL.Path == "/healthz" {
			serveHealth(w)
			return
		}
		if r.Method == http.MethodConnect || r.URL.IsAbs() {
			p.refuse(w, r, refuseTarget)
			return
		}
		p.serveLocal(w, r, true)
	})
}

// serveAdmin serves the program's own endpoints to direct loopback
// clients only: never to another machine, and never to a request the
// proxy relayed to itself.
func (p *Proxy) serveAdmin(w http.ResponseWriter, r *http.Request) {
	r.Header.Del(KeyHeader)
	if !p.directLoopback(r) {
		p.refuse(w, r, refuseLoopback)
		return
	}
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
