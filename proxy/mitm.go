package proxy

import (
	"crypto/tls"
	"errors"
	"io"
	"log"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/elazarl/goproxy"
)

// setIntercept prepares HTTPS_PROXY mode: goproxy answers CONNECT; hosts
// listed in Intercept are decrypted with the local CA and served through
// the same pipeline as base-URL requests; the hosts of the tunnel list are
// tunnelled as they are, through the proxy's guarded dialer (never to its
// own listeners, never through a proxy from the environment).
func (p *Proxy) setIntercept(hosts []string, ca *tls.Certificate) error {
	if len(hosts) > 0 && ca == nil {
		return errors.New("proxy: intercept needs a CA (run `shaperproxy ca init`)")
	}
	p.intercept = map[string]bool{}
	for _, h := range hosts {
		p.intercept[strings.ToLower(h)] = true
	}
	gp := goproxy.NewProxyHttpServer()
	gp.Logger = log.New(io.Discard, "", 0)
	connect := p.opts.ConnectTimeout
	if connect <= 0 {
		connect = 10 * time.Second
	}
	dial := p.dialer(connect)
	gp.Tr = &http.Transport{DisableCompression: true, DialContext: dial, TLSHandshakeTimeout: connect}
	gp.ConnectDialWithReq = p.dialTunnel(dial)
	gp.ConnectionErrHandler = relayConnectError
	gp.OnResponse().DoFunc(relayResponseError)
	gp.CertStore = &certStore{}
	gp.OnRequest().HandleConnectFunc(func(host string, _ *goproxy.ProxyCtx) (*goproxy.ConnectAction, string) {
		if p.intercepts(host) {
			return &goproxy.ConnectAction{Action: goproxy.ConnectHijack, Hijack: p.serveIntercepted}, host
		}
		return goproxy.OkConnect, host
	})
	gp.NonproxyHandler = http.HandlerFunc(p.ServeHTTP)
	p.gp = gp
	return nil
}

// intercepts reports whether CONNECT to hostport is decrypted.
func (p *Proxy) intercepts(hostport string) bool {
	host := hostport
	if h, _, err := net.SplitHostPort(hostport); err == nil {
		host = h
	}
	return p.intercept[strings.ToLower(host)] || p.intercept[strings.ToLower(hostport)]
}

// serveProxyForm handles a CONNECT or absolute-URI request (HTTPS_PROXY /
// HTTP_PROXY mode) from a client with a valid proxy key: to an intercepted
// host it goes through the pipeline (CONNECT: decrypted), to a host of the
// tunnel list through goproxy untouched; anything else is refused. Each is
// a tunnel: counted, and logged when it ends.
func (p *Proxy) serveProxyForm(w http.ResponseWriter, r *http.Request) {
	hostport := relayHostPort(r)
	if !p.access.proxyKeyOK(r) {
		p.refuseRelay(w, r, hostport, refuseProxyKey)
		return
	}
	if r.Method == http.MethodConnect && !authorityForm(hostport) {
		// A CONNECT names host:port (RFC 9110 §9.3.6); any other target
		// would be checked as one address and dialled as another (goproxy
		// dials an empty host or a missing port as ":80").
		p.refuseRelay(w, r, hostport, refuseTarget)
		return
	}
	pol, why := p.relayTarget(hostport)
	if why != "" {
		p.refuseRelay(w, r, hostport, why)
		return
	}
	connect := r.Method == http.MethodConnect
	mode := tunnelTunnelled
	if connect && p.intercepts(hostport) || !connect && r.URL.Scheme == "http" && p.intercepts(r.URL.Host) {
		mode = tunnelIntercepted
	}
	t := p.openTunnel(r, hostport, mode)
	defer t.closeUnlessOwned()
	r = withTunnel(r, t, pol)
	if connect {
		p.gp.ServeHTTP(w, r) // goproxy hijacks the connection: counted on it
		return
	}
	w, r = t.counted(w, r)
	if mode == tunnelIntercepted {
		if !p.access.browserAllowed(r) {
			t.reason = refuseOrigin // the tunnel's line logs it, under the id the answer carries
			w.Header().Set(CallIDHeader, t.id)
			p.answerRefusal(w, refuseOrigin)
			return
		}
		p.forward(w, r, p.routeForHost("http", r.URL.Host), r.URL.Path)
		return
	}
	p.gp.ServeHTTP(w, r)
}

// relayHostPort is the host:port a CONNECT or proxy-form request asks
// for, with the scheme's port when it names none.
func relayHostPort(r *http.Request) string {
	if r.Method == http.MethodConnect {
		return r.URL.Host // its request target; never the Host header
	}
	if _, _, err := net.SplitHostPort(r.URL.Host); err == nil {
		return r.URL.Host
	}
	port := "80"
	if r.URL.Scheme == "https" {
		port = "443"
	}
	return net.JoinHostPort(strings.Trim(r.URL.Host, "[]"), port)
}

// relayFailure is the status, code and message of a failed relay dial:
// a 403 when the dialer refused the address (the proxy's own listener, a
// private address behind a wildcard entry), a 502 otherwise.
func relayFailure(err error) (int, string, string) {
	if isRelayRefusal(err) {
		return http.StatusForbidden, string(refuseTarget), "shaperproxy: the relay refused that address (" + describeErr(err) + ")"
	}
	return http.StatusBadGateway, "relay_failed", "shaperproxy: the relay could not reach that host (" + describeErr(err) + ")"
}

