package proxy

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"io"
	"log"
	"net"
	"net/http"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/net/http/httpguts"
)

// Server serves a plain-HTTP listener of the proxy: the counterpart of
// h1Transport on the client's side. It reads each request's header itself
// and serves the usual requests of a base-URL client (a POST with a
// declared length, or a GET, in origin form, over HTTP/1.1) in the
// connection's own goroutine, writing the response as net/http's server
// writes it (the same framing, headers and bytes: TestServerSameBytes).
// Everything else (CONNECT and the intercepted traffic, HEAD and the
// other methods, chunked or Expect: 100-continue bodies, upgrades,
// HTTP/1.0, a header over 4 KiB, a header net/http would refuse) is
// handed, with the bytes read so far, to srv, which serves that
// connection from then on. A GET is served here so that a client that
// asks for /v1/models (or /metrics) on a kept-alive connection keeps it
// here for the POSTs after it (TestServerKeepsConnAfterGet).
//
// Why: net/http's server starts a goroutine for every request at the
// moment the handler reads the body's last byte, to watch the connection
// while the handler runs, and wakes it again to stop it after the
// response. On a proxy that reads a body whole before it parses it, that
// wake-up lands on the request's path: at 500 small requests a second it
// was 30–40 µs of the proxy's added p50 (issue 15, session AX). Here the
// connection is watched only once a request has run longer than
// watchAfter (an LLM call that has not answered yet), and a client that
// leaves before then is noticed at the next write, as a stream notices it.
//
// srv's Handler, BaseContext, ConnContext, ReadHeaderTimeout,
// ReadTimeout, WriteTimeout, IdleTimeout and ErrorLog apply to both
// paths. What applies to srv's only: ConnState, SetKeepAlivesEnabled, TLS,
// and http.MaxBytesReader's "Connection: close" (it speaks to net/http's
// own writer); shaperproxy uses none of them on this listener. A request
// handed over after part of its header was read gets ReadHeaderTimeout
// again from net/http.
type Server struct {
	srv  *http.Server
	rest *handoff

	mu      sync.Mutex
	ln      net.Listener
	conns   map[*serverConn]bool // true while the connection waits for a request
	closing bool
}

// watchAfter is how long a request runs before its connection is watched
// for the client leaving (net/http watches from the body's end).
const watchAfter = 50 * time.Millisecond

// maxPostHandlerReadBytes is how much of a body the handler left unread
// is read and dropped so that the connection can serve another request
// (net/http's value); more, and the connection is closed.
const maxPostHandlerReadBytes = 256 << 10

// serverBufSize is the size of a connection's read and write buffers; a
// request header must fit in the read buffer to be served here.
const serverBufSize = 4 << 10

// chunkingBuffer is how much of a response is held before its header is
// written without a declared length (net/http's bufferBeforeChunkingSize).
const chunkingBuffer = 2 << 10

// ServeLoopback serves h on a new 127.0.0.1 port as shaperproxy serve
// serves its main listener: a handler with a ConnContext (the proxy, whose
// calls then make no context of their own) by a Server with it, any other
// by net/http's server alone. It returns the URL and a func that closes the
// server (the demo's and the bench's servers).
func ServeLoopback(h http.Handler) (string, func(), error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", nil, err
	}
	url := "http://" + ln.Addr().String()
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	cc, ok := h.(interface {
		ConnContext(context.Context, net.Conn) context.Context
	})
	if !ok {
		go func() { _ = srv.Serve(ln) }()
		return url, func() { _ = srv.Close() }, nil
	}
	srv.ConnContext = cc.ConnContext
	s := NewServer(srv)
	go func() { _ = s.Serve(ln) }()
	return url, func() { _ = s.Close() }, nil
}

// NewServer returns a Server that serves srv.Handler, handing to srv what
// it does not serve itself.
func NewServer(srv *http.Server) *Server {
	return &Server{srv: srv, rest: newHandoff(), conns: map[*serverConn]bool{}}
}

// Serve accepts connections on ln until Shutdown or Close, and returns
// http.ErrServerClosed then (or the listener's error).
func (s *Server) Serve(ln net.Listener) error {
	s.mu.Lock()
	if s.closing {
		s.mu.Unlock()
		return http.ErrServerClosed
	}
	s.ln = ln
	s.rest.addr = ln.Addr()
	s.mu.Unlock()
	go func() { _ = s.srv.Serve(s.rest) }()
	base := context.Background()
	if s.srv.BaseContext != nil {
		base = s.srv.BaseContext(ln)
	}
	var delay time.Duration
	for {
		c, err := ln.Accept()
		if err != nil {
			if s.shuttingDown() {
				return http.ErrServerClosed
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() || errors.Is(err, syscall.EMFILE) || errors.Is(err, syscall.ENFILE) {
				// As net/http: back off and accept again.
				delay = min(max(2*delay, 5*time.Millisecond), time.Second)
				s.logf("http: Accept error: %v; retrying in %v", err, delay)
				time.Sleep(delay)
				continue
			}
			return err
		}
		delay = 0
		sc := &serverConn{s: s, c: c, base: base}
		if !s.track(sc, true) {
			_ = c.Close()
			return http.ErrServerClosed
		}
		go sc.serve()
	}
}

// Shutdown stops accepting, closes the connections waiting for a request,
// and waits for the others to finish theirs (srv's included) or ctx.
func (s *Server) Shutdown(ctx context.Context) error {
	lnErr := s.stop(false)
	srvErr := make(chan error, 1)
	go func() { srvErr <- s.srv.Shutdown(ctx) }()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		s.mu.Lock()
		s.closeIdleLocked()
		n := len(s.conns)
		s.mu.Unlock()
		if n == 0 {
			return errors.Join(lnErr, <-srvErr)
		}
		select {
		case <-ctx.Done():
			return errors.Join(lnErr, ctx.Err(), <-srvErr)
		case <-tick.C:
		}
	}
}

