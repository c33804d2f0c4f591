package proxy

import (
	"bufio"
	"context"
	"crypto/tls"
	"encoding/base64"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tidwall/gjson"
)

// rawExchange sends raw on a new connection to addr and reads one
// response (the connection is returned for more).
func rawExchange(t *testing.T, addr, raw string) (*http.Response, []byte, net.Conn, *bufio.Reader) {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.WriteString(c, raw); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, &http.Request{Method: strings.Fields(raw)[0]})
	if err != nil {
		t.Fatalf("no response: %v", err)
	}
	var body []byte
	if !(resp.Request.Method == http.MethodConnect && resp.StatusCode == http.StatusOK) { // else: the tunnel
		body, _ = io.ReadAll(io.LimitReader(resp.Body, 1<<16))
	}
	return resp, body, c, br
}

// adminCounter is an admin handler that counts what reaches it.
func adminCounter(n *atomic.Int32) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n.Add(1)
		fmt.Fprint(w, `{"stats":"secret originals"}`)
	})
}

// TestRelayToOwnListenerRefused is the issue's
// `curl -p --proxy http://127.0.0.1:P http://127.0.0.1:P/_shaperproxy/originals/stats`:
// a CONNECT to the proxy's own address (and the same in proxy form) is
// refused with a 403, whatever the tunnel list says, and the admin
// endpoint is never reached. (Before: the CONNECT was tunnelled to the
// proxy itself, which answered the admin request as a loopback client.)
func TestRelayToOwnListenerRefused(t *testing.T) {
	for _, tunnel := range [][]string{nil, {"127.0.0.1"}, {"*"}} {
		var hits atomic.Int32
		_, px := newTestProxy(t, "http://127.0.0.1:1", func(o *Options) {
			o.Admin, o.Tunnel = adminCounter(&hits), tunnel
		})
		addr := strings.TrimPrefix(px.URL, "http://")
		resp, body, c, br := rawExchange(t, addr, "CONNECT "+addr+" HTTP/1.1\r\nHost: "+addr+"\r\n\r\n")
		if resp.StatusCode != http.StatusForbidden {
			// The old proxy tunnelled: send what curl -p sends next.
			fmt.Fprintf(c, "GET /_shaperproxy/originals/stats HTTP/1.1\r\nHost: %s\r\n\r\n", addr)
			inner, err := http.ReadResponse(br, nil)
			if err == nil {
				b, _ := io.ReadAll(inner.Body)
				t.Errorf("tunnel %q: CONNECT to the proxy itself answered %d, then the admin endpoint answered %d %s", tunnel, resp.StatusCode, inner.StatusCode, b)
			}
			t.Fatalf("tunnel %q: CONNECT to the proxy itself: %d, want 403", tunnel, resp.StatusCode)
		}
		if code := gjson.GetBytes(body, "error.code").String(); code == "" {
			t.Errorf("tunnel %q: the 403 does not say why: %s", tunnel, body)
		}
		resp, _, _, _ = rawExchange(t, addr, "GET http://"+addr+"/_shaperproxy/originals/stats HTTP/1.1\r\nHost: "+addr+"\r\n\r\n")
		if resp.StatusCode != http.StatusForbidden {
			t.Errorf("tunnel %q: proxy-form request to the proxy itself: %d, want 403", tunnel, resp.StatusCode)
		}
		if hits.Load() != 0 {
			t.Fatalf("tunnel %q: the admin endpoint was reached through the relay", tunnel)
		}
	}
}

// TestRelayOnlyToAllowedHosts: with the default (empty) tunnel list a
// CONNECT or proxy-form request to a host that is not intercepted gets a
// 403 and nothing is dialled; a wildcard entry reaches public addresses
// only. (Before: every host:port was relayed.)
func TestRelayOnlyToAllowedHosts(t *testing.T) {
	var reached atomic.Int32
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		reached.Add(1)
		fmt.Fprint(w, "internal service")
	}))
	defer up.Close()
	target := strings.TrimPrefix(up.URL, "http://")
	for _, tc := range []struct {
		tunnel []string
		want   int
	}{
		{nil, http.StatusForbidden},
		{[]string{"api.example.com"}, http.StatusForbidden},
		{[]string{"*"}, http.StatusForbidden}, // allowed by name, refused at the dial: loopback is not public
		{[]string{"127.0.0.1"}, http.StatusOK},
	} {
		_, px := newTestProxy(t, "http://127.0.0.1:1", func(o *Options) { o.Tunnel = tc.tunnel })
		addr := strings.TrimPrefix(px.URL, "http://")
		resp, _, _, _ := rawExchange(t, addr, "CONNECT "+target+" HTTP/1.1\r\nHost: "+target+"\r\n\r\n")
		if resp.StatusCode != tc.want {
			t.Errorf("tunnel %q: CONNECT %s: %d, want %d", tc.tunnel, target, resp.StatusCode, tc.want)
		}
		resp, body, _, _ := rawExchange(t, addr, "GET "+up.URL+"/x HTTP/1.1\r\nHost: "+target+"\r\n\r\n")
		if resp.StatusCode != tc.want {
			t.Errorf("tunnel %q: proxy-form GET: %d %s, want %d", tc.tunnel, resp.StatusCode, body, tc.want)
		}
	}
	if n := reached.Load(); n != 1 {
		t.Fatalf("the internal service was reached %d times, want once (the explicitly listed case)", n)
	}
}