// relayConnectError answers a CONNECT whose dial failed, on the hijacked
// connection.
func relayConnectError(w io.Writer, ctx *goproxy.ProxyCtx, err error) {
	status, code, msg := relayFailure(err)
	resp := errorResponse(relayID(ctx), status, code, msg)
	resp.Close = true
	_ = resp.Write(w)
}

// relayResponseError answers a proxy-form request whose upstream call
// failed in the OpenAI error shape (goproxy would answer 500 with the raw
// error).
func relayResponseError(resp *http.Response, ctx *goproxy.ProxyCtx) *http.Response {
	if resp != nil || ctx.Error == nil {
		return resp
	}
	status, code, msg := relayFailure(ctx.Error)
	return errorResponse(relayID(ctx), status, code, msg)
}

// relayID is the id of the tunnel a relayed request belongs to.
func relayID(ctx *goproxy.ProxyCtx) string {
	if t := tunnelOf(ctx.Req); t != nil {
		return t.id
	}
	return newCallID()
}

// serveIntercepted answers the CONNECT, terminates TLS with a certificate
// for the host signed by the local CA, and serves the decrypted requests
// with the pipeline until the client closes the connection.
func (p *Proxy) serveIntercepted(req *http.Request, client net.Conn, ctx *goproxy.ProxyCtx) {
	hostport := req.URL.Host
	t := tunnelOf(req)
	if t != nil {
		client = newCountedConn(client, &t.up, &t.down, nil)
		t.setCloser(client.Close)
	}
	if _, err := io.WriteString(client, "HTTP/1.1 200 Connection established\r\n\r\n"); err != nil {
		_ = client.Close()
		return
	}
	cfg, err := goproxy.TLSConfigFromCA(p.opts.CA)(hostport, ctx)
	if err != nil {
		p.log.Warn("cannot sign a certificate for an intercepted host", "host", hostport, "err", err)
		if t != nil {
			t.err = "cannot sign a certificate"
		}
		_ = client.Close()
		return
	}
	cfg.NextProtos = []string{"http/1.1"}
	host := strings.TrimSuffix(hostport, ":443")
	route := p.routeForHost("https", host)
	srv := &http.Server{
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			_ = http.NewResponseController(w).SetWriteDeadline(time.Time{})
			if t != nil {
				t.requests.Add(1)
			}
			if !p.access.browserAllowed(r) {
				p.refuse(w, r, refuseOrigin)
				return
			}
			r.Header.Del(KeyHeader)
			r.Header.Del("Proxy-Authorization")
			p.forward(w, r, route, r.URL.Path)
		}),
		ConnContext:       p.ConnContext,
		ErrorLog:          log.New(io.Discard, "", 0),
		ReadHeaderTimeout: 30 * time.Second,
		IdleTimeout:       5 * time.Minute, // an idle tunnel is closed, not kept forever
	}
	if !p.flight.addServer(srv) {
		_ = client.Close() // stopping: no new work
		return
	}
	defer p.flight.removeServer(srv)
	_ = srv.Serve(newOneConnListener(tls.Server(client, cfg)))
}

// oneConnListener hands out one connection, then blocks Accept until that
// connection is closed, so http.Server.Serve returns when it is done.
type oneConnListener struct {
	conn   net.Conn
	once   sync.Once
	closed chan struct{}
	taken  bool
	mu     sync.Mutex
}

func newOneConnListener(c net.Conn) *oneConnListener {
	l := &oneConnListener{closed: make(chan struct{})}
	l.conn = &notifyConn{Conn: c, onClose: func() { l.once.Do(func() { close(l.closed) }) }}
	return l
}

func (l *oneConnListener) Accept() (net.Conn, error) {
	l.mu.Lock()
	if !l.taken {
		l.taken = true
		l.mu.Unlock()
		return l.conn, nil
	}
	l.mu.Unlock()
	<-l.closed
	return nil, net.ErrClosed
}

func (l *oneConnListener) Close() error {
	l.once.Do(func() { close(l.closed) })
	return nil
}

func (l *oneConnListener) Addr() net.Addr { return l.conn.LocalAddr() }

type notifyConn struct {
	net.Conn
	onClose func()
}

func (c *notifyConn) Close() error {
	err := c.Conn.Close()
	c.onClose()
	return err
}

// authorityForm reports whether a CONNECT target is host:port with a
// host and a port from 1 to 65535.
func authorityForm(hostport string) bool {
	host, port, err := net.SplitHostPort(hostport)
	if err != nil || host == "" {
		return false
	}
	n, err := strconv.Atoi(port)
	return err == nil && n >= 1 && n <= 65535
}

// certStore caches the certificates signed for intercepted hosts, by the
// host's name in lower case without its port (a certificate's names match
// in any case, on any port; not with and without a trailing dot): a client that spells one host in many ways
// makes one certificate. It is bounded all the same (maxCerts: the
// intercept list is the config's).
type certStore struct {
	mu sync.Mutex
	m  map[string]*tls.Certificate
}

// maxCerts bounds the certificates kept; past it the cache starts again.
const maxCerts = 256

func (s *certStore) Fetch(host string, gen func() (*tls.Certificate, error)) (*tls.Certificate, error) {
	key := host
	if h, _, err := net.SplitHostPort(host); err == nil {
		key = h
	}
	key = strings.ToLower(key) // a trailing dot stays: a certificate for "h." does not serve "h"
	s.mu.Lock()
	c, ok := s.m[key]
	s.mu.Unlock()
	if ok {
		return c, nil
	}
	c, err := gen()
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.m == nil || len(s.m) >= maxCerts {
		s.m = make(map[string]*tls.Certificate)
	}
	s.m[key] = c
	return c, nil
}
