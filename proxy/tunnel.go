package proxy

import (
	"bufio"
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"
)

// The modes of a tunnel, as logged and labelled: decrypted and served
// through the pipeline, relayed as it is, or refused.
const (
	tunnelIntercepted = "intercepted"
	tunnelTunnelled   = "tunnelled"
	tunnelRefused     = "refused"
)

// tunnel is one CONNECT tunnel or proxy-form request. It is counted when
// it opens, and logged (one "tunnel" line: host, mode, bytes each way,
// duration) and measured when it closes, so a user can see which hosts a
// tool really calls through the proxy.
type tunnel struct {
	p        *Proxy
	id       string
	host     string // host:port asked for
	mode     string
	via      string // "connect" or "proxy-form"
	start    time.Time
	up, down atomic.Int64 // bytes from the client, to the client
	requests atomic.Int64 // calls served inside an intercepted tunnel
	owned    atomic.Bool  // a dialled connection closes the tunnel
	mu       sync.Mutex
	closer   func() error // closes the tunnel's connection at shutdown
	reason   refusal      // why it was refused
	err      string       // what failed
	once     sync.Once
}

type tunnelKey struct{}

// tunnelOf returns the tunnel a relayed request belongs to, or nil.
func tunnelOf(r *http.Request) *tunnel {
	if r == nil {
		return nil
	}
	t, _ := r.Context().Value(tunnelKey{}).(*tunnel)
	return t
}

// openTunnel counts a new tunnel and keeps it until it is closed.
func (p *Proxy) openTunnel(r *http.Request, hostport, mode string) *tunnel {
	via := "proxy-form"
	if r.Method == http.MethodConnect {
		via = "connect"
	}
	t := &tunnel{p: p, id: newCallID(), host: clip(hostport, 255), mode: mode, via: via, start: time.Now()}
	host, _ := splitTarget(hostport)
	hostLabel := p.metrics.hosts.value(host)
	if mode == tunnelRefused {
		hostLabel = p.metrics.hosts.known(host)
	}
	p.metrics.tunnels.WithLabelValues(mode, via, hostLabel).Inc()
	if mode != tunnelRefused {
		p.metrics.tunnelsOpen.WithLabelValues(mode).Inc()
		p.flight.addTunnel(t)
	}
	if mode != tunnelRefused && p.log.Enabled(context.Background(), slog.LevelDebug) {
		p.log.Debug("opening tunnel", "id", t.id, "host", t.host, "mode", mode, "via", via, "remote", r.RemoteAddr)
	}
	return t
}

// withTunnel returns r carrying t and the dial policy, for goproxy and the
// dialer.
func withTunnel(r *http.Request, t *tunnel, pol dialPolicy) *http.Request {
	ctx := context.WithValue(r.Context(), dialPolicyKey{}, pol)
	return r.WithContext(context.WithValue(ctx, tunnelKey{}, t))
}

// setCloser sets what closes the tunnel's connection at shutdown.
func (t *tunnel) setCloser(fn func() error) {
	t.mu.Lock()
	t.closer = fn
	t.mu.Unlock()
}

// shut closes the tunnel's connection, if it has one.
func (t *tunnel) shut() {
	t.mu.Lock()
	fn := t.closer
	t.mu.Unlock()
	if fn != nil {
		_ = fn()
	}
}

// closeUnlessOwned closes the tunnel unless a dialled connection took it
// over (goproxy copies a tunnelled CONNECT on its own goroutines).
func (t *tunnel) closeUnlessOwned() {
	if !t.owned.Load() {
		t.close()
	}
}

// close logs and measures the tunnel, once.
func (t *tunnel) close() {
	t.once.Do(func() {
		d := time.Since(t.start)
		m := t.p.metrics
		if t.mode != tunnelRefused {
			m.tunnelsOpen.WithLabelValues(t.mode).Dec()
			m.tunnelBytes.WithLabelValues(t.mode, "upstream").Add(float64(t.up.Load()))
			m.tunnelBytes.WithLabelValues(t.mode, "client").Add(float64(t.down.Load()))
			m.tunnelDuration.WithLabelValues(t.mode).Observe(d.Seconds())
			t.p.flight.removeTunnel(t)
		}
		t.log(d)
	})
}

// log writes the tunnel line: info for a tunnel that served, warn for one
// refused or failed.
func (t *tunnel) log(d time.Duration) {
	level := slog.LevelInfo
	attrs := []slog.Attr{
		slog.String("id", t.id), slog.String("host", t.host), slog.String("mode", t.mode), slog.String("via", t.via),
		slog.Int64("bytes_up", t.up.Load()), slog.Int64("bytes_down", t.down.Load()), durationMS(d),
	}
	if t.mode == tunnelIntercepted && t.via == "connect" {
		attrs = append(attrs, slog.Int64("requests", t.requests.Load()))
	}
	if t.reason != "" {
		level = slog.LevelWarn
		attrs = append(attrs, slog.String("reason", string(t.reason)))
	}
	if t.err != "" {
		level = slog.LevelWarn
		attrs = append(attrs, slog.String("err", t.err))
	}
	t.p.log.LogAttrs(context.Background(), level, "tunnel", attrs...)
}