// TestAdminRefusesTheProxysOwnConnections: even when a relay to another
// listener of the same program is allowed, a request that arrives over a
// connection the proxy itself made is not a loopback client.
func TestAdminRefusesTheProxysOwnConnections(t *testing.T) {
	var hits atomic.Int32
	p, px := newTestProxy(t, "http://127.0.0.1:1", func(o *Options) {
		o.Admin, o.Tunnel = adminCounter(&hits), []string{"127.0.0.1"}
	})
	admin := httptest.NewServer(p.AdminHandler()) // not announced with AddListener
	defer admin.Close()
	pxURL, _ := url.Parse(px.URL)
	relayed := &http.Client{Transport: &http.Transport{Proxy: http.ProxyURL(pxURL)}}
	resp, body := do(t, relayed, "GET", admin.URL+"/_shaperproxy/originals/stats", nil, nil)
	if resp.StatusCode != http.StatusForbidden || hits.Load() != 0 {
		t.Fatalf("relayed admin request: %d %s (admin reached %d times)", resp.StatusCode, body, hits.Load())
	}
	resp, _ = do(t, rawClient(), "GET", admin.URL+"/_shaperproxy/originals/stats", nil, nil)
	if resp.StatusCode != http.StatusOK || hits.Load() != 1 {
		t.Fatalf("direct loopback admin request: %d", resp.StatusCode)
	}
}

// TestHostAndOriginChecks: base-URL requests are served only for the
// Host names the listener is for and never for a browser page of another
// origin; the route's api_key is added only to requests that pass. (Before:
// a cross-site text/plain POST and a DNS-rebinding Host were forwarded with
// the key.)
func TestHostAndOriginChecks(t *testing.T) {
	rec := &recorder{}
	up := httptest.NewServer(rec.wrap(func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "{}") }))
	defer up.Close()
	var adminHits atomic.Int32
	_, px := newTestProxy(t, up.URL, func(o *Options) {
		o.Routes[0].APIKey = "sk-route-key"
		o.AllowedHosts = []string{"proxy.lan"}
		o.AllowedOrigins = []string{"http://localhost:3000"}
		o.Admin = adminCounter(&adminHits)
	})
	port := px.URL[strings.LastIndex(px.URL, ":")+1:]
	tests := []struct {
		name string
		hdr  http.Header
		want int
	}{
		{"sdk, no origin", nil, 200},
		{"localhost", http.Header{"Host": {"localhost:" + port}}, 200},
		{"configured name", http.Header{"Host": {"Proxy.LAN:" + port}}, 200},
		{"allowed origin", http.Header{"Origin": {"http://localhost:3000"}}, 200},
		{"dns rebinding", http.Header{"Host": {"rebind.attacker.example:" + port}}, 403},
		{"cross-site text/plain", http.Header{"Origin": {"https://evil.example"}, "Content-Type": {"text/plain"}}, 403},
		{"null origin", http.Header{"Origin": {"null"}}, 403},
		{"no-cors from another site", http.Header{"Sec-Fetch-Site": {"cross-site"}}, 403},
	}
	for _, tt := range tests {
		before := len(rec.all())
		req, _ := http.NewRequest("POST", px.URL+"/v1/chat/completions", strings.NewReader(chatBody))
		for k, v := range tt.hdr {
			req.Header[k] = v
		}
		req.Host = req.Header.Get("Host")
		resp, err := rawClient().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != tt.want {
			t.Errorf("%s: status %d, want %d", tt.name, resp.StatusCode, tt.want)
		}
		forwarded := len(rec.all()) > before
		if forwarded != (tt.want == 200) {
			t.Errorf("%s: forwarded = %v", tt.name, forwarded)
		}
		if forwarded && rec.last(t).Header.Get("Authorization") != "Bearer sk-route-key" {
			t.Errorf("%s: the route's key was not added", tt.name)
		}
	}
	// A rebinding page reading the originals: refused before the admin handler.
	req, _ := http.NewRequest("GET", px.URL+"/_shaperproxy/originals/stats", nil)
	req.Host = "rebind.attacker.example:" + port
	resp, err := rawClient().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusForbidden || adminHits.Load() != 0 {
		t.Fatalf("rebinding Host on the admin endpoint: %d (admin reached %d times)", resp.StatusCode, adminHits.Load())
	}
}

