package proxy

import (
	"bytes"
	"crypto/tls"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// h2Post sends a POST over a raw HTTP/2 connection to srv: a header
// declaring declared bytes, then each of parts as a DATA frame, pause
// apart, the last ending the stream. It returns the answer's :status, or
// 0 when the stream was reset instead.
func h2Post(t *testing.T, srv *httptest.Server, declared int, pause time.Duration, parts ...[]byte) int {
	t.Helper()
	conn, err := tls.Dial("tcp", srv.Listener.Addr().String(), &tls.Config{InsecureSkipVerify: true, NextProtos: []string{"h2"}})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := conn.Write([]byte(http2.ClientPreface)); err != nil {
		t.Fatal(err)
	}
	fr := http2.NewFramer(conn, conn)
	if err := fr.WriteSettings(); err != nil {
		t.Fatal(err)
	}
	var hb bytes.Buffer
	enc := hpack.NewEncoder(&hb)
	for _, f := range [][2]string{
		{":method", "POST"}, {":scheme", "https"}, {":authority", srv.Listener.Addr().String()},
		{":path", "/v1/chat/completions"}, {"content-type", "application/json"},
		{"content-length", strconv.Itoa(declared)},
	} {
		_ = enc.WriteField(hpack.HeaderField{Name: f[0], Value: f[1]})
	}
	if err := fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: hb.Bytes(), EndHeaders: true}); err != nil {
		t.Fatal(err)
	}
	for i, p := range parts {
		if i > 0 {
			time.Sleep(pause)
		}
		if err := fr.WriteData(1, i == len(parts)-1, p); err != nil {
			t.Fatal(err)
		}
	}
	dec := hpack.NewDecoder(4096, nil)
	for {
		f, err := fr.ReadFrame()
		if err != nil {
			t.Fatalf("no answer: %v", err)
		}
		switch f := f.(type) {
		case *http2.SettingsFrame:
			if !f.IsAck() {
				_ = fr.WriteSettingsAck()
			}
		case *http2.HeadersFrame:
			if f.StreamID != 1 {
				continue
			}
			fields, err := dec.DecodeFull(f.HeaderBlockFragment())
			if err != nil {
				t.Fatal(err)
			}
			for _, hf := range fields {
				if hf.Name == ":status" {
					n, _ := strconv.Atoi(hf.Value)
					return n
				}
			}
		case *http2.RSTStreamFrame:
			if f.StreamID == 1 {
				return 0
			}
		case *http2.GoAwayFrame:
			return 0
		}
	}
}

// TestH2BodyLongerThanDeclared: an HTTP/2 client that sends more than its
// Content-Length (the declared bytes first, the rest a moment later) is
// refused, and nothing goes upstream: the proxy reads to the stream's end
// before forwarding, where it used to forward the declared bytes alone.
// A body of its declared length, its end a moment after its bytes, goes
// upstream whole.
func TestH2BodyLongerThanDeclared(t *testing.T) {
	var hits atomic.Int32
	var got atomic.Value
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var b bytes.Buffer
		_, _ = b.ReadFrom(r.Body)
		got.Store(b.String())
		hits.Add(1)
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"choices":[]}`))
	}))
	t.Cleanup(up.Close)
	p, _ := newTestProxy(t, up.URL, nil)
	srv := httptest.NewUnstartedServer(p)
	srv.EnableHTTP2 = true
	srv.StartTLS()
	t.Cleanup(srv.Close)

	body := []byte(`{"model":"m","messages":[]}`)
	if st := h2Post(t, srv, len(body), 200*time.Millisecond, body, nil); st != http.StatusOK || hits.Load() != 1 || got.Load() != string(body) {
		t.Fatalf("declared length, end a moment later: status %d, %d upstream calls, upstream got %q", st, hits.Load(), got.Load())
	}
	st := h2Post(t, srv, len(body), 200*time.Millisecond, body, []byte(`{"more":1}`))
	time.Sleep(100 * time.Millisecond) // a call forwarded would have reached the upstream by now
	if n := hits.Load(); n != 1 {
		t.Fatalf("a body longer than declared went upstream (%d calls; upstream got %q)", n-1, got.Load())
	}
	if st == http.StatusOK {
		t.Fatalf("a body longer than declared was answered %d", st)
	}
}
