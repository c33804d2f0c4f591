package proxy

import (
	"crypto/tls"
	"errors"
	"io"
	"log"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/elazarl/goproxy"
)

// setIntercept prepares HTTPS_PROXY mode: goproxy answers CONNECT; hosts
// listed in Intercept are decrypted with the local CA and served through
// the same pipeline as base-URL requests; others are tunnelled as they are.
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
	gp.Tr = &http.Transport{DisableCompression: true}
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

// serveProxyForm handles an absolute-URI request (HTTP_PROXY mode): to an
// intercepted host it goes through the pipeline, to others through
// goproxy untouched.
func (p *Proxy) serveProxyForm(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodConnect && r.URL.Scheme == "http" && p.intercepts(r.URL.Host) {
		p.forward(w, r, p.routeForHost("http", r.URL.Host), r.URL.Path)
		return
	}
	p.gp.ServeHTTP(w, r)
}

// serveIntercepted answers the CONNECT, terminates TLS with a certificate
// for the host signed by the local CA, and serves the decrypted requests
// with the pipeline until the client closes the connection.
func (p *Proxy) serveIntercepted(req *http.Request, client net.Conn, ctx *goproxy.ProxyCtx) {
	hostport := req.URL.Host
	if _, err := io.WriteString(client, "HTTP/1.1 200 Connection established\r\n\r\n"); err != nil {
		_ = client.Close()
		return
	}
	cfg, err := goproxy.TLSConfigFromCA(p.opts.CA)(hostport, ctx)
	if err != nil {
		p.log.Warn("cannot sign a certificate for an intercepted host", "host", hostport, "err", err)
		_ = client.Close()
		return
	}
	cfg.NextProtos = []string{"http/1.1"}
	host := strings.TrimSuffix(hostport, ":443")
	route := p.routeForHost("https", host)
	srv := &http.Server{
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			p.forward(w, r, route, r.URL.Path)
		}),
		ErrorLog:          log.New(io.Discard, "", 0),
		ReadHeaderTimeout: 30 * time.Second,
		IdleTimeout:       5 * time.Minute, // an idle tunnel is closed, not kept forever
	}
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

// certStore caches the certificates signed for intercepted hosts.
type certStore struct{ m sync.Map }

func (s *certStore) Fetch(host string, gen func() (*tls.Certificate, error)) (*tls.Certificate, error) {
	if c, ok := s.m.Load(host); ok {
		return c.(*tls.Certificate), nil
	}
	c, err := gen()
	if err != nil {
		return nil, err
	}
	s.m.Store(host, c)
	return c, nil
}