// callRecorder keeps the calls observers see, to check what they hold.
type callRecorder struct {
	recordingObserver
	calls []*Call
}

func (o *callRecorder) Request(call *Call, up *Upstream) ResponseSink {
	o.mu.Lock()
	o.calls = append(o.calls, call)
	o.mu.Unlock()
	return o.recordingObserver.Request(call, up)
}

// TestClientKeys: with client keys, base-URL requests need X-Shaper-Key
// (or Authorization: Bearer on a route that adds its own key), proxy-form
// and CONNECT requests Proxy-Authorization; the key reaches neither the
// upstream nor an observer. (Before: there were no client keys.)
func TestClientKeys(t *testing.T) {
	const key = "ck-0123456789abcdef"
	rec := &recorder{}
	up := httptest.NewServer(rec.wrap(func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "{}") }))
	defer up.Close()
	upURL, _ := url.Parse(up.URL)
	obs := &callRecorder{}
	var adminHits atomic.Int32
	_, px := newTestProxy(t, up.URL, func(o *Options) {
		o.ClientKeys = []string{"another-key-000000", key}
		o.Routes = append(o.Routes, Route{Name: "keyed", Prefix: "/keyed", Upstream: upURL, APIKey: "sk-route-key"})
		o.Observers = []Observer{obs}
		o.Tunnel = []string{"127.0.0.1"}
		o.Admin = adminCounter(&adminHits)
	})
	post := func(path string, hdr http.Header) int {
		resp, _ := do(t, rawClient(), "POST", px.URL+path, []byte(chatBody), hdr)
		return resp.StatusCode
	}
	before := len(rec.all())
	if s := post("/v1/chat/completions", http.Header{"Authorization": {"Bearer sk-client-upstream-key"}}); s != 401 {
		t.Errorf("no client key: %d, want 401", s)
	}
	if s := post("/v1/chat/completions", http.Header{"X-Shaper-Key": {"wrong-key-000000000"}}); s != 401 {
		t.Errorf("wrong client key: %d, want 401", s)
	}
	if s := post("/keyed/v1/chat/completions", http.Header{"Authorization": {"Bearer wrong-key-000000000"}}); s != 401 {
		t.Errorf("wrong bearer key: %d, want 401", s)
	}
	if len(rec.all()) != before {
		t.Fatal("a request without a valid key was forwarded")
	}
	if s := post("/v1/chat/completions", http.Header{"X-Shaper-Key": {key}, "Authorization": {"Bearer sk-client-upstream-key"}}); s != 200 {
		t.Fatalf("X-Shaper-Key: %d", s)
	}
	if got := rec.last(t).Header; got.Get("X-Shaper-Key") != "" || got.Get("Authorization") != "Bearer sk-client-upstream-key" {
		t.Errorf("upstream got key header %q, authorization %q", got.Get("X-Shaper-Key"), got.Get("Authorization"))
	}
	if s := post("/keyed/v1/chat/completions", http.Header{"Authorization": {"Bearer " + key}}); s != 200 {
		t.Fatalf("bearer key on a keyed route: %d", s)
	}
	if got := rec.last(t).Header.Get("Authorization"); got != "Bearer sk-route-key" {
		t.Errorf("keyed route sent Authorization %q", got)
	}
	// HTTP_PROXY mode: Proxy-Authorization.
	addr := strings.TrimPrefix(px.URL, "http://")
	target := strings.TrimPrefix(up.URL, "http://")
	resp, _, _, _ := rawExchange(t, addr, "CONNECT "+target+" HTTP/1.1\r\nHost: "+target+"\r\n\r\n")
	if resp.StatusCode != http.StatusProxyAuthRequired || resp.Header.Get("Proxy-Authenticate") == "" {
		t.Errorf("CONNECT without a key: %d", resp.StatusCode)
	}
	basic := base64.StdEncoding.EncodeToString([]byte("agent:" + key))
	resp, _, _, _ = rawExchange(t, addr, "GET "+up.URL+"/x HTTP/1.1\r\nHost: "+target+"\r\nProxy-Authorization: Basic "+basic+"\r\n\r\n")
	if resp.StatusCode != 200 || rec.last(t).Header.Get("Proxy-Authorization") != "" {
		t.Errorf("proxy-form with a key: %d, upstream saw Proxy-Authorization %q", resp.StatusCode, rec.last(t).Header.Get("Proxy-Authorization"))
	}
	// /metrics needs a key; the admin endpoints answer direct loopback clients without one.
	if resp, _ := do(t, rawClient(), "GET", px.URL+"/metrics", nil, nil); resp.StatusCode != 401 {
		t.Errorf("/metrics without a key: %d", resp.StatusCode)
	}
	if resp, _ := do(t, rawClient(), "GET", px.URL+"/metrics", nil, http.Header{"X-Shaper-Key": {key}}); resp.StatusCode != 200 {
		t.Errorf("/metrics with a key: %d", resp.StatusCode)
	}
	if resp, _ := do(t, rawClient(), "GET", px.URL+"/_shaperproxy/originals/stats", nil, nil); resp.StatusCode != 200 {
		t.Errorf("admin from loopback: %d", resp.StatusCode)
	}
	obs.waitEnds(t, 2)
	obs.mu.Lock()
	defer obs.mu.Unlock()
	for _, c := range obs.calls {
		for k, vv := range c.Header {
			for _, v := range vv {
				if strings.Contains(v, key) {
					t.Errorf("an observer saw the client key in %s", k)
				}
			}
		}
	}
}