// Close closes the listener and every connection at once (srv's too).
func (s *Server) Close() error {
	return errors.Join(s.stop(true), s.srv.Close())
}

// stop marks the server closing, closes its listener and its waiting
// connections, or all of them.
func (s *Server) stop(all bool) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closing = true
	var err error
	if s.ln != nil {
		if err = s.ln.Close(); errors.Is(err, net.ErrClosed) {
			err = nil
		}
	}
	_ = s.rest.Close()
	if all {
		for sc := range s.conns {
			_ = sc.c.Close()
		}
		return err
	}
	s.closeIdleLocked()
	return err
}

func (s *Server) closeIdleLocked() {
	for sc, idle := range s.conns {
		if idle {
			_ = sc.c.Close()
		}
	}
}

// track records sc's state (idle: waiting for a request); false when the
// server is closing and sc must not start a request.
func (s *Server) track(sc *serverConn, idle bool) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closing && (idle || s.conns[sc]) {
		return false
	}
	s.conns[sc] = idle
	return true
}

func (s *Server) untrack(sc *serverConn) {
	s.mu.Lock()
	delete(s.conns, sc)
	s.mu.Unlock()
}

func (s *Server) shuttingDown() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.closing
}

func (s *Server) logf(format string, args ...any) {
	if s.srv.ErrorLog != nil {
		s.srv.ErrorLog.Printf(format, args...)
		return
	}
	log.Printf(format, args...)
}

// serverConn is one client connection served by Server.
type serverConn struct {
	s      *Server
	c      net.Conn
	remote string          // c's remote address, for each request's RemoteAddr
	base   context.Context // srv.BaseContext's
	br     *bufio.Reader   // over cr
	bw     *bufio.Writer   // over the connection, recording the first error
	cr     connReader
	ctx    context.Context
	cancel context.CancelFunc // the connection's context: the client left, or a write failed
	werr   error

	held *bufio.Writer // a response's first bytes (response.w)

	inFlight *response // the request being served, if any

	// The watch of the connection while a request runs (lookWatch).
	wmu      sync.Mutex
	wcond    sync.Cond
	ww       wheelWatch
	started  time.Time // when the running request started; zero between requests
	bodyDone bool      // its body was read to the end
	watched  bool      // the running request's read of the connection began
	watching bool      // a read of the connection is on
	aborted  bool      // that read was stopped by the request's end
}

func (sc *serverConn) serve() {
	s := sc.s
	handed := false
	defer func() {
		watches.remove(&sc.ww)
		if err := recover(); err != nil && err != http.ErrAbortHandler {
			buf := make([]byte, 64<<10)
			s.logf("http: panic serving %v: %v\n%s", sc.remote, err, buf[:runtime.Stack(buf, false)])
		}
		s.untrack(sc)
		if !handed {
			if sc.inFlight != nil && sc.inFlight.body != nil {
				_ = sc.inFlight.body.Close() // as net/http: what is left of it read, so the close is no reset
			}
			if sc.bw != nil {
				_ = sc.bw.Flush()
			}
			_ = sc.c.Close()
		}
		if sc.cancel != nil {
			sc.cancel()
		}
	}()
	sc.cr.c = sc.c
	sc.remote = sc.c.RemoteAddr().String()
	sc.br = bufio.NewReaderSize(&sc.cr, serverBufSize)
	ctx := context.WithValue(sc.base, http.ServerContextKey, s.srv)
	if s.srv.ConnContext != nil {
		if ctx = s.srv.ConnContext(ctx, sc.c); ctx == nil {
			panic("ConnContext returned nil")
		}
	}
	sc.ctx, sc.cancel = context.WithCancel(context.WithValue(ctx, http.LocalAddrContextKey, sc.c.LocalAddr()))
	sc.cr.cancel = sc.cancel
	first := true
	afterPost := false // the last request served here was a POST
	for {
		if first {
			// A new connection's header has its timeout from the start
			// (as net/http's), and the connection is idle for Shutdown
			// until its first byte.
			setReadTimeout(sc.c, headerTimeout(s.srv))
			if _, err := sc.br.Peek(1); err != nil {
				return
			}
		} else {
			// As net/http: the header's timeout starts with its first
			// bytes; until then the connection is idle.
			setReadTimeout(sc.c, idleTimeout(s.srv))
			if _, err := sc.br.Peek(4); err != nil {
				return
			}
			setReadTimeout(sc.c, headerTimeout(s.srv))
		}
		if !s.track(sc, false) {
			return
		}
		t0 := time.Now()
		if afterPost {
			// RFC 7230 section 3: CR or LF left after a POST's body is
			// skipped (net/http does so too, after a POST only).
			peek, _ := sc.br.Peek(4)
			_, _ = sc.br.Discard(leadingCRLF(peek))
		}
		req, n := sc.readRequest()
		if req == nil {
			if n >= 0 {
				handed = sc.handOff()
			}
			return
		}
		_, _ = sc.br.Discard(n)
		// As net/http: the body's deadline is ReadTimeout's from the
		// header's start, the response's WriteTimeout's from here.
		if d := s.srv.ReadTimeout; d > 0 {
			_ = sc.c.SetReadDeadline(t0.Add(d))
		} else {
			_ = sc.c.SetReadDeadline(time.Time{})
		}
		setWriteTimeout(sc.c, s.srv.WriteTimeout)
		if !sc.serveRequest(req) {
			return
		}
		_ = sc.c.SetWriteDeadline(time.Time{})
		if !s.track(sc, true) {
			return
		}
		first, afterPost = false, req.Method == http.MethodPost
	}
}

