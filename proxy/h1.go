package proxy

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"github.com/shaperproxy/shaperproxy/internal/bigbuf"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// h1Transport sends a request to a plain-HTTP upstream over a kept-alive
// HTTP/1.1 connection in the caller's goroutine: the request is written
// as net/http's Request.Write writes it (writeRequest: the same bytes)
// and the answer read with net/http's own ReadResponse. http.Transport
// runs a reading and a writing goroutine per connection and hands every
// request and answer between them and the caller (four hand-offs and
// their wake-ups a request); for a small request that is a tenth of the
// proxy's CPU (issue 15). Here the handler's goroutine does it all, and a
// connection is checked before it is used again instead of being watched
// while idle.
//
// A body over maxInlineBody is written in one write call where
// http.Transport passes it through a 32 KiB buffer, a write call each:
// in the caller's goroutine too when it is in memory (writeLarge), with a
// watch that sends the rest aside if an answer comes while the upstream
// holds the write; else from a goroutine of its own while the answer is
// read (roundTripAside).
//
// What it does not do goes to next (the http.Transport): https, where
// HTTP/2 is worth its goroutines; a body that could not be sent again;
// and platforms where an idle connection cannot be checked (idleCheck).
//
// Retries follow http.Transport's rules: a request is sent again on a new
// connection only when nothing of it reached the old one, or when it is
// replayable (GET, HEAD, OPTIONS, TRACE or an idempotency key) and the
// old connection answered nothing. A chat request (a POST) is never sent
// twice once its bytes went out.
type h1Transport struct {
	next          http.RoundTripper
	dial          func(ctx context.Context, network, addr string) (net.Conn, error)
	headerTimeout time.Duration
	idleTimeout   time.Duration
	maxIdle       int // per host
	maxIdleTotal  int

	// largeInline and largeCut count the large bodies written in the
	// caller's goroutine (writeLarge) and, of them, those whose rest went
	// aside after an early answer (tests).
	largeInline, largeCut atomic.Int64

	mu    sync.Mutex
	idle  map[string][]*h1Conn // most recently used last
	nIdle int
	sweep *time.Timer // set while connections are kept
}

// maxResponseHeader bounds a response's header (and the informational
// answers before it): an upstream sending an endless header line gets an
// error, not the proxy's memory.
const maxResponseHeader = 1 << 20

// maxInlineBody is the largest body written before the answer is read,
// in the caller's goroutine, unwatched. What the kernel's socket buffers
// take (tcp_wmem's and tcp_rmem's defaults) goes out whatever the
// upstream does; a larger body is written with a watch (writeLarge) or
// from a goroutine of its own while the answer is read, as http.Transport
// does (roundTripAside), so that an upstream that answers early (a 413)
// without reading it and without closing gets its answer through instead
// of holding the write.
const maxInlineBody = 64 << 10

// earlyAnswerWait is how long an answer is waited for after the request
// could not be written whole (http.Transport waits as long).
const earlyAnswerWait = 50 * time.Millisecond

// max1xx bounds the informational answers before the real one.
const max1xx = 5

var (
	errHeaderTooLong = errors.New("upstream response header too long")
	errToo1xx        = errors.New("too many informational responses from the upstream")
	errUnexpected101 = errors.New("upstream switched protocols without being asked")
	errHeaderTimeout = errors.New("timeout awaiting response headers")
)

func newH1Transport(next http.RoundTripper, dial func(ctx context.Context, network, addr string) (net.Conn, error), headerTimeout, idleTimeout time.Duration, maxIdle, maxIdleTotal int) *h1Transport {
	return &h1Transport{
		next: next, dial: dial, headerTimeout: headerTimeout, idleTimeout: idleTimeout,
		maxIdle: maxIdle, maxIdleTotal: maxIdleTotal, idle: map[string][]*h1Conn{},
	}
}

// RoundTrip implements http.RoundTripper. As http.Transport, it closes
// the request's body, on errors too (the proxy's held bodies go back when
// their reader is closed).
func (t *h1Transport) RoundTrip(req *http.Request) (*http.Response, error) {
	if !t.sends(req) {
		return t.next.RoundTrip(req)
	}
	return t.roundTripBeside(req, nil)
}