// TestMethodLabelBounded: made-up methods share one "other" series.
// (Before: every method a client sent made a new series.)
func TestMethodLabelBounded(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	defer up.Close()
	_, px := newTestProxy(t, up.URL, nil)
	for i := 0; i < 40; i++ {
		do(t, rawClient(), fmt.Sprintf("M%dX", i), px.URL+"/v1/models", nil, nil)
	}
	do(t, rawClient(), "GET", px.URL+"/v1/models", nil, nil)
	// A call's metrics are recorded after its answer is sent: the last
	// one may be a moment late.
	var methods map[string]bool
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		_, metrics := do(t, rawClient(), "GET", px.URL+"/metrics", nil, nil)
		methods = map[string]bool{}
		for _, m := range regexp.MustCompile(`shaperproxy_requests_total\{[^}]*method="([^"]*)"`).FindAllSubmatch(metrics, -1) {
			methods[string(m[1])] = true
		}
		if methods["GET"] || time.Now().After(deadline) {
			break
		}
	}
	if len(methods) != 2 || !methods["other"] || !methods["GET"] {
		t.Fatalf("method labels = %v, want GET and other", methods)
	}
}

// TestInitCAMakesDirPrivate: `ca init` into an existing directory open to
// others takes their access away before writing the key there. (Before:
// the directory kept its 0755.)
func TestInitCAMakesDirPrivate(t *testing.T) {
	dir := t.TempDir()
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if _, _, err := InitCA(dir); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(dir)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o700 {
		t.Fatalf("CA directory mode = %o, want 700", fi.Mode().Perm())
	}
}

// TestDirectLoopbackSharedPort: Linux gives one ephemeral port to
// connections to different addresses, so a local client's connection to
// the proxy may have the local port of one of the proxy's own connections
// to an upstream. Only a connection that is the proxy's own at both ends
// is taken for the proxy relaying to itself (a key of the port alone
// refused the client now and then: TestClientKeys' "admin from loopback").
func TestDirectLoopbackSharedPort(t *testing.T) {
	p, _ := newTestProxy(t, "http://127.0.0.1:1", nil)
	p.selfConns.Store(connKey("127.0.0.1:40001", "127.0.0.1:9000"), true) // the proxy's own, to an upstream on :9000
	req := func(local string) *http.Request {
		r := httptest.NewRequest("GET", "/_shaperproxy/originals/stats", nil)
		r.RemoteAddr = "127.0.0.1:40001"
		if local != "" {
			a, err := net.ResolveTCPAddr("tcp", local)
			if err != nil {
				t.Fatal(err)
			}
			r = r.WithContext(context.WithValue(r.Context(), http.LocalAddrContextKey, a))
		}
		return r
	}
	if !p.directLoopback(req("127.0.0.1:8080")) {
		t.Error("a client sharing the port of the proxy's connection to another address was refused")
	}
	if p.directLoopback(req("127.0.0.1:9000")) {
		t.Error("the proxy's own connection, arriving at the address it was made to, was taken for a client")
	}
	if p.directLoopback(req("")) {
		t.Error("with no listener address, a port the proxy uses was taken for a client")
	}
}

