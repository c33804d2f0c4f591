package proxy

import (
	"context"
	"crypto/tls"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/shaperproxy/shaperproxy/sse"
	"github.com/tidwall/gjson"
)

// mitmRig is a TLS upstream behind the proxy in HTTPS_PROXY mode, and a
// client that trusts only the proxy's CA.
func mitmRig(t *testing.T, h http.Handler) (*http.Client, string) {
	t.Helper()
	up := httptest.NewTLSServer(h)
	t.Cleanup(up.Close)
	dir := t.TempDir()
	if _, _, err := InitCA(dir); err != nil {
		t.Fatal(err)
	}
	ca, err := LoadCA(dir)
	if err != nil {
		t.Fatal(err)
	}
	upURL, _ := url.Parse(up.URL)
	_, px := newTestProxy(t, "http://unused.invalid", func(o *Options) {
		o.Intercept, o.CA = []string{upURL.Hostname()}, ca
		tr := up.Client().Transport.(*http.Transport).Clone()
		tr.DisableCompression = true
		o.Transport = tr
	})
	pxURL, _ := url.Parse(px.URL)
	return &http.Client{Transport: &http.Transport{
		Proxy: http.ProxyURL(pxURL), TLSClientConfig: &tls.Config{RootCAs: caPool(t, ca)}, DisableCompression: true,
	}}, up.URL
}

// TestMITMFlushAndCancel: in HTTPS_PROXY mode too, each event reaches the
// client before the upstream writes the next, and a client that leaves
// cancels the upstream request.
func TestMITMFlushAndCancel(t *testing.T) {
	got := make(chan int, 16)
	gone := make(chan struct{}, 1)
	c, upURL := mitmRig(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		rc := http.NewResponseController(w)
		for k := 0; ; k++ {
			fmt.Fprintf(w, "data: {\"k\":%d}\n\n", k)
			_ = rc.Flush()
			select {
			case <-got:
			case <-r.Context().Done():
				gone <- struct{}{}
				return
			case <-time.After(3 * time.Second):
				t.Errorf("event %d not received before the next was due", k)
				return
			}
		}
	}))
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, "POST", upURL+"/v1/chat/completions", strings.NewReader(chatBody))
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	rd := sse.NewReader(resp.Body)
	for i := 0; i < 5; i++ {
		ev, err := rd.Next()
		if err != nil || gjson.GetBytes(ev.Data, "k").Int() != int64(i) {
			t.Fatalf("event %d: %q, %v", i, ev.Data, err)
		}
		got <- i
	}
	cancel()
	resp.Body.Close()
	select {
	case <-gone:
	case <-time.After(3 * time.Second):
		t.Fatal("the upstream never saw the client go away")
	}
}