// sends reports whether the transport sends req itself: plain HTTP, with
// a body it can send again, where the idle check works; the rest go to
// the next transport (https, HTTP/2).
func (t *h1Transport) sends(req *http.Request) bool {
	return req.URL.Scheme == "http" && canResend(req) && idleCheckWorks
}

// roundTripBeside is RoundTrip for a request it sends itself (sends),
// with work to run beside the trip (nil: none) once the request is
// flushed; the caller runs it if no one did (a trip that fails before
// its write, or whose write fails, leaves it).
func (t *h1Transport) roundTripBeside(req *http.Request, bw *besideWork) (*http.Response, error) {
	if req.URL.Host == "" {
		closeBody(req)
		return nil, errors.New("http: no Host in request URL")
	}
	key := hostPort(req.URL.Host)
	ctx := req.Context()
	for attempt := 0; ; attempt++ {
		c, err := t.get(ctx, key)
		if err != nil {
			closeBody(req)
			return nil, err
		}
		if ctx.Err() != nil { // the client left: nothing goes out (and the key is not spent)
			t.put(c)
			closeBody(req)
			return nil, ctx.Err()
		}
		resp, wrote, err := c.roundTrip(req, bw) // c.got: what the old connection answered
		if err == nil {
			return resp, nil
		}
		c.close()
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		if attempt > 0 || !c.reused || !(wrote == 0 || isReplayable(req) && c.got == 0) {
			return nil, err
		}
		if req, err = rewound(req); err != nil {
			return nil, err
		}
	}
}

// CloseIdleConnections closes the connections kept for later requests
// (and the next transport's) and stops the idle timer, which would
// otherwise keep the transport, and the proxy its dialer belongs to,
// reachable until it fires.
func (t *h1Transport) CloseIdleConnections() {
	t.mu.Lock()
	idle := t.idle
	t.idle, t.nIdle = map[string][]*h1Conn{}, 0
	if t.sweep != nil {
		t.sweep.Stop()
		t.sweep = nil
	}
	t.mu.Unlock()
	for _, cs := range idle {
		for _, c := range cs {
			c.close()
		}
	}
	closeIdle(t.next)
}

// closeBody closes the body of a request that will not be written
// (Request.Write closes the body of one that is).
func closeBody(req *http.Request) {
	if req.Body != nil {
		_ = req.Body.Close()
	}
}

// canResend reports whether the request's body can be written again on a
// new connection (none, or GetBody gives it again).
func canResend(req *http.Request) bool {
	return req.Body == nil || req.Body == http.NoBody || req.GetBody != nil
}

// isReplayable is http.Request's rule for sending a request again after
// it may have reached the server.
func isReplayable(req *http.Request) bool {
	switch req.Method {
	case "", http.MethodGet, http.MethodHead, http.MethodOptions, http.MethodTrace:
		return true
	}
	_, a := req.Header["Idempotency-Key"]
	_, b := req.Header["X-Idempotency-Key"]
	return a || b
}

// rewound returns req with its body to be read again from the start.
func rewound(req *http.Request) (*http.Request, error) {
	if req.Body == nil || req.Body == http.NoBody {
		return req, nil
	}
	body, err := req.GetBody()
	if err != nil {
		return nil, err
	}
	r := *req
	r.Body = body
	return &r, nil
}

func hostPort(host string) string {
	if _, _, err := net.SplitHostPort(host); err == nil {
		return host
	}
	if strings.HasPrefix(host, "[") && strings.HasSuffix(host, "]") {
		return host + ":80"
	}
	return net.JoinHostPort(host, "80")
}