// TestConnectTargetIsAuthorityForm: a CONNECT whose target is not
// host:port — a path with an allowed host in its Host header, a host
// without a port — is refused: goproxy would dial it as another address
// than the one checked (an empty host or a missing port as ":80", a local
// port nobody allowed). Before, both were relayed.
func TestConnectTargetIsAuthorityForm(t *testing.T) {
	for _, tc := range []struct {
		tunnel, intercept []string
		request           string
	}{
		{nil, []string{"api.deepseek.com"}, "CONNECT /x HTTP/1.1\r\nHost: api.deepseek.com:443\r\n\r\n"},
		{[]string{"allowed.example:443"}, nil, "CONNECT /x HTTP/1.1\r\nHost: allowed.example:443\r\n\r\n"},
		{[]string{"localhost:443"}, nil, "CONNECT localhost HTTP/1.1\r\nHost: localhost\r\n\r\n"},
		{[]string{"127.0.0.1"}, nil, "CONNECT 127.0.0.1:0 HTTP/1.1\r\nHost: 127.0.0.1:0\r\n\r\n"},
	} {
		_, px := newTestProxy(t, "http://127.0.0.1:1", func(o *Options) {
			o.Tunnel, o.Intercept = tc.tunnel, tc.intercept
			if len(tc.intercept) > 0 {
				o.CA = testCA(t)
			}
		})
		addr := strings.TrimPrefix(px.URL, "http://")
		resp, body, _, _ := rawExchange(t, addr, tc.request)
		if resp.StatusCode != http.StatusForbidden {
			t.Errorf("%q: %d %s, want 403", strings.SplitN(tc.request, "\r\n", 2)[0], resp.StatusCode, body)
		}
	}
}

// TestCertStoreBounded: a client spelling one intercepted host in many
// ways (case, port) makes one certificate, and the cache stays bounded
// whatever it is asked for. Before, each spelling was a certificate kept
// for good (this test's first loop failed at the second spelling).
func TestCertStoreBounded(t *testing.T) {
	var s certStore
	made := 0
	gen := func() (*tls.Certificate, error) { made++; return &tls.Certificate{}, nil }
	for i, h := range []string{"api.deepseek.com", "API.DeepSeek.com", "Api.deepseek.COM:443", "api.deepseek.com:8443"} {
		if _, err := s.Fetch(h, gen); err != nil {
			t.Fatal(err)
		}
		if made != 1 {
			t.Fatalf("spelling %d (%s) made a certificate of its own", i, h)
		}
	}
	for i := range 3 * maxCerts {
		_, _ = s.Fetch(fmt.Sprintf("h%d.example", i), gen)
	}
	if n := len(s.m); n > maxCerts {
		t.Fatalf("the store holds %d certificates, more than %d", n, maxCerts)
	}
}

// TestOwnListenerZone: an IPv6 address with a zone is the address: a
// loopback one with a zone is the proxy's own listener.
func TestOwnListenerZone(t *testing.T) {
	p, px := newTestProxy(t, "http://127.0.0.1:1", nil)
	_, port, _ := net.SplitHostPort(strings.TrimPrefix(px.URL, "http://"))
	n, _ := strconv.Atoi(port)
	p.ownPorts.add(n)
	if !p.isOwnListener("::1%lo", port) {
		t.Fatal("::1%lo on the proxy's port was not taken for its own listener")
	}
}

// TestInitCAAfterACrashAndConcurrently: a key left without its
// certificate (an init that stopped between the two files) no longer
// makes every later init fail with "file exists", and inits racing on one
// directory all end with the one CA instead of some failing.
func TestInitCAAfterACrashAndConcurrently(t *testing.T) {
	dir := t.TempDir()
	orphan := filepath.Join(dir, CAKeyFile)
	if err := os.WriteFile(orphan, []byte("half"), 0o600); err != nil {
		t.Fatal(err)
	}
	old := time.Now().Add(-time.Minute)
	if err := os.Chtimes(orphan, old, old); err != nil {
		t.Fatal(err)
	}
	if _, created, err := InitCA(dir); err != nil || !created {
		t.Fatalf("init after a crash: created %v, %v", created, err)
	}
	if _, err := LoadCA(dir); err != nil {
		t.Fatal(err)
	}

	dir = t.TempDir()
	errs := make(chan error, 8)
	for range 8 {
		go func() { _, _, err := InitCA(dir); errs <- err }()
	}
	for range 8 {
		if err := <-errs; err != nil {
			t.Errorf("a concurrent init failed: %v", err)
		}
	}
	if _, err := LoadCA(dir); err != nil {
		t.Fatalf("after concurrent inits: %v", err)
	}
}
