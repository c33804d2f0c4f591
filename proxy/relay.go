package proxy

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// hostPattern is one entry of the tunnel list: "host", "host:port",
// "*.domain" or "*", optionally with a port.
type hostPattern struct {
	host   string // lower case; "" for "*"
	suffix bool   // "*.domain": host is ".domain"
	port   string // "" matches every port
}

func parsePatterns(list []string) ([]hostPattern, error) {
	var out []hostPattern
	for _, s := range list {
		pat, err := parsePattern(s)
		if err != nil {
			return nil, err
		}
		out = append(out, pat)
	}
	return out, nil
}

func parsePattern(s string) (hostPattern, error) {
	s = strings.ToLower(strings.TrimSpace(s))
	var pat hostPattern
	if h, port, err := net.SplitHostPort(s); err == nil {
		if _, perr := strconv.ParseUint(port, 10, 16); perr != nil {
			return pat, fmt.Errorf("proxy: tunnel entry %q: bad port", s)
		}
		s, pat.port = h, port
	}
	switch {
	case s == "*":
	case strings.HasPrefix(s, "*."):
		pat.host, pat.suffix = s[1:], true
	case s == "" || strings.Contains(s, "*"):
		return pat, fmt.Errorf("proxy: tunnel entry %q: want host, host:port, *.domain or *", s)
	default:
		pat.host = strings.TrimSuffix(strings.Trim(s, "[]"), ".")
	}
	return pat, nil
}

// match reports whether host:port is allowed by the pattern, and whether
// only public addresses may be reached through it (wildcards).
func (pat hostPattern) match(host, port string) (ok, publicOnly bool) {
	if pat.port != "" && pat.port != port {
		return false, false
	}
	switch {
	case pat.host == "":
		return true, true
	case pat.suffix:
		return strings.HasSuffix(host, pat.host), true
	}
	return host == pat.host, false
}

// dialPolicy travels in the context of a relayed request to the dialer.
type dialPolicy struct{ publicOnly bool }

type dialPolicyKey struct{}

// relayTarget decides whether a CONNECT or proxy-form request may go to
// hostport: intercepted hosts and tunnel entries only, never one of the
// proxy's own listeners.
func (p *Proxy) relayTarget(hostport string) (dialPolicy, refusal) {
	host, port := splitTarget(hostport)
	if ip := net.ParseIP(host); (ip != nil || host == "localhost") && p.isOwnListener(host, port) {
		return dialPolicy{}, refuseOwnListen
	}
	if p.intercepts(hostport) {
		return dialPolicy{}, ""
	}
	allowed, publicOnly := false, true
	for _, pat := range p.tunnel {
		if ok, pub := pat.match(host, port); ok {
			allowed, publicOnly = true, publicOnly && pub
		}
	}
	if !allowed {
		return dialPolicy{}, refuseTarget
	}
	return dialPolicy{publicOnly: publicOnly}, ""
}

// splitTarget splits a relay target into a lower-case host and a port
// (443 when none is given, as CONNECT always has one).
func splitTarget(hostport string) (host, port string) {
	host, port, err := net.SplitHostPort(hostport)
	if err != nil {
		host, port = hostport, "443"
	}
	return strings.TrimSuffix(strings.ToLower(strings.Trim(host, "[]")), "."), port
}

// noteListener records the port a request came in on: the proxy never
// relays to it.
func (p *Proxy) noteListener(r *http.Request) {
	if a, ok := r.Context().Value(http.LocalAddrContextKey).(net.Addr); ok {
		p.AddListener(a)
	}
}

// AddListener tells the proxy about one of its listeners (the admin
// listener, say): CONNECT and proxy-form requests never reach it. The
// listener that serves a request is noted by itself.
func (p *Proxy) AddListener(a net.Addr) {
	if ta, ok := a.(*net.TCPAddr); ok {
		p.ownPorts.add(ta.Port)
		return
	}
	if _, port, err := net.SplitHostPort(a.String()); err == nil {
		if n, err := strconv.Atoi(port); err == nil {
			p.ownPorts.add(n)
		}
	}
}

// portSet is a set of ports read on every request (noteListener) and
// written once per listener: a read takes no allocation.
type portSet struct {
	mu    sync.RWMutex
	ports map[int]bool
}