// get returns an idle connection to key that is still open and has
// nothing unread, or a new one.
func (t *h1Transport) get(ctx context.Context, key string) (*h1Conn, error) {
	now := monoNow()
	for {
		t.mu.Lock()
		cs := t.idle[key]
		if len(cs) == 0 {
			t.mu.Unlock()
			break
		}
		c := cs[len(cs)-1]
		cs[len(cs)-1] = nil
		t.idle[key] = cs[:len(cs)-1]
		t.nIdle--
		t.mu.Unlock()
		if now.Sub(c.since) < t.idleTimeout && c.br.Buffered() == 0 && idleCheck(c.raw) {
			c.reused = true
			return c, nil
		}
		c.close()
	}
	nc, err := t.dial(ctx, "tcp", key)
	if err != nil {
		return nil, err
	}
	c := &h1Conn{t: t, key: key, conn: nc, limit: -1}
	if sc, ok := nc.(syscall.Conn); ok {
		c.raw, _ = sc.SyscallConn()
	}
	c.br = bufio.NewReader(c)
	c.bw = bufio.NewWriter(countingConn{c})
	return c, nil
}

// put keeps c for a later request to its host, within the bounds. While
// any is kept, a timer closes those kept longer than the idle timeout
// (between one and 1.5 idle timeouts after their last use).
func (t *h1Transport) put(c *h1Conn) {
	c.since, c.reused = monoNow(), false
	if !c.rdl.at.IsZero() && c.rdl.at.Sub(c.since) < t.idleTimeout*3/2 {
		// A deadline kept past a small answer (keepDeadline) that would
		// pass while the connection waits here (up to 1.5 idle timeouts,
		// closeExpired's sweep) would make the idle check drop a good
		// connection: a header timeout not well over the idle timeout, or
		// a header that took long to come.
		c.setReadDeadline(time.Time{})
	}
	t.mu.Lock()
	if len(t.idle[c.key]) >= t.maxIdle || t.nIdle >= t.maxIdleTotal {
		t.mu.Unlock()
		c.close()
		return
	}
	t.idle[c.key] = append(t.idle[c.key], c)
	t.nIdle++
	if t.sweep == nil {
		t.sweep = time.AfterFunc(t.idleTimeout/2, t.closeExpired)
	}
	t.mu.Unlock()
}

// closeExpired closes the connections kept longer than the idle timeout,
// and those the upstream closed meanwhile.
func (t *h1Transport) closeExpired() {
	now := monoNow()
	var drop []*h1Conn
	t.mu.Lock()
	for k, cs := range t.idle {
		n := 0
		for _, c := range cs {
			if now.Sub(c.since) < t.idleTimeout && idleCheck(c.raw) {
				cs[n] = c
				n++
			} else {
				drop = append(drop, c)
			}
		}
		clear(cs[n:])
		t.idle[k], t.nIdle = cs[:n], t.nIdle-(len(cs)-n)
		if n == 0 {
			delete(t.idle, k)
		}
	}
	switch {
	case t.sweep == nil: // CloseIdleConnections ran meanwhile
	case t.nIdle > 0:
		t.sweep.Reset(t.idleTimeout / 2)
	default:
		t.sweep = nil
	}
	t.mu.Unlock()
	for _, c := range drop {
		c.close()
	}
}

// h1Conn is one connection to an upstream, used by one request at a time.
type h1Conn struct {
	t      *h1Transport
	key    string
	conn   net.Conn
	raw    syscall.RawConn // for idleCheck; nil: never reused
	br     *bufio.Reader
	bw     *bufio.Writer
	limit  int64 // what reads may still take while a header is read; < 0: no bound
	wrote  int64 // bytes the current request put on the connection
	got    int64 // bytes read for it
	since  time.Time
	reused bool
	// rdl is the read deadline set on the connection (zero: none). The
	// header's deadline is moved only once less than the header timeout
	// is left (deadline's rule), and it stays set after the header when
	// the answer's body is already read with it (keepDeadline), unless it
	// would pass while the connection waits in the pool (put): a small
	// answer costs no deadline change at all most of the time, where it
	// cost two.
	rdl deadline

	// While a body written aside (sendAside, or its rest after a watch
	// stopped its write: writeRest) may still be going out, the header's
	// deadline is set by the writer once it is done, unless the header
	// came first.
	dl         sync.Mutex
	headerRead bool
}