// setReadTimeout sets c's read deadline d from now, or none.
func setReadTimeout(c net.Conn, d time.Duration) {
	if d > 0 {
		_ = c.SetReadDeadline(time.Now().Add(d))
		return
	}
	_ = c.SetReadDeadline(time.Time{})
}

// setWriteTimeout sets c's write deadline d from now, when d is set.
func setWriteTimeout(c net.Conn, d time.Duration) {
	if d > 0 {
		_ = c.SetWriteDeadline(time.Now().Add(d))
	}
}

// idleTimeout is how long a connection waits for its next request.
func idleTimeout(srv *http.Server) time.Duration {
	if srv.IdleTimeout > 0 {
		return srv.IdleTimeout
	}
	return srv.ReadTimeout
}

// headerTimeout is the time a request header has to arrive in.
func headerTimeout(srv *http.Server) time.Duration {
	if srv.ReadHeaderTimeout > 0 {
		return srv.ReadHeaderTimeout
	}
	return srv.ReadTimeout
}

// leadingCRLF counts the CR and LF bytes p starts with.
func leadingCRLF(p []byte) int {
	n := 0
	for n < len(p) && (p[n] == '\r' || p[n] == '\n') {
		n++
	}
	return n
}

// readRequest reads the next request's header without consuming it. It
// returns the request and the header's length when this server serves
// it; nil and 0 when the connection is to be handed to srv; nil and -1
// when it ended (closed, timed out) with nothing read.
func (sc *serverConn) readRequest() (*http.Request, int) {
	n, err := sc.headerEnd()
	if err != nil {
		if sc.br.Buffered() == 0 && !sc.cr.hasByte {
			return nil, -1
		}
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			return nil, -1 // net/http closes a connection whose header is late, saying nothing
		}
		return nil, 0 // let net/http answer what it makes of the bytes
	}
	if n == 0 {
		return nil, 0
	}
	p, _ := sc.br.Peek(n)
	req, err := parseHeader(p) // servedHere alone says which methods are served here
	if err != nil || !servedHere(req) {
		return nil, 0
	}
	return req, n
}

// headerReader reads a request header's bytes for http.ReadRequest,
// which wants a bufio.Reader. They are pooled: a connection waiting for
// its next request holds none.
type headerReader struct {
	r  bytes.Reader
	br *bufio.Reader
}

var headerReaders = sync.Pool{New: func() any {
	hr := &headerReader{}
	hr.br = bufio.NewReaderSize(&hr.r, serverBufSize)
	return hr
}}

// parseHeader parses the request header p (its blank line included); the
// request's Body is left nil, for the caller's.
func parseHeader(p []byte) (*http.Request, error) {
	hr := headerReaders.Get().(*headerReader)
	hr.r.Reset(p)
	hr.br.Reset(&hr.r)
	req, err := http.ReadRequest(hr.br)
	if req != nil {
		req.Body = nil // over hr: not to be read once hr is back in the pool
	}
	hr.r.Reset(nil)
	headerReaders.Put(hr)
	return req, err
}

// headerEnd returns the length of the request header at the start of the
// read buffer (its blank line included), reading until it is whole; 0
// when the buffer fills first.
func (sc *serverConn) headerEnd() (int, error) {
	from := 0
	for {
		p, err := sc.br.Peek(max(sc.br.Buffered(), 1))
		if i := blankLine(p, from); i >= 0 {
			return i, nil
		}
		if err != nil {
			return 0, err
		}
		if len(p) == sc.br.Size() {
			return 0, nil
		}
		from = max(len(p)-3, 0)
		if _, err := sc.br.Peek(len(p) + 1); err != nil && sc.br.Buffered() == len(p) {
			return 0, err
		}
	}
}

// blankLine returns the index just past the header's end in p (the first
// empty line, "\r\n" or "\n" ended, as textproto reads it), searching from
// from; -1 when p holds no empty line.
func blankLine(p []byte, from int) int {
	for i := from; i < len(p); i++ {
		if p[i] != '\n' {
			continue
		}
		switch {
		case i+1 < len(p) && p[i+1] == '\n':
			return i + 2
		case i+2 < len(p) && p[i+1] == '\r' && p[i+2] == '\n':
			return i + 3
		}
	}
	return -1
}

// servedHere reports whether a request is one this server serves: what
// net/http's server would accept and hand to the handler with a body of
// the declared length, and nothing it treats specially.
func servedHere(req *http.Request) bool {
	if req.Method != http.MethodPost && req.Method != http.MethodGet || req.ProtoMajor != 1 || req.ProtoMinor != 1 ||
		!strings.HasPrefix(req.RequestURI, "/") || req.ContentLength < 0 || len(req.TransferEncoding) > 0 {
		return false
	}
	h := req.Header // http.ReadRequest took Host out, and refused two
	if req.Host == "" || !httpguts.ValidHostHeader(req.Host) {
		return false
	}
	if _, ok := h["Expect"]; ok {
		return false
	}
	if _, ok := h["Upgrade"]; ok {
		return false
	}
	for k, vv := range h {
		if !httpguts.ValidHeaderFieldName(k) {
			return false
		}
		for _, v := range vv {
			if !httpguts.ValidHeaderFieldValue(v) {
				return false
			}
		}
	}
	return true
}