// refuseRelay answers a CONNECT or proxy-form request the proxy does not
// relay, counted and logged as a refused tunnel.
func (p *Proxy) refuseRelay(w http.ResponseWriter, r *http.Request, hostport string, why refusal) {
	t := p.openTunnel(r, hostport, tunnelRefused)
	t.reason = why
	w.Header().Set(CallIDHeader, t.id)
	p.answerRefusal(w, why)
	t.close()
}

// dialTunnel dials the target of a tunnelled CONNECT (goproxy's
// ConnectDialWithReq): the connection counts the tunnel's bytes and closes
// it when goproxy closes the connection.
func (p *Proxy) dialTunnel(dial func(ctx context.Context, network, addr string) (net.Conn, error)) func(*http.Request, string, string) (net.Conn, error) {
	return func(req *http.Request, network, addr string) (net.Conn, error) {
		c, err := dial(req.Context(), network, addr)
		t := tunnelOf(req)
		switch {
		case t == nil:
			return c, err
		case err != nil:
			t.err = describeErr(err)
			return nil, err
		}
		t.owned.Store(true)
		cc := newCountedConn(c, &t.down, &t.up, t.close)
		t.setCloser(cc.Close)
		return cc, nil
	}
}

// countedConn counts the bytes read from and written to a connection and
// calls onClose (if set) once it is closed. It keeps the half-close
// methods of a TCP connection, which goproxy's tunnel copy uses.
type countedConn struct {
	net.Conn
	read, written *atomic.Int64
	onClose       func()
	once          sync.Once
}

// halfCloser is a connection that can be half-closed.
type halfCloser interface {
	CloseWrite() error
	CloseRead() error
}

// countedHalfConn is a countedConn over a connection that can be
// half-closed.
type countedHalfConn struct{ *countedConn }

func (c countedHalfConn) CloseWrite() error { return c.Conn.(halfCloser).CloseWrite() }
func (c countedHalfConn) CloseRead() error  { return c.Conn.(halfCloser).CloseRead() }

func newCountedConn(c net.Conn, read, written *atomic.Int64, onClose func()) net.Conn {
	cc := &countedConn{Conn: c, read: read, written: written, onClose: onClose}
	if _, ok := c.(halfCloser); ok {
		return countedHalfConn{cc}
	}
	return cc
}

func (c *countedConn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	c.read.Add(int64(n))
	return n, err
}

func (c *countedConn) Write(b []byte) (int, error) {
	n, err := c.Conn.Write(b)
	c.written.Add(int64(n))
	return n, err
}

// ReadFrom lets io.Copy use the connection's own ReadFrom (splice).
func (c *countedConn) ReadFrom(r io.Reader) (int64, error) {
	var n int64
	var err error
	if rf, ok := c.Conn.(io.ReaderFrom); ok {
		n, err = rf.ReadFrom(r)
	} else {
		n, err = io.Copy(c.Conn, r)
	}
	c.written.Add(n)
	return n, err
}

// WriteTo lets io.Copy use the connection's own WriteTo (splice).
func (c *countedConn) WriteTo(w io.Writer) (int64, error) {
	var n int64
	var err error
	if wt, ok := c.Conn.(io.WriterTo); ok {
		n, err = wt.WriteTo(w)
	} else {
		n, err = io.Copy(w, struct{ io.Reader }{c.Conn})
	}
	c.read.Add(n)
	return n, err
}

func (c *countedConn) Close() error {
	err := c.Conn.Close()
	if c.onClose != nil {
		c.once.Do(c.onClose)
	}
	return err
}

// countingWriter counts the bytes of a proxy-form response. It flushes and
// hijacks through the writer it wraps.
type countingWriter struct {
	http.ResponseWriter
	n *atomic.Int64
}

func (w *countingWriter) Write(b []byte) (int, error) {
	n, err := w.ResponseWriter.Write(b)
	w.n.Add(int64(n))
	return n, err
}

// Flush flushes the wrapped writer (goproxy asks for an http.Flusher).
func (w *countingWriter) Flush() { _ = http.NewResponseController(w.ResponseWriter).Flush() }

// Hijack hijacks the wrapped writer's connection (goproxy's websockets).
func (w *countingWriter) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	return http.NewResponseController(w.ResponseWriter).Hijack()
}

// Unwrap gives http.ResponseController the wrapped writer.
func (w *countingWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// countingBody counts the bytes of a proxy-form request body.
type countingBody struct {
	io.ReadCloser
	n *atomic.Int64
}

func (b countingBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	b.n.Add(int64(n))
	return n, err
}

// counted returns w and r counting the bytes of a proxy-form request
// into the tunnel.
func (t *tunnel) counted(w http.ResponseWriter, r *http.Request) (http.ResponseWriter, *http.Request) {
	if r.Body != nil && r.Body != http.NoBody {
		r.Body = countingBody{r.Body, &t.up}
	}
	return &countingWriter{ResponseWriter: w, n: &t.down}, r
}

// isRelayRefusal reports whether a relay dial failed because the proxy
// refused the address.
func isRelayRefusal(err error) bool {
	return errors.Is(err, errOwnListener) || errors.Is(err, errNotPublic)
}