// Read reads from the connection within the header's bound.
func (c *h1Conn) Read(p []byte) (int, error) {
	if c.limit == 0 {
		return 0, errHeaderTooLong
	}
	if c.limit > 0 && int64(len(p)) > c.limit {
		p = p[:c.limit]
	}
	n, err := c.conn.Read(p)
	c.got += int64(n)
	if c.limit > 0 {
		c.limit -= int64(n)
	}
	return n, err
}

// countingConn counts what the connection's writer puts on it.
type countingConn struct{ c *h1Conn }

func (w countingConn) Write(p []byte) (int, error) {
	n, err := w.c.conn.Write(p)
	w.c.wrote += int64(n)
	return n, err
}

// ReadFrom writes a body held in memory (what req.Write hands over,
// behind its length's io.LimitedReader) with one Write: the connection's
// writer loops on it as the socket takes it, where a copy would pass it
// through a 32 KiB buffer, a write call each. Other readers are copied.
func (w countingConn) ReadFrom(r io.Reader) (int64, error) {
	if lr, ok := r.(*io.LimitedReader); ok {
		if br, ok := lr.R.(*bytes.Reader); ok && int64(br.Len()) <= lr.N {
			n, err := br.WriteTo(w)
			lr.N -= n
			return n, err
		}
		if h, ok := lr.R.(*heldBody); ok {
			if n, ok, err := h.writeTo(w, lr.N); ok {
				lr.N -= n
				return n, err
			}
		}
	}
	bp := copyBufs.Get().(*[]byte)
	defer copyBufs.Put(bp)
	return io.CopyBuffer(struct{ io.Writer }{w}, r, *bp)
}

// writesPieces reports whether writePieces is one system call: a TCP
// connection's writev (net.Buffers writes any other connection a piece
// at a time).
func (w countingConn) writesPieces() bool {
	switch w.c.conn.(type) {
	case *net.TCPConn, *trackedConn: // the second embeds the first, with its writev
		return true
	}
	return false
}

// writePieces writes the bytes of pieces from the from-th on, as
// net.Buffers does: it consumes the list (the caller's, made to be
// written).
func (w countingConn) writePieces(pieces net.Buffers, from int64) (int64, error) {
	for len(pieces) > 0 && int64(len(pieces[0])) <= from {
		from -= int64(len(pieces[0]))
		pieces = pieces[1:]
	}
	if len(pieces) > 0 {
		pieces[0] = pieces[0][from:]
	}
	n, err := pieces.WriteTo(w.c.conn)
	w.c.wrote += n
	return n, err
}

// pieceLists are the lists of pieces heldBody.writeTo makes a body's
// pieces in, as it writes them.
var pieceLists = sync.Pool{New: func() any { return new(net.Buffers) }}

func (c *h1Conn) close() { _ = c.conn.Close() }

// setReadDeadline sets the connection's read deadline (zero: none).
func (c *h1Conn) setReadDeadline(t time.Time) {
	c.rdl.at = t
	_ = c.conn.SetReadDeadline(t)
}

// keepDeadline reports whether the header's deadline may stay set past
// resp's header: its body is all in the reader's buffer, so no read of it
// reaches the connection. One that would pass while the connection waits
// in the pool, and make the idle check fail, is cleared by put.
func (c *h1Conn) keepDeadline(resp *http.Response) bool { return c.bodyBuffered(resp) }

// bodyBuffered reports whether resp's body, of a declared length, is all
// in the reader's buffer: reading it never reaches the connection.
func (c *h1Conn) bodyBuffered(resp *http.Response) bool {
	return resp.ContentLength >= 0 && int64(c.br.Buffered()) >= resp.ContentLength
}