// handOff gives the connection, with what was read of it, to srv.
func (sc *serverConn) handOff() bool {
	sc.s.untrack(sc)
	p, _ := sc.br.Peek(sc.br.Buffered())
	prefix := append([]byte(nil), p...)
	if sc.cr.hasByte {
		prefix = append(prefix, sc.cr.byteBuf[0]) // read by a watch after what the buffer holds
	}
	_ = sc.c.SetReadDeadline(time.Time{})
	return sc.s.rest.give(&prefixConn{Conn: sc.c, prefix: prefix})
}

// serveRequest runs the handler on req and finishes its response; false
// when the connection is not to serve another request.
func (sc *serverConn) serveRequest(req *http.Request) bool {
	ctx, cancel := context.WithCancel(sc.ctx)
	defer cancel()
	req = req.WithContext(ctx)
	req.RemoteAddr = sc.remote
	w := &response{conn: sc, req: req, header: make(http.Header), cl: -1, wantsClose: wantsClose(req)}
	if req.ContentLength > 0 {
		w.body = &serverBody{sc: sc, r: io.LimitedReader{R: sc.br, N: req.ContentLength}, last: req.Close}
		req.Body = w.body
	} else {
		req.Body = http.NoBody
	}
	w.cw.res = w
	if sc.bw == nil {
		sc.bw = bufio.NewWriterSize(connErrorWriter{sc}, serverBufSize)
		sc.held = bufio.NewWriterSize(&w.cw, chunkingBuffer)
	} else {
		sc.held.Reset(&w.cw)
	}
	w.w = sc.held
	sc.watchFrom(time.Now(), w.body == nil)
	sc.inFlight = w
	h := sc.s.srv.Handler
	if h == nil {
		h = http.DefaultServeMux
	}
	h.ServeHTTP(w, req)
	sc.inFlight = nil
	sc.unwatch()
	w.finish()
	if !w.reuse() {
		if w.limitHit || w.body.closedEarly() {
			// As net/http: let the client read the answer before the
			// unread body resets the connection.
			_ = sc.bw.Flush()
			if tc, ok := sc.c.(interface{ CloseWrite() error }); ok {
				_ = tc.CloseWrite()
			}
			time.Sleep(500 * time.Millisecond)
		}
		return false
	}
	return true
}

// connErrorWriter writes to the connection; the first error cancels the
// connection's context (the client is gone) and is kept.
type connErrorWriter struct{ sc *serverConn }

func (w connErrorWriter) Write(p []byte) (int, error) {
	n, err := w.sc.c.Write(p)
	if err != nil && w.sc.werr == nil {
		w.sc.werr = err
		w.sc.cancel()
	}
	return n, err
}

// connReader reads the connection for the read buffer, first the byte a
// watch read, if it read one. A failed read (the client gone, a deadline
// passed) cancels the connection's context, as net/http's does.
type connReader struct {
	c       net.Conn
	cancel  context.CancelFunc
	hasByte bool
	byteBuf [1]byte
}

func (cr *connReader) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	if cr.hasByte {
		p[0] = cr.byteBuf[0]
		cr.hasByte = false
		return 1, nil
	}
	n, err := cr.c.Read(p)
	if err != nil {
		cr.cancel()
	}
	return n, err
}

// watchFrom starts the watch of a request that started at t: after
// watchAfter, once its body is read, the connection is read beside it; a
// client that closes it cancels the connection's context, and a byte that
// comes (the next request) is kept for the read buffer. The time is kept
// by the wheel (watches), not a timer of the request's own.
func (sc *serverConn) watchFrom(t time.Time, bodyDone bool) {
	sc.wmu.Lock()
	defer sc.wmu.Unlock()
	sc.started, sc.bodyDone, sc.watched = t, bodyDone, false
	if sc.ww.look == nil {
		sc.wcond.L = &sc.wmu
		sc.ww.look = sc.lookWatch
	}
	watches.add(&sc.ww)
}

// lookWatch runs in the wheel's goroutine: it starts the read of the
// connection (watch) once the running request is watchAfter old and its
// body read.
func (sc *serverConn) lookWatch(now time.Time) {
	sc.wmu.Lock()
	defer sc.wmu.Unlock()
	if sc.started.IsZero() || sc.watched || !sc.bodyDone || now.Sub(sc.started) < watchAfter {
		return
	}
	sc.watched = true
	watches.remove(&sc.ww) // nothing more to look for: a long request (a stream) leaves the wheel
	if sc.cr.hasByte {
		return // the next request has begun: nothing more to watch for
	}
	// The deadline is cleared before unwatch can set its own (under the
	// same lock), or the read below would outlive the request.
	_ = sc.c.SetReadDeadline(time.Time{})
	sc.watching = true
	go sc.watch()
}

// watch reads the connection for the running request (lookWatch started
// it): a byte that comes is kept, a failed read cancels the connection's
// context, unless unwatch stopped it.
func (sc *serverConn) watch() {
	n, err := sc.c.Read(sc.cr.byteBuf[:])
	sc.wmu.Lock()
	if n == 1 {
		sc.cr.hasByte = true
	}
	var ne net.Error
	if err != nil && !(sc.aborted && errors.As(err, &ne) && ne.Timeout()) {
		sc.cancel()
	}
	sc.watching, sc.aborted = false, false
	sc.wcond.Broadcast()
	sc.wmu.Unlock()
}