func (s *portSet) add(port int) {
	if s.has(port) {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ports == nil {
		s.ports = map[int]bool{}
	}
	s.ports[port] = true
}

func (s *portSet) has(port int) bool {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.ports[port]
}

// isOwnListener reports whether host:port reaches one of the proxy's
// listeners: a listener's port on an address of this machine.
func (p *Proxy) isOwnListener(host, port string) bool {
	if n, err := strconv.Atoi(port); err != nil || !p.ownPorts.has(n) {
		return false
	}
	if host == "localhost" {
		return true
	}
	if i := strings.IndexByte(host, '%'); i >= 0 { // an IPv6 zone: the address is the same
		host = host[:i]
	}
	ip := net.ParseIP(host)
	if ip == nil {
		return false
	}
	if ip.IsLoopback() || ip.IsUnspecified() {
		return true
	}
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return true // cannot tell: refuse
	}
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok && n.IP.Equal(ip) {
			return true
		}
	}
	return false
}

// Dial refusals, reported to the client by the relay as a failed dial.
var (
	errOwnListener = errors.New("proxy: refusing to connect to its own listener")
	errNotPublic   = errors.New("proxy: a wildcard tunnel entry reaches public addresses only")
)

// dialer returns the proxy's dial function: it checks the address each
// connection really goes to (after name resolution, so DNS rebinding
// cannot get around it) and remembers the proxy's own connections to
// loopback, which the admin endpoints then refuse.
func (p *Proxy) dialer(timeout time.Duration) func(ctx context.Context, network, addr string) (net.Conn, error) {
	base := &net.Dialer{Timeout: timeout, KeepAlive: 30 * time.Second}
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		pol, _ := ctx.Value(dialPolicyKey{}).(dialPolicy)
		d := *base
		d.Control = func(_, address string, _ syscall.RawConn) error { return p.checkDial(address, pol) }
		c, err := d.DialContext(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return p.track(c), nil
	}
}

func (p *Proxy) checkDial(address string, pol dialPolicy) error {
	host, port, err := net.SplitHostPort(address)
	if err != nil {
		return err
	}
	if p.isOwnListener(host, port) {
		return errOwnListener
	}
	if ip := net.ParseIP(host); pol.publicOnly && (ip == nil || !isPublic(ip)) {
		return errNotPublic
	}
	return nil
}

func isPublic(ip net.IP) bool {
	return !(ip.IsLoopback() || ip.IsPrivate() || ip.IsUnspecified() || ip.IsLinkLocalUnicast() ||
		ip.IsLinkLocalMulticast() || ip.IsInterfaceLocalMulticast() || ip.IsMulticast())
}

// track remembers a connection the proxy made to a loopback address
// until it is closed.
func (p *Proxy) track(c net.Conn) net.Conn {
	tc, ok := c.(*net.TCPConn)
	ra, _ := c.RemoteAddr().(*net.TCPAddr)
	if !ok || ra == nil || !ra.IP.IsLoopback() {
		return c
	}
	key := connKey(c.LocalAddr().String(), ra.String())
	p.selfConns.Store(key, true)
	return &trackedConn{TCPConn: tc, forget: func() { p.selfConns.Delete(key) }}
}

// connKey names a connection by both its ends: Linux gives the same
// ephemeral port to connections to different addresses, so a client's
// connection to the proxy can share its local port with one of the
// proxy's own connections (to an upstream on loopback), and a key of the
// port alone took that client for the proxy relaying to itself.
func connKey(local, remote string) string { return local + ">" + remote }

// trackedConn forgets itself when closed; it keeps every method of the
// TCP connection (the relay half-closes tunnels).
type trackedConn struct {
	*net.TCPConn
	once   sync.Once
	forget func()
}

func (c *trackedConn) Close() error {
	c.once.Do(c.forget)
	return c.TCPConn.Close()
}

// directLoopback reports whether a request comes straight from a process
// on this machine: a loopback peer that is not one of the proxy's own
// outgoing connections (a request it relayed to itself).
func (p *Proxy) directLoopback(r *http.Request) bool {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		return false
	}
	ip := net.ParseIP(host)
	if ip == nil || !ip.IsLoopback() {
		return false
	}
	if a, ok := r.Context().Value(http.LocalAddrContextKey).(net.Addr); ok {
		// The proxy's own connection, seen from this end: its local
		// address is the client's, its remote one this listener's.
		_, relayed := p.selfConns.Load(connKey(r.RemoteAddr, a.String()))
		return !relayed
	}
	relayed := false // no listener address: any own connection from that port
	p.selfConns.Range(func(k, _ any) bool {
		relayed = strings.HasPrefix(k.(string), r.RemoteAddr+">")
		return !relayed
	})
	return !relayed
}