// roundTrip writes req and reads the answer's header. wrote is how much
// of the request reached the connection.
//
// bw, the work beside the trip (nil: none), runs once the request is
// flushed: here, between the write and the read, or after a large body's
// write in the goroutine that writes it aside. After a large body, the
// observers' work alone (besideWork.mayWait) waits for the answer's first
// bytes. A write that fails leaves it to the caller (Proxy.roundTrip runs
// what no one ran).
func (c *h1Conn) roundTrip(req *http.Request, bw *besideWork) (_ *http.Response, wrote int64, err error) {
	ctx := req.Context()
	// A client that leaves closes the connection: whatever the round trip
	// is waiting on returns, and a close, unlike a deadline, is not undone
	// by the deadlines set below.
	stop := context.AfterFunc(ctx, c.close)
	defer func() {
		if err != nil {
			stop()
		}
	}()
	c.wrote, c.got = 0, 0
	large := bodyOver(req, maxInlineBody)
	if large && !c.rdl.at.IsZero() {
		// A deadline kept from a small answer: the header's deadline
		// counts from the end of a large body's write, which may take
		// longer, and a passed one would blind writeLarge's watch.
		c.setReadDeadline(time.Time{})
	}
	var werr error
	if large {
		lr, host, ruri, ok := c.inlineLarge(req)
		if !ok {
			return c.roundTripAside(req, stop, bw)
		}
		var cut bool
		if cut, werr = c.writeLarge(req, host, ruri, lr); cut {
			// An answer came while the upstream held the write: the
			// rest goes from a goroutine of its own while it is read.
			c.headerRead = false
			return c.awaitAside(req, stop, c.aside(req, bw, func() error { return c.writeRest(req, lr) }))
		}
	} else {
		werr = writeRequest(c.bw, req)
		if werr == nil {
			werr = c.bw.Flush()
		}
	}
	if werr == nil && c.t.headerTimeout > 0 {
		// The header's deadline counts from the flush, the work
		// beside the trip included (as when it ran in a goroutine of
		// its own).
		if d, ok := c.rdl.next(monoNow(), c.t.headerTimeout, time.Time{}); ok {
			_ = c.conn.SetReadDeadline(d)
		}
	}
	if werr == nil && !(large && bw.mayWait()) {
		// The request is with the kernel, on its way. The observers'
		// work alone waits, after a large body, for the answer's first
		// bytes (as when it is written aside: sendAside).
		bw.Run()
	}
	var resp *http.Response
	switch {
	case werr != nil:
		// An upstream may answer before it has read the whole body (a
		// 413) and close: its answer, if it came, is the one to give.
		if c.wrote == 0 || ctx.Err() != nil {
			return nil, c.wrote, werr
		}
		c.setReadDeadline(time.Now().Add(earlyAnswerWait))
		if resp, err = c.readHeader(req); err != nil {
			return nil, c.wrote, werr
		}
		resp.Close = true // the connection is in no state to be used again
		c.setReadDeadline(time.Time{})
	case c.t.headerTimeout > 0: // its deadline set above
		if resp, err = c.readHeader(req); err != nil {
			return nil, c.wrote, headerError(ctx, err)
		}
		if !c.keepDeadline(resp) {
			c.setReadDeadline(time.Time{})
		}
	default:
		if resp, err = c.readHeader(req); err != nil {
			return nil, c.wrote, err
		}
	}
	resp.Body = &h1Body{r: resp.Body, c: c, stop: stop, ctx: ctx, keep: !resp.Close && !req.Close, whole: c.bodyBuffered(resp)}
	return resp, c.wrote, nil
}

// inlineLarge reports whether req, whose body is over maxInlineBody, is
// written in the caller's goroutine (writeLarge), and gives its body
// behind its declared length: a plain head (writeHead's), and a body in
// memory that countingConn.ReadFrom writes in one call and leaves where it
// stopped (a bytes.Reader, a heldBody), on a connection whose answer can
// be looked for while the body goes out (a raw connection to peek). Any
// other request is written aside from the start (roundTripAside). host
// and ruri are the head's (plainHead).
func (c *h1Conn) inlineLarge(req *http.Request) (lr *io.LimitedReader, host, ruri string, ok bool) {
	if c.raw == nil || req.ContentLength <= 0 {
		return nil, "", "", false
	}
	if host, ruri, ok = plainHead(req); !ok {
		return nil, "", "", false
	}
	body := unwrapNopCloser(req.Body)
	switch b := body.(type) {
	case *bytes.Reader:
		ok = int64(b.Len()) <= req.ContentLength
	case *heldBody:
		ok = b.inMemory(req.ContentLength)
	default:
		ok = false
	}
	if !ok {
		return nil, "", "", false
	}
	return &io.LimitedReader{R: body, N: req.ContentLength}, host, ruri, true
}