// unwatch ends the watch of the request that ran, waiting for a read on.
func (sc *serverConn) unwatch() {
	watches.remove(&sc.ww)
	sc.wmu.Lock()
	sc.started = time.Time{}
	sc.bodyDone = false
	if sc.watching {
		sc.aborted = true
		_ = sc.c.SetReadDeadline(aLongTimeAgo)
		for sc.watching {
			sc.wcond.Wait()
		}
		_ = sc.c.SetReadDeadline(time.Time{})
	}
	sc.wmu.Unlock()
}

// aLongTimeAgo is a deadline that has passed: it stops a read at once.
var aLongTimeAgo = time.Unix(1, 0)

// serverBody is a request's body: the declared length read from the
// connection's buffer.
type serverBody struct {
	sc     *serverConn
	mu     sync.Mutex
	r      io.LimitedReader
	sawEOF bool
	closed bool
	early  bool // closed with more than maxPostHandlerReadBytes left: the connection cannot go on
	last   bool // the client asked to close after this request: what is left is not read
}

func (b *serverBody) Read(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return 0, http.ErrBodyReadAfterClose
	}
	return b.readLocked(p)
}

func (b *serverBody) readLocked(p []byte) (int, error) {
	if b.sawEOF {
		return 0, io.EOF
	}
	n, err := b.r.Read(p)
	switch {
	case err == io.EOF:
		b.sawEOF = true
		if b.r.N > 0 {
			err = io.ErrUnexpectedEOF // the client ended before the declared length
		}
	case err == nil && n > 0 && b.r.N == 0:
		err, b.sawEOF = io.EOF, true // with the last bytes, as net/http's body
	}
	if b.sawEOF {
		b.sc.wmu.Lock()
		b.sc.bodyDone = true
		b.sc.wmu.Unlock()
	}
	return n, err
}

// Close ends the body. As net/http's, it reads what is left, up to
// maxPostHandlerReadBytes, so that the connection can serve the next
// request; with more left, the connection closes after the response.
func (b *serverBody) Close() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return nil
	}
	b.closed = true
	if b.sawEOF || b.last {
		return nil
	}
	if b.r.N > maxPostHandlerReadBytes {
		b.early = true
		return nil
	}
	n, err := io.CopyN(io.Discard, readerFunc(b.readLocked), maxPostHandlerReadBytes)
	if n == maxPostHandlerReadBytes {
		b.early = true
	}
	if err == io.EOF {
		err = nil
	}
	return err
}

// readerFunc is a function as an io.Reader.
type readerFunc func([]byte) (int, error)

func (f readerFunc) Read(p []byte) (int, error) { return f(p) }

// closedEarly reports whether the handler closed the body with more of it
// left than is read for the next request.
func (b *serverBody) closedEarly() bool {
	if b == nil {
		return false
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.early
}

// prefixConn is a connection handed to srv, with the bytes already read.
type prefixConn struct {
	net.Conn
	prefix []byte
}

func (c *prefixConn) Read(p []byte) (int, error) {
	if len(c.prefix) > 0 {
		n := copy(p, c.prefix)
		c.prefix = c.prefix[n:]
		return n, nil
	}
	return c.Conn.Read(p)
}

// CloseWrite and CloseRead are the connection's: net/http's server and
// goproxy's tunnels half-close a connection that has them.
func (c *prefixConn) CloseWrite() error {
	if hc, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return hc.CloseWrite()
	}
	return errors.ErrUnsupported
}

func (c *prefixConn) CloseRead() error {
	if hc, ok := c.Conn.(interface{ CloseRead() error }); ok {
		return hc.CloseRead()
	}
	return errors.ErrUnsupported
}

// ReadFrom is the connection's (a TCP connection splices).
func (c *prefixConn) ReadFrom(r io.Reader) (int64, error) {
	if rf, ok := c.Conn.(io.ReaderFrom); ok {
		return rf.ReadFrom(r)
	}
	return io.Copy(struct{ io.Writer }{c.Conn}, r)
}

// handoff is the listener srv serves: the connections Server hands it.
type handoff struct {
	conns  chan net.Conn
	closed chan struct{}
	once   sync.Once
	addr   net.Addr
}

func newHandoff() *handoff {
	return &handoff{conns: make(chan net.Conn), closed: make(chan struct{})}
}

func (h *handoff) Accept() (net.Conn, error) {
	select {
	case c := <-h.conns:
		return c, nil
	case <-h.closed:
		return nil, net.ErrClosed
	}
}

func (h *handoff) Close() error {
	h.once.Do(func() { close(h.closed) })
	return nil
}

func (h *handoff) Addr() net.Addr { return h.addr }

// give hands c to srv; false when srv has stopped.
func (h *handoff) give(c net.Conn) bool {
	select {
	case h.conns <- c:
		return true
	case <-h.closed:
		return false
	}
}

// response is a request's http.ResponseWriter, net/http's own made small:
// the handler writes through w (a 2 KiB buffer) into cw, which writes the
// header when the first bytes reach it (with a length when the handler
// ended within the buffer, chunked otherwise) and frames what follows.
type response struct {
	conn *serverConn
	req  *http.Request
	body *serverBody // nil for a request without one

	header       http.Header // the handler's
	sent         http.Header // the header as of WriteHeader (net/http's cw.header)
	calledHeader bool
	wroteHeader  bool
	status       int
	cl           int64 // the declared length, -1 without one
	written      int64
	handlerDone  bool
	wantsClose   bool
	closeAfter   bool
	limitHit     bool
	fullDuplex   bool
	trailers     []string

	w  *bufio.Writer
	cw chunkWriter

	dateBuf [len(http.TimeFormat)]byte
	clenBuf [20]byte
}

