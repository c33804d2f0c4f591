package proxy

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/shaperproxy/shaperproxy/sse"
)

// received is one request as the test upstream saw it.
type received struct {
	Method, Path, RawQuery, Host string
	Header                       http.Header
	Body                         []byte
}

// recorder records the requests an upstream handler receives.
type recorder struct {
	mu   sync.Mutex
	reqs []received
}

func (rec *recorder) wrap(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		rec.mu.Lock()
		rec.reqs = append(rec.reqs, received{r.Method, r.URL.Path, r.URL.RawQuery, r.Host, r.Header.Clone(), body})
		rec.mu.Unlock()
		r.Body = io.NopCloser(bytes.NewReader(body))
		h(w, r)
	}
}

func (rec *recorder) all() []received {
	rec.mu.Lock()
	defer rec.mu.Unlock()
	return append([]received(nil), rec.reqs...)
}

func (rec *recorder) last(t *testing.T) received {
	t.Helper()
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if len(rec.reqs) == 0 {
		t.Fatal("upstream received no request")
	}
	return rec.reqs[len(rec.reqs)-1]
}

// writeEvents writes an SSE body event by event, flushing after each.
func writeEvents(w http.ResponseWriter, body []byte) {
	rc := http.NewResponseController(w)
	rd := sse.NewReaderOptions(bytes.NewReader(body), sse.Options{MaxEvent: len(body) + 1})
	for {
		ev, err := rd.Next()
		if len(ev.Raw) > 0 {
			_, _ = w.Write(ev.Raw)
			_ = rc.Flush()
		}
		if err != nil {
			return
		}
	}
}

// newTestProxy starts the proxy in front of upstream on loopback.
func newTestProxy(t testing.TB, upstream string, mod func(*Options)) (*Proxy, *httptest.Server) {
	t.Helper()
	u, err := url.Parse(upstream)
	if err != nil {
		t.Fatal(err)
	}
	opts := Options{Routes: []Route{{Name: "default", Upstream: u}}, StreamIdleTimeout: 5 * time.Second}
	if mod != nil {
		mod(&opts)
	}
	p, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	return p, serveProxy(t, p)
}

// serveProxy serves h as shaperproxy serve does (proxy.Server, the rest
// handed to net/http's server) on a loopback listener, in the shape of an
// httptest.Server (URL, Listener and Config are set, mods applied to
// Config: the server Server hands to).
func serveProxy(t testing.TB, h http.Handler, mods ...func(*http.Server)) *httptest.Server {
	t.Helper()
	srv := httptest.NewUnstartedServer(h)
	for _, m := range mods {
		m(srv.Config)
	}
	fs := NewServer(srv.Config)
	go func() { _ = fs.Serve(srv.Listener) }()
	srv.URL = "http://" + srv.Listener.Addr().String()
	t.Cleanup(func() { _ = fs.Close() })
	if p, ok := h.(*Proxy); ok {
		t.Cleanup(p.CloseIdleConnections)
	}
	return srv
}

// do sends a request and returns the response with its whole body.
func do(t *testing.T, c *http.Client, method, url string, body []byte, hdr http.Header) (*http.Response, []byte) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, url, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if body == nil {
		req.Body, req.ContentLength = http.NoBody, 0
	}
	for k, vv := range hdr {
		req.Header[k] = vv
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	got, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("reading body: %v", err)
	}
	return resp, got
}

// rawClient never decompresses and never uses a proxy from the
// environment.
func rawClient() *http.Client {
	return &http.Client{Transport: &http.Transport{DisableCompression: true, Proxy: nil}}
}

// caPool returns a pool holding only the CA.
func caPool(t *testing.T, ca *tls.Certificate) *x509.CertPool {
	t.Helper()
	pool := x509.NewCertPool()
	pool.AddCert(ca.Leaf)
	return pool
}

// recordingObserver keeps what the sinks saw, for assertions.
type recordingObserver struct {
	mu     sync.Mutex
	ups    []*Upstream
	events [][]byte
	body   []byte
	ends   []End
	infos  []*ResponseInfo
}

func (o *recordingObserver) Request(call *Call, up *Upstream) ResponseSink {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.ups = append(o.ups, up)
	return o
}

func (o *recordingObserver) Response(info *ResponseInfo) {
	o.mu.Lock()
	o.infos = append(o.infos, info)
	o.mu.Unlock()
}

func (o *recordingObserver) Event(ev *sse.Event, seq int, at time.Duration) {
	o.mu.Lock()
	o.events = append(o.events, append([]byte(nil), ev.Raw...))
	o.mu.Unlock()
}

func (o *recordingObserver) Body(p []byte) {
	o.mu.Lock()
	o.body = append(o.body, p...)
	o.mu.Unlock()
}

func (o *recordingObserver) End(end End) {
	o.mu.Lock()
	o.ends = append(o.ends, end)
	o.mu.Unlock()
}

func (o *recordingObserver) waitEnd(t *testing.T) End {
	t.Helper()
	ends := o.waitEnds(t, 1)
	return ends[len(ends)-1]
}

// waitEnds waits until the observer has seen n ends and returns them.
func (o *recordingObserver) waitEnds(t *testing.T, n int) []End {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		o.mu.Lock()
		if len(o.ends) >= n {
			ends := append([]End(nil), o.ends...)
			o.mu.Unlock()
			return ends
		}
		o.mu.Unlock()
		time.Sleep(5 * time.Millisecond)
	}
	t.Fatalf("observer saw fewer than %d ends", n)
	return nil
}

// testCA makes a local CA in a temporary directory.
func testCA(t *testing.T) *tls.Certificate {
	t.Helper()
	dir := t.TempDir()
	if _, _, err := InitCA(dir); err != nil {
		t.Fatal(err)
	}
	ca, err := LoadCA(dir)
	if err != nil {
		t.Fatal(err)
	}
	return ca
}

// mitmRig puts a TLS upstream serving h behind the proxy in HTTPS_PROXY
// mode (mod adjusts the options) and returns a client that trusts only ca,
// and the upstream's URL.
func mitmRig(t *testing.T, h http.Handler, ca *tls.Certificate, mod func(*Options)) (*http.Client, string) {
	t.Helper()
	up := httptest.NewTLSServer(h)
	t.Cleanup(up.Close)
	upURL, _ := url.Parse(up.URL)
	_, px := newTestProxy(t, "http://unused.invalid", func(o *Options) {
		o.Intercept, o.CA = []string{upURL.Hostname()}, ca
		tr := up.Client().Transport.(*http.Transport).Clone()
		tr.DisableCompression = true
		o.Transport = tr
		if mod != nil {
			mod(o)
		}
	})
	pxURL, _ := url.Parse(px.URL)
	return &http.Client{Transport: &http.Transport{
		Proxy: http.ProxyURL(pxURL), TLSClientConfig: &tls.Config{RootCAs: caPool(t, ca)}, DisableCompression: true,
	}}, up.URL
}

// openStream posts a streaming chat request with c, reads its first event
// and returns the response and the func that makes the client leave.
func openStream(t *testing.T, c *http.Client, url string) (*http.Response, context.CancelFunc) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, "POST", url, strings.NewReader(chatBody))
	resp, err := c.Do(req)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	if _, err := sse.NewReader(resp.Body).Next(); err != nil {
		cancel()
		t.Fatal(err)
	}
	return resp, cancel
}