// writeLarge writes req, a large body's request (inlineLarge), in the
// caller's goroutine: its head with the body's first bytes in one write
// call, then the rest in one more, watched (writeWatch). A goroutine of
// its own for the write would wake another of the runtime's threads and
// hand the body over to it (the default configuration's CPU a seed
// request at saturation went from 1.06–1.11× the reverse proxy's to
// 0.98–0.99× without it: internal/bench/HISTORY.md, Session BY). It reports cut
// when an answer came while the upstream held the write: the body's rest,
// left in lr, is then the caller's to write aside; else the write's error.
func (c *h1Conn) writeLarge(req *http.Request, host, ruri string, lr *io.LimitedReader) (cut bool, err error) {
	writeHead(c.bw, req, host, ruri)
	// The body's first bytes fill the buffer's room behind the head, as
	// a copy through it would (writeRequest): on a connection with
	// nothing in flight the socket takes them at once, unwatched.
	room := c.bw.AvailableBuffer()[:c.bw.Available()]
	n, err := io.ReadFull(lr, room)
	if err == io.EOF || err == io.ErrUnexpectedEOF {
		// A body far shorter than its declared length: Request.Write's
		// error, nothing sent.
		return false, endBody(req, lr.R, int64(n), nil)
	}
	if err == nil {
		_, _ = c.bw.Write(room[:n])
		err = c.bw.Flush()
	}
	if err != nil {
		return false, endBody(req, lr.R, int64(n), err)
	}
	c.t.largeInline.Add(1)
	w := c.watchWrite()
	defer watches.remove(&w.ww) // after stop, or a panic in the write
	m, err := countingConn{c}.ReadFrom(lr)
	if w.stop() && err != nil && isTimeout(err) {
		c.t.largeCut.Add(1)
		return true, nil
	}
	return false, endBody(req, lr.R, int64(n)+m, err)
}

// writeRest writes what is left of a large body's request after a watch
// cut its write in the caller's goroutine (writeLarge): from the
// goroutine aside, while the answer is read.
func (c *h1Conn) writeRest(req *http.Request, lr *io.LimitedReader) error {
	_, err := countingConn{c}.ReadFrom(lr)
	return endBody(req, lr.R, req.ContentLength-lr.N, err)
}

// writeWatch looks for an answer while a large body is written in the
// caller's goroutine, at each tick of the wheel (watches) until the write
// returns. One that comes before the upstream has taken the whole body (a
// 413 from an upstream that will not read it, or a stream it begins while
// it still reads) stops the write with a deadline that has passed, and
// the rest of the body goes from a goroutine of its own while the answer
// is read, as http.Transport, which always writes aside, reads an early
// answer (TestH1LargeBodyAnsweredEarly, TestH1LargeBodyStreamedEarly). A
// look is one non-blocking peek of the connection; a write the socket
// takes at once (the seed's, over loopback) is looked at seldom or never.
type writeWatch struct {
	c    *h1Conn
	ww   wheelWatch
	mu   sync.Mutex
	over bool // the write ended: no more looks
	cut  bool // a look stopped the write
}

func (c *h1Conn) watchWrite() *writeWatch {
	w := &writeWatch{c: c}
	w.ww.look = w.look
	watches.add(&w.ww)
	return w
}

// look runs in the wheel's goroutine.
func (w *writeWatch) look(time.Time) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.over || w.cut {
		return
	}
	if answerWaiting(w.c.raw) {
		w.cut = true
		_ = w.c.conn.SetWriteDeadline(aLongTimeAgo)
	}
}