func (w *response) Header() http.Header {
	if w.sent == nil && w.wroteHeader && !w.cw.wroteHeader {
		w.sent = w.header.Clone()
	}
	w.calledHeader = true
	return w.header
}

func (w *response) WriteHeader(code int) {
	if w.wroteHeader {
		w.conn.s.logf("http: superfluous response.WriteHeader call")
		return
	}
	if code < 100 || code > 999 {
		panic("invalid WriteHeader code " + strconv.Itoa(code))
	}
	if code >= 100 && code <= 199 && code != http.StatusSwitchingProtocols {
		// An informational header goes out at once.
		bw := w.conn.bw
		writeStatusLine(bw, code)
		_ = w.header.WriteSubset(bw, excludedHeadersNoBody)
		_, _ = bw.WriteString("\r\n")
		_ = bw.Flush()
		return
	}
	w.wroteHeader = true
	w.status = code
	if w.calledHeader && w.sent == nil {
		w.sent = w.header.Clone()
	}
	if cl := headerGet(w.header, "Content-Length"); cl != "" {
		if v, err := strconv.ParseInt(cl, 10, 64); err == nil && v >= 0 {
			w.cl = v
		} else {
			w.conn.s.logf("http: invalid Content-Length of %q", cl)
			w.header.Del("Content-Length")
		}
	}
}

func (w *response) Write(p []byte) (int, error) {
	if ok, err := w.admit(len(p)); !ok {
		return 0, err
	}
	return w.w.Write(p)
}

// WriteString is Write for a string, through the same buffer (net/http's
// response has it: the chunks come out the same).
func (w *response) WriteString(s string) (int, error) {
	if ok, err := w.admit(len(s)); !ok {
		return 0, err
	}
	return w.w.WriteString(s)
}

// admit counts n bytes of body about to be written (the header implied
// first): false, with the error to return (none for nothing to write),
// when they are not to be written.
func (w *response) admit(n int) (bool, error) {
	if !w.wroteHeader {
		w.WriteHeader(http.StatusOK)
	}
	if n == 0 {
		return false, nil
	}
	if !bodyAllowedForStatus(w.status) {
		return false, http.ErrBodyNotAllowed
	}
	w.written += int64(n)
	if w.cl != -1 && w.written > w.cl {
		return false, http.ErrContentLength
	}
	return true, nil
}

// ReadFrom is net/http's: the first 512 bytes through the buffer (the
// header goes out with them), then, without chunks, straight from src to
// the connection.
func (w *response) ReadFrom(src io.Reader) (n int64, err error) {
	bp := copyBufs.Get().(*[]byte)
	defer copyBufs.Put(bp)
	rf, ok := w.conn.c.(io.ReaderFrom)
	if !ok {
		return io.CopyBuffer(struct{ io.Writer }{w}, src, *bp)
	}
	if !w.cw.wroteHeader {
		n0, err := io.CopyBuffer(struct{ io.Writer }{w}, io.LimitReader(src, sniffLen), *bp)
		n += n0
		if err != nil || n0 < sniffLen {
			return n, err
		}
	}
	_ = w.w.Flush()
	_ = w.cw.flush()
	if !w.cw.chunking && bodyAllowedForStatus(w.status) {
		n0, err := rf.ReadFrom(src)
		n += n0
		w.written += n0
		return n, err
	}
	n0, err := io.CopyBuffer(struct{ io.Writer }{w}, src, *bp) // the struct hides ReadFrom
	return n + n0, err
}

// sniffLen is how much of a body net/http sniffs a type from.
const sniffLen = 512

// FlushError sends what was written (http.ResponseController.Flush).
func (w *response) FlushError() error {
	if !w.wroteHeader {
		w.WriteHeader(http.StatusOK)
	}
	err := w.w.Flush()
	if e := w.cw.flush(); err == nil {
		err = e
	}
	return err
}

// Flush is FlushError for an http.Flusher.
func (w *response) Flush() { _ = w.FlushError() }

// SetReadDeadline and SetWriteDeadline are the connection's
// (http.ResponseController).
func (w *response) SetReadDeadline(t time.Time) error  { return w.conn.c.SetReadDeadline(t) }
func (w *response) SetWriteDeadline(t time.Time) error { return w.conn.c.SetWriteDeadline(t) }

// EnableFullDuplex lets the handler write before it has read the body.
func (w *response) EnableFullDuplex() error {
	w.fullDuplex = true
	return nil
}

// finish ends the response after the handler returned.
func (w *response) finish() {
	w.handlerDone = true
	if !w.wroteHeader {
		w.WriteHeader(http.StatusOK)
	}
	_ = w.w.Flush()
	w.cw.close()
	_ = w.conn.bw.Flush()
	if w.body != nil {
		_ = w.body.Close()
	}
}

// reuse reports whether the connection can serve another request.
func (w *response) reuse() bool {
	switch {
	case w.closeAfter, w.conn.werr != nil, w.body.closedEarly():
		return false
	case w.cl != -1 && bodyAllowedForStatus(w.status) && w.cl != w.written:
		return false
	}
	return true
}

