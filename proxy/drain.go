package proxy

import (
	"context"
	"errors"
	"net"
	"net/http"
	"sync"
	"time"
)

// errShutdown is the cause of a call cut because the program is stopping.
var errShutdown = errors.New("shaperproxy is stopping")

// flight is what the proxy has in flight: the calls (with what cuts each
// one), the servers of intercepted tunnels and the open tunnels, so that a
// stop can wait for the calls and cut what is left.
type flight struct {
	mu       sync.Mutex
	calls    map[*Call]cutter
	servers  map[*http.Server]bool
	tunnels  map[*tunnel]bool
	draining bool
	waiters  int           // Wait calls waiting
	changed  chan struct{} // closed (and replaced) when the last call ends while draining or waited for
}

func (f *flight) init() {
	f.calls = map[*Call]cutter{}
	f.servers = map[*http.Server]bool{}
	f.tunnels = map[*tunnel]bool{}
	f.changed = make(chan struct{})
}

// cutter cuts a call: the cancel func of its connection's context
// (ConnContext), or of a context of its own (own) that its end cancels.
type cutter struct {
	cancel context.CancelCauseFunc
	own    bool
}

// connCutKey is the context key of a connection's cancel func.
type connCutKey struct{}

// ConnContext is http.Server.ConnContext for a server that serves the
// proxy: each connection gets a context that Cut can cancel, so a call on
// it needs no context of its own (making one, registering it with the
// request's and cancelling it again cost about 3 µs a call, the most of
// anything the proxy adds to a small request). A server without it still
// works: each call then makes its own, as it does when the server's base
// context can be cancelled (a context derived from one stays registered
// with it until it ends, and a connection's is never cancelled but by
// Cut: each connection would leave its context behind).
func (p *Proxy) ConnContext(ctx context.Context, _ net.Conn) context.Context {
	if ctx.Done() != nil {
		return ctx
	}
	cctx, cancel := context.WithCancelCause(ctx)
	return context.WithValue(cctx, connCutKey{}, cancel)
}

// begin registers a call the proxy serves: the response carries its id,
// and the returned context is the call's, which Cut cancels (through its
// connection's context when the server has ConnContext: a cut connection
// fails its later calls too, which only a stop does).
func (p *Proxy) begin(w http.ResponseWriter, r *http.Request, call *Call) context.Context {
	w.Header()[CallIDHeader] = []string{call.ID}
	ctx := r.Context()
	c := cutter{}
	if cancel, ok := ctx.Value(connCutKey{}).(context.CancelCauseFunc); ok {
		c.cancel = cancel
	} else {
		ctx, c.cancel = context.WithCancelCause(ctx)
		c.own = true
	}
	p.flight.mu.Lock()
	p.flight.calls[call] = c
	p.flight.mu.Unlock()
	return ctx
}

// end forgets a call registered by begin.
func (p *Proxy) end(call *Call) {
	f := &p.flight
	f.mu.Lock()
	defer f.mu.Unlock()
	if c, ok := f.calls[call]; ok {
		if c.own {
			c.cancel(nil)
		}
		delete(f.calls, call)
		if (f.draining || f.waiters > 0) && len(f.calls) == 0 { // what Drain and Wait wait for; nothing else does
			close(f.changed)
			f.changed = make(chan struct{})
		}
	}
}

// addServer registers the server of an intercepted tunnel; false when
// the proxy is stopping and the tunnel must not start.
func (f *flight) addServer(s *http.Server) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.draining {
		return false
	}
	f.servers[s] = true
	return true
}

func (f *flight) removeServer(s *http.Server) {
	f.mu.Lock()
	delete(f.servers, s)
	f.mu.Unlock()
}

func (f *flight) addTunnel(t *tunnel) {
	f.mu.Lock()
	f.tunnels[t] = true
	f.mu.Unlock()
}

func (f *flight) removeTunnel(t *tunnel) {
	f.mu.Lock()
	delete(f.tunnels, t)
	f.mu.Unlock()
}

// InFlight returns the number of calls in flight.
func (p *Proxy) InFlight() int {
	p.flight.mu.Lock()
	defer p.flight.mu.Unlock()
	return len(p.flight.calls)
}

// Drain lets the calls in flight finish: the servers of intercepted
// tunnels stop taking requests (idle ones close, keep-alives end), no new
// intercepted tunnel starts, and Drain returns nil once no call is in
// flight, or ctx's error when it ends first (the calls then go on: Cut
// ends them). The caller stops the listeners first
// (http.Server.Shutdown). Drain is safe to call more than once.
func (p *Proxy) Drain(ctx context.Context) error {
	f := &p.flight
	f.mu.Lock()
	f.draining = true
	for s := range f.servers {
		go func() { _ = s.Shutdown(ctx) }()
	}
	f.mu.Unlock()
	return f.wait(ctx)
}

// Wait returns nil once no call is in flight, or ctx's error when it ends
// first. Unlike Drain it changes nothing: new calls go on being served
// (a caller that wants every record of the calls it made, such as a
// flush of the capture, waits for them to end: a call's last records are
// handed over after its client has the answer).
func (p *Proxy) Wait(ctx context.Context) error {
	f := &p.flight
	f.mu.Lock()
	f.waiters++
	f.mu.Unlock()
	defer func() {
		f.mu.Lock()
		f.waiters--
		f.mu.Unlock()
	}()
	return f.wait(ctx)
}

// wait waits until no call is in flight; the caller has made end signal
// (draining or waiters).
func (f *flight) wait(ctx context.Context) error {
	for {
		f.mu.Lock()
		n, changed := len(f.calls), f.changed
		f.mu.Unlock()
		if n == 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-changed:
		}
	}
}

// Cut ends every call in flight, each logged (its call line follows, with
// the model): its context is cancelled, its outcome is "shutdown" and a
// client in the middle of a response sees it cut. It returns how many calls were cut; wait for their ends with
// Drain.
func (p *Proxy) Cut() int {
	f := &p.flight
	f.mu.Lock()
	defer f.mu.Unlock()
	for call, c := range f.calls {
		// Only what was set before begin: the request path writes the rest.
		p.log.Warn("call cut: the proxy is stopping", "call", call.ID, "route", call.Route,
			"method", call.Method, "path", logPath(call), durationMS(time.Since(call.Start)))
		c.cancel(errShutdown)
	}
	return len(f.calls)
}

// CloseTunnels closes every tunnel still open: tunnelled CONNECTs, whose
// traffic the proxy cannot see, and intercepted ones. Each is logged.
func (p *Proxy) CloseTunnels() {
	f := &p.flight
	f.mu.Lock()
	open := make([]*tunnel, 0, len(f.tunnels))
	for t := range f.tunnels {
		open = append(open, t)
	}
	f.mu.Unlock()
	for _, t := range open {
		t.shut()
	}
}