// stop ends the watch once the write returned, and reports whether a look
// stopped it; the connection's writes are then free again.
// (A look that comes after it does nothing; writeLarge takes the watch off
// the wheel.)
func (w *writeWatch) stop() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.over = true
	if w.cut {
		_ = w.c.conn.SetWriteDeadline(time.Time{})
	}
	return w.cut
}

// bodyOver reports whether req's body may be longer than n (a length not
// declared counts as longer).
func bodyOver(req *http.Request, n int64) bool {
	if req.Body == nil || req.Body == http.NoBody {
		return false
	}
	return req.ContentLength > n || req.ContentLength <= 0
}

// roundTripAside is roundTrip for a large body: the request is written
// from a goroutine of its own while the answer's header is read here.
// wrote is meaningful only with an error (the write is over by then).
func (c *h1Conn) roundTripAside(req *http.Request, stop func() bool, bw *besideWork) (*http.Response, int64, error) {
	c.headerRead = false
	return c.awaitAside(req, stop, c.sendAside(req, bw))
}

// awaitAside reads the answer's header while w, the request's write
// aside, goes on.
func (c *h1Conn) awaitAside(req *http.Request, stop func() bool, w *h1Write) (*http.Response, int64, error) {
	ctx := req.Context()
	resp, err := c.readHeader(req)
	c.dl.Lock()
	c.headerRead = true
	c.dl.Unlock()
	if err != nil {
		var werr error // the write's own failure, not one the close below makes
		select {
		case <-w.done:
			werr = w.err
		default:
		}
		c.close() // ends the write, if it still runs
		<-w.done
		if werr != nil && ctx.Err() == nil {
			return nil, c.wrote, werr // no early answer: the write's error says what went wrong
		}
		return nil, c.wrote, headerError(ctx, err)
	}
	c.setReadDeadline(time.Time{})
	resp.Body = &h1Body{r: resp.Body, c: c, stop: stop, ctx: ctx, keep: !resp.Close && !req.Close, write: w}
	return resp, 0, nil
}

// h1Write is a request being written aside.
type h1Write struct {
	done chan struct{} // closed when the write is over
	err  error         // its error, once done is closed
}

// sendAside writes req and flushes it from a new goroutine; once it is
// all out, the header's deadline starts (http.Transport's
// ResponseHeaderTimeout counts from there too).
//
// bw, the work beside the trip (nil: none), runs in that goroutine once
// the write is over, whatever its outcome, unless the handler got to it
// first (an answer that came before the write ended); Proxy.roundTrip
// waits for it either way. A slow reader delays it with the write: it is
// needed only before the answer is read. Work that may wait for the
// answer (besideWork.mayWait: the observers' alone) is not run here: the
// upstream is still reading the body when its write ends, and the
// handler runs it once the answer's first bytes are out.
func (c *h1Conn) sendAside(req *http.Request, bw *besideWork) *h1Write {
	return c.aside(req, bw, func() error {
		err := writeRequest(c.bw, req)
		if err == nil {
			err = c.bw.Flush()
		}
		return err
	})
}

// aside runs write, the request's write or what is left of it, from a
// goroutine of its own, as sendAside says.
func (c *h1Conn) aside(req *http.Request, bw *besideWork, write func() error) *h1Write {
	w := &h1Write{done: make(chan struct{})}
	go func() {
		if req.ContentLength >= deepBody {
			_ = deepStack()
		}
		if !bw.mayWait() {
			defer bw.Run() // after done is closed: what waits for the write does not wait for it
		}
		defer close(w.done)
		w.err = write()
		wait := c.t.headerTimeout
		if w.err != nil {
			// As written inline: an answer that came before the write
			// failed is waited for a moment, then the write's error is
			// the answer.
			wait = earlyAnswerWait
		}
		if wait > 0 {
			c.dl.Lock()
			if !c.headerRead {
				c.setReadDeadline(time.Now().Add(wait))
			}
			c.dl.Unlock()
		}
	}()
	return w
}