func (w *response) declareTrailer(k string) {
	k = http.CanonicalHeaderKey(k)
	if httpguts.ValidTrailerHeader(k) {
		w.trailers = append(w.trailers, k)
	}
}

// finalTrailers are the trailers the handler set (net/http's rules).
func (w *response) finalTrailers() http.Header {
	var t http.Header
	for k, vv := range w.header {
		if kk, ok := strings.CutPrefix(k, http.TrailerPrefix); ok {
			if t == nil {
				t = http.Header{}
			}
			t[kk] = vv
		}
	}
	for _, k := range w.trailers {
		if t == nil {
			t = http.Header{}
		}
		for _, v := range w.header[k] {
			t.Add(k, v)
		}
	}
	return t
}

// discardBody reads what the handler left of the body, up to
// maxPostHandlerReadBytes, before the header goes out (net/http does so:
// a client that sends its whole request before it reads could otherwise
// block); more, and the connection closes after the response.
func (w *response) discardBody(del func(string), extra *extraHeader) {
	if w.req.ContentLength == 0 || w.closeAfter || w.fullDuplex || w.body == nil {
		return
	}
	b := w.body
	b.mu.Lock()
	closed, sawEOF, unread := b.closed, b.sawEOF, b.r.N
	b.mu.Unlock()
	tooBig := false
	switch {
	case closed:
		if !sawEOF {
			w.closeAfter = true
		}
	case unread >= maxPostHandlerReadBytes:
		tooBig = true
	default:
		switch _, err := io.CopyN(io.Discard, b, maxPostHandlerReadBytes+1); err {
		case nil:
			tooBig = true
		case http.ErrBodyReadAfterClose:
		case io.EOF:
			_ = b.Close()
		default:
			w.closeAfter = true
		}
	}
	if tooBig {
		w.closeAfter, w.limitHit = true, true
		del("Connection")
		extra.connection = "close"
	}
}

// chunkWriter writes the header before the first bytes of the body, and
// frames the body in chunks when it has no declared length.
type chunkWriter struct {
	res         *response
	wroteHeader bool
	chunking    bool
}

func (cw *chunkWriter) Write(p []byte) (int, error) {
	if !cw.wroteHeader {
		cw.writeHeader(p)
	}
	bw := cw.res.conn.bw
	if cw.chunking {
		var b [16]byte
		if _, err := bw.Write(append(strconv.AppendInt(b[:0], int64(len(p)), 16), '\r', '\n')); err != nil {
			_ = cw.res.conn.c.Close()
			return 0, err
		}
	}
	n, err := bw.Write(p)
	if cw.chunking && err == nil {
		_, err = bw.WriteString("\r\n")
	}
	if err != nil {
		_ = cw.res.conn.c.Close()
	}
	return n, err
}

func (cw *chunkWriter) flush() error {
	if !cw.wroteHeader {
		cw.writeHeader(nil)
	}
	return cw.res.conn.bw.Flush()
}

func (cw *chunkWriter) close() {
	if !cw.wroteHeader {
		cw.writeHeader(nil)
	}
	if cw.chunking {
		bw := cw.res.conn.bw
		_, _ = bw.WriteString("0\r\n")
		if t := cw.res.finalTrailers(); t != nil {
			_ = t.Write(bw)
		}
		_, _ = bw.WriteString("\r\n")
	}
}

// writeHeader writes the response's header, p being the body's first
// bytes (all of it when the handler has returned): net/http's
// chunkWriter.writeHeader for an HTTP/1.1 request that is not HEAD.
func (cw *chunkWriter) writeHeader(p []byte) {
	cw.wroteHeader = true
	w := cw.res
	keepAlives := !w.conn.s.shuttingDown()
	header := w.sent
	owned := header != nil
	if !owned {
		header = w.header
	}
	var exclude map[string]bool
	del := func(key string) {
		if owned {
			header.Del(key)
			return
		}
		if _, ok := header[key]; !ok {
			return
		}
		if exclude == nil {
			exclude = map[string]bool{}
		}
		exclude[key] = true
	}
	var extra extraHeader

	trailers := false
	for k := range w.sent {
		if strings.HasPrefix(k, http.TrailerPrefix) {
			if exclude == nil {
				exclude = map[string]bool{}
			}
			exclude[k] = true
			trailers = true
		}
	}
	for _, v := range w.sent["Trailer"] {
		trailers = true
		foreachHeaderElement(v, w.declareTrailer)
	}

	te := headerGet(header, "Transfer-Encoding")
	hasTE := te != ""
	if w.handlerDone && !trailers && !hasTE && bodyAllowedForStatus(w.status) && !headerHas(header, "Content-Length") {
		w.cl = int64(len(p))
		extra.contentLength = strconv.AppendInt(w.clenBuf[:0], int64(len(p)), 10)
	}
	hasCL := w.cl != -1
	if w.wantsClose || headerGet(header, "Connection") == "close" || !keepAlives {
		w.closeAfter = true
	}
	w.discardBody(del, &extra)

	code := w.status
	if bodyAllowedForStatus(code) {
		_, haveType := header["Content-Type"]
		if header.Get("Content-Encoding") == "" && !haveType && !hasTE && len(p) > 0 {
			extra.contentType = http.DetectContentType(p)
		}
	} else {
		for _, k := range suppressedHeaders(code) {
			del(k)
		}
	}
	if !headerHas(header, "Date") {
		extra.date = time.Now().UTC().AppendFormat(w.dateBuf[:0], http.TimeFormat)
	}
	if hasCL && hasTE && te != "identity" {
		w.conn.s.logf("http: WriteHeader called with both Transfer-Encoding of %q and a Content-Length of %d", te, w.cl)
		del("Content-Length")
		hasCL = false
	}
	switch {
	case !bodyAllowedForStatus(code) || code == http.StatusNoContent, hasCL:
		del("Transfer-Encoding")
	case hasTE && te == "identity":
		cw.chunking = false
		w.closeAfter = true
		del("Transfer-Encoding")
	default:
		cw.chunking = true
		extra.transferEncoding = "chunked"
		if hasTE && te == "chunked" {
			del("Transfer-Encoding")
		}
	}
	if cw.chunking {
		del("Content-Length")
	}
	if w.closeAfter && (!keepAlives || !httpguts.HeaderValuesContainsToken([]string{headerGet(w.sent, "Connection")}, "close")) &&
		!(code == http.StatusSwitchingProtocols && header.Get("Upgrade") != "" && httpguts.HeaderValuesContainsToken(header["Connection"], "Upgrade")) {
		del("Connection")
		extra.connection = "close"
	}

	bw := w.conn.bw
	writeStatusLine(bw, code)
	if w.sent != nil {
		_ = w.sent.WriteSubset(bw, exclude)
	}
	extra.write(bw)
	_, _ = bw.WriteString("\r\n")
}