// deepStack has its goroutine's stack grown, while it is still shallow,
// to what the write aside and the work beside the trip reach: a new
// goroutine starts with a small stack, and one grown as the calls deepen
// is copied with every frame on it, twice a request (the write's header,
// then the capture's record of a large request: 2% of the proxy's CPU on
// the seed's request at saturation). Grown from here, it is copied empty.
//
//go:noinline
func deepStack() byte {
	var pad [aisleStack]byte
	i := deepStackAt % len(pad) // not known to the compiler: the frame stays
	pad[i] = 1
	return pad[len(pad)-1-i]
}

// deepBody is the shortest request body whose write grows its stack first
// (deepStack): a large body, read into a buffer of internal/bigbuf. A
// small request's calls stay within the stack a goroutine starts with
// (the profiles of the small request at saturation show no growth), and
// a growth it does not need would cost it a larger stack.
const deepBody = bigbuf.MinSize

// aisleStack is the frame deepStack takes: the stack it leaves is the
// next power of two above it.
const aisleStack = 8 << 10

// deepStackAt is only read (a variable: the compiler cannot drop pad).
var deepStackAt = 0

// sent reports whether w (nil: written inline) went out whole, waiting
// for it earlyAnswerWait at most: an answer read to its end before its
// request was all written came early, and its connection is not used
// again (http.Transport waits as long before it gives up a connection).
func (w *h1Write) sent() bool {
	if w == nil {
		return true
	}
	select {
	case <-w.done:
		return w.err == nil
	default:
	}
	t := time.NewTimer(earlyAnswerWait)
	defer t.Stop()
	select {
	case <-w.done:
		return w.err == nil
	case <-t.C:
		return false
	}
}

// headerError names a deadline that passed while the header was awaited
// (a client gone is its own error).
func headerError(ctx context.Context, err error) error {
	if isTimeout(err) && ctx.Err() == nil {
		return fmt.Errorf("%w (%w)", errHeaderTimeout, err)
	}
	return err
}

// readHeader reads the answer to req, skipping informational ones.
func (c *h1Conn) readHeader(req *http.Request) (*http.Response, error) {
	c.limit = maxResponseHeader
	defer func() { c.limit = -1 }()
	for n := 0; ; n++ {
		resp, err := http.ReadResponse(c.br, req)
		switch {
		case err != nil:
			return nil, err
		case resp.StatusCode == http.StatusSwitchingProtocols:
			return nil, errUnexpected101
		case resp.StatusCode >= 100 && resp.StatusCode < 200:
			if n == max1xx {
				return nil, errToo1xx
			}
		default:
			return resp, nil
		}
	}
}

// h1Body is an answer's body. Read to its end, its connection goes back
// to the idle list; closed before (from any goroutine, a Read waiting
// included), the connection is closed. The inner body's own Close is
// never called: it would read the rest of a stream to its end.
type h1Body struct {
	r     io.ReadCloser
	c     *h1Conn
	stop  func() bool
	ctx   context.Context
	keep  bool
	write *h1Write // the request's body written aside, or nil
	whole bool     // all of it was in the reader's buffer with the header

	done   atomic.Bool // the connection went back or was closed
	closed atomic.Bool
}

func (b *h1Body) Read(p []byte) (int, error) {
	if b.closed.Load() {
		return 0, http.ErrBodyReadAfterClose
	}
	n, err := b.r.Read(p)
	if err != nil {
		b.end(err == io.EOF)
		if err != io.EOF && b.ctx.Err() != nil {
			err = b.ctx.Err()
		}
	}
	return n, err
}

// inMemory reports that the body came whole with its header: no read
// of it waits on the upstream (the stream idle timer needs no start).
func (b *h1Body) inMemory() bool { return b.whole }

func (b *h1Body) Close() error {
	b.closed.Store(true)
	b.end(false)
	return nil
}

// end gives the connection back (whole, nothing cut by the context) or
// closes it, once.
func (b *h1Body) end(whole bool) {
	if b.done.Swap(true) {
		return
	}
	if b.stop() && whole && b.keep && b.write.sent() {
		b.c.t.put(b.c)
		return
	}
	b.c.close()
}