// extraHeader is what writeHeader adds, written in net/http's order.
type extraHeader struct {
	contentType      string
	connection       string
	transferEncoding string
	date             []byte
	contentLength    []byte
}

func (h *extraHeader) write(bw *bufio.Writer) {
	if h.date != nil {
		_, _ = bw.WriteString("Date: ")
		_, _ = bw.Write(h.date)
		_, _ = bw.WriteString("\r\n")
	}
	if h.contentLength != nil {
		_, _ = bw.WriteString("Content-Length: ")
		_, _ = bw.Write(h.contentLength)
		_, _ = bw.WriteString("\r\n")
	}
	for _, kv := range [...][2]string{{"Content-Type", h.contentType}, {"Connection", h.connection}, {"Transfer-Encoding", h.transferEncoding}} {
		if kv[1] != "" {
			_, _ = bw.WriteString(kv[0])
			_, _ = bw.WriteString(": ")
			_, _ = bw.WriteString(kv[1])
			_, _ = bw.WriteString("\r\n")
		}
	}
}

// writeStatusLine writes an HTTP/1.1 status line as net/http does.
func writeStatusLine(bw *bufio.Writer, code int) {
	_, _ = bw.WriteString("HTTP/1.1 ")
	if text := http.StatusText(code); text != "" {
		var b [3]byte
		_, _ = bw.Write(strconv.AppendInt(b[:0], int64(code), 10))
		_ = bw.WriteByte(' ')
		_, _ = bw.WriteString(text)
		_, _ = bw.WriteString("\r\n")
		return
	}
	c := strconv.Itoa(code)
	_, _ = bw.WriteString(strings.Repeat("0", max(3-len(c), 0)) + c + " status code " + c + "\r\n")
}

var excludedHeadersNoBody = map[string]bool{"Content-Length": true, "Transfer-Encoding": true}

func bodyAllowedForStatus(status int) bool {
	return !(status >= 100 && status <= 199 || status == http.StatusNoContent || status == http.StatusNotModified)
}

func suppressedHeaders(status int) []string {
	switch {
	case status == http.StatusNotModified:
		return []string{"Content-Type", "Content-Length", "Transfer-Encoding"}
	case !bodyAllowedForStatus(status):
		return []string{"Content-Length", "Transfer-Encoding"}
	}
	return nil
}

// wantsClose reports whether the client asked to close the connection
// after req, as net/http's server reads it (Request.wantsClose): req.Close
// (a "close" between commas, the transfer's reading) or "close" anywhere
// in the first Connection value between spaces, tabs or commas, in any
// case ("Close 00" is one). The two readings differ, and the server
// answers as net/http does (FuzzServerSameBytes found the difference).
func wantsClose(req *http.Request) bool {
	return req.Close || hasCloseToken(headerGet(req.Header, "Connection"))
}

// hasCloseToken is net/http's hasToken(v, "close"): "close" in any case,
// bounded by v's ends, spaces, tabs or commas. strings.EqualFold folds
// Unicode, but a five-byte window it finds equal to "close" has five runes
// of one byte each, so it folds ASCII only, as net/http does.
func hasCloseToken(v string) bool {
	const token = "close"
	for sp := 0; sp+len(token) <= len(v); sp++ {
		end := sp + len(token)
		if (sp == 0 || isTokenBoundary(v[sp-1])) && (end == len(v) || isTokenBoundary(v[end])) &&
			strings.EqualFold(v[sp:end], token) {
			return true
		}
	}
	return false
}

func isTokenBoundary(b byte) bool { return b == ' ' || b == ',' || b == '\t' }

// headerGet and headerHas look a key up as given (net/http's Header.get
// and has: the keys it asks for are canonical).
func headerGet(h http.Header, key string) string {
	if v := h[key]; len(v) > 0 {
		return v[0]
	}
	return ""
}

func headerHas(h http.Header, key string) bool {
	_, ok := h[key]
	return ok
}

// foreachHeaderElement calls fn for each non-empty element of a
// comma-separated header value.
func foreachHeaderElement(v string, fn func(string)) {
	for f := range strings.SplitSeq(v, ",") {
		if f = strings.TrimSpace(f); f != "" {
			fn(f)
		}
	}
}
