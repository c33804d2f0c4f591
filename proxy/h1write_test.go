package proxy

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptrace"
	"net/url"
	"strings"
	"testing"
)

// headCase builds a request afresh for each write (a write spends the
// body); plain says whether writeRequest should write its head itself.
type headCase struct {
	name  string
	plain bool
	make  func() *http.Request
}

func postTo(rawURL string, body string, h http.Header) *http.Request {
	u, err := url.Parse(rawURL)
	if err != nil {
		panic(err)
	}
	r := &http.Request{Method: http.MethodPost, URL: u, Host: u.Host, Header: h, Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1}
	if body != "" {
		b := []byte(body)
		r.Body, r.ContentLength = io.NopCloser(bytes.NewReader(b)), int64(len(b))
	}
	return r
}

func headCases() []headCase {
	chat := `{"model":"m","messages":[{"role":"user","content":"hi"}]}`
	full := http.Header{
		"Content-Type":    {"application/json"},
		"Authorization":   {"Bearer sk-test"},
		"User-Agent":      {"OpenAI/Python 1.40.0"},
		"Accept":          {"application/json", "text/event-stream"},
		"X-Stainless-Os":  {"Linux"},
		"Idempotency-Key": {"abc"},
	}
	with := func(h http.Header, k string, v ...string) http.Header {
		h = h.Clone()
		h[k] = v
		return h
	}
	long := http.Header{}
	for i := range 40 { // past the keys sorted on the stack
		long[http.CanonicalHeaderKey("x-k"+strings.Repeat("a", i%7)+string(rune('a'+i%26))+string(rune('a'+i/26)))] = []string{"v"}
	}
	cases := []headCase{
		{"chat", true, func() *http.Request { return postTo("http://127.0.0.1:8080/v1/chat/completions", chat, full.Clone()) }},
		{"query and escaped path", true, func() *http.Request {
			return postTo("http://up.example:80/a%2Fb/v1/chat?x=1&y=%20", chat, full.Clone())
		}},
		{"no user agent", true, func() *http.Request {
			h := full.Clone()
			delete(h, "User-Agent")
			return postTo("http://127.0.0.1:1/v1", chat, h)
		}},
		{"empty user agent", true, func() *http.Request { return postTo("http://127.0.0.1:1/v1", chat, with(full, "User-Agent", "")) }},
		{"user agent list", true, func() *http.Request {
			return postTo("http://127.0.0.1:1/v1", chat, with(full, "User-Agent", " first ", "second"))
		}},
		{"user agent none given", true, func() *http.Request { return postTo("http://127.0.0.1:1/v1", chat, with(full, "User-Agent")) }},
		{"values with line breaks and blanks", true, func() *http.Request {
			return postTo("http://127.0.0.1:1/v1", chat, with(full, "X-Odd", " a\r\nb ", "\tc\n", ""))
		}},
		{"excluded and odd keys", true, func() *http.Request {
			h := with(full, "Content-Length", "999")
			h["Transfer-Encoding"] = []string{"chunked"}
			h["Trailer"] = []string{"X"}
			h["Host"] = []string{"other"}
			h["content-length"] = []string{"5"} // not canonical: not excluded
			h["Bad Key"] = []string{"dropped"}
			h["X-Empty"] = nil
			return postTo("http://127.0.0.1:1/v1", chat, h)
		}},
		{"many keys", true, func() *http.Request { return postTo("http://127.0.0.1:1/v1", chat, long.Clone()) }},
		{"post without body", true, func() *http.Request { return postTo("http://127.0.0.1:1/v1", "", full.Clone()) }},
		{"post with NoBody", true, func() *http.Request {
			r := postTo("http://127.0.0.1:1/v1", "", full.Clone())
			r.Body = http.NoBody
			return r
		}},
		{"get without body", true, func() *http.Request {
			r := postTo("http://127.0.0.1:1/v1/models", "", full.Clone())
			r.Method = http.MethodGet
			return r
		}},
		{"delete", true, func() *http.Request {
			r := postTo("http://127.0.0.1:1/v1/files/x", "", nil)
			r.Method = http.MethodDelete
			return r
		}},
		{"host from the URL", true, func() *http.Request {
			r := postTo("http://[::1]:9/v1", chat, full.Clone())
			r.Host = ""
			return r
		}},
		// The rest are req.Write's own.
		{"close", false, func() *http.Request {
			r := postTo("http://127.0.0.1:1/v1", chat, full.Clone())
			r.Close = true
			return r
		}},
		{"unknown length", false, func() *http.Request {
			r := postTo("http://127.0.0.1:1/v1", chat, full.Clone())
			r.ContentLength = -1
			return r
		}},
		{"length without body", false, func() *http.Request {
			r := postTo("http://127.0.0.1:1/v1", "", full.Clone())
			r.ContentLength = 3
			return r
		}},
		{"trailer", false, func() *http.Request {
			r := postTo("http://127.0.0.1:1/v1", chat, full.Clone())
			r.Trailer = http.Header{"X-T": nil}
			return r
		}},
		{"unicode host", false, func() *http.Request {
			r := postTo("http://127.0.0.1:1/v1", chat, full.Clone())
			r.Host = "bücher.example"
			return r
		}},
		{"zone", false, func() *http.Request {
			r := postTo("http://127.0.0.1:1/v1", chat, full.Clone())
			r.Host = "[fe80::1%25en0]:80"
			return r
		}},
		{"control byte in the URI", false, func() *http.Request {
			r := postTo("http://127.0.0.1:1/v1", chat, full.Clone())
			r.URL.RawQuery = "a=\x01"
			return r
		}},
		{"no method", false, func() *http.Request {
			r := postTo("http://127.0.0.1:1/v1", "", full.Clone())
			r.Method = ""
			return r
		}},
		{"body shorter than its length", true, func() *http.Request {
			r := postTo("http://127.0.0.1:1/v1", chat, full.Clone())
			r.ContentLength += 5
			return r
		}},
		{"body longer than its length", true, func() *http.Request {
			r := postTo("http://127.0.0.1:1/v1", chat, full.Clone())
			r.ContentLength -= 5
			return r
		}},
	}
	return cases
}

// written is what write puts in a buffer, and its error.
func written(t *testing.T, req *http.Request, write func(*bufio.Writer, *http.Request) error) (string, error) {
	t.Helper()
	var buf bytes.Buffer
	bw := bufio.NewWriter(&buf)
	err := write(bw, req)
	if ferr := bw.Flush(); err == nil {
		err = ferr
	}
	return buf.String(), err
}

// TestWriteRequestAsStdlib: for every request, writeRequest writes the
// bytes req.Write writes and fails as it fails; the requests the proxy
// sends take the hand-written head.
func TestWriteRequestAsStdlib(t *testing.T) {
	for _, c := range headCases() {
		t.Run(c.name, func(t *testing.T) {
			if _, _, ok := plainHead(c.make()); ok != c.plain {
				t.Fatalf("plainHead = %v, want %v", ok, c.plain)
			}
			want, werr := written(t, c.make(), func(bw *bufio.Writer, r *http.Request) error { return r.Write(bw) })
			got, gerr := written(t, c.make(), writeRequest)
			if (werr == nil) != (gerr == nil) || werr != nil && werr.Error() != gerr.Error() {
				t.Fatalf("error %v, req.Write's %v", gerr, werr)
			}
			if got != want {
				t.Fatalf("wrote\n%q\nreq.Write wrote\n%q", got, want)
			}
		})
	}
}

// closeCounter counts the closes of a body.
type closeCounter struct {
	io.Reader
	closes int
}

func (c *closeCounter) Close() error { c.closes++; return nil }

// TestWriteRequestClosesBody: the body is closed once, written or not
// (the proxy's held bodies go back on their close), and a write that
// fails gives the connection's error.
func TestWriteRequestClosesBody(t *testing.T) {
	for _, fail := range []bool{false, true} {
		req := postTo("http://127.0.0.1:1/v1", "", http.Header{})
		body := &closeCounter{Reader: strings.NewReader("abc")}
		req.Body, req.ContentLength = body, 3
		var w io.Writer = io.Discard
		if fail {
			w = failWriter{}
		}
		bw := bufio.NewWriterSize(w, 16) // the head does not fit: the write fails before the body
		err := writeRequest(bw, req)
		if err == nil {
			err = bw.Flush()
		}
		if (err != nil) != fail || body.closes != 1 {
			t.Fatalf("fail=%v: err %v, %d closes", fail, err, body.closes)
		}
		if fail && !errors.Is(err, errOnFire) {
			t.Fatalf("the connection's error came wrapped out of sight: %v (%T)", err, err)
		}
	}
	// A write that fails while the body is copied (the head went into the
	// buffer): the connection's error as it is, where req.Write hides it
	// in a type of its own.
	big := bytes.Repeat([]byte("x"), 64<<10)
	mk := func() *http.Request { return postTo("http://127.0.0.1:1/v1", string(big), http.Header{}) }
	err := writeRequest(bufio.NewWriter(failWriter{}), mk())
	if !errors.Is(err, errOnFire) {
		t.Fatalf("a failed body copy: %v (%T), want the connection's error", err, err)
	}
	if werr := mk().Write(bufio.NewWriter(failWriter{})); werr == nil || werr.Error() != err.Error() || errors.Is(werr, errOnFire) {
		t.Fatalf("req.Write's error %v (%T): the same text, wrapped, was expected", werr, werr)
	}
}

type failWriter struct{}

var errOnFire = errors.New("disk on fire")

func (failWriter) Write([]byte) (int, error) { return 0, errOnFire }

// TestWriteRequestTraced: a request with a client trace goes through
// req.Write, which calls it.
func TestWriteRequestTraced(t *testing.T) {
	var fields []string
	trace := &httptrace.ClientTrace{WroteHeaderField: func(k string, _ []string) { fields = append(fields, k) }}
	req := postTo("http://127.0.0.1:1/v1", `{}`, http.Header{"Content-Type": {"application/json"}})
	req = req.WithContext(httptrace.WithClientTrace(context.Background(), trace))
	if _, _, ok := plainHead(req); ok {
		t.Fatal("a traced request took the hand-written head")
	}
	if _, err := written(t, req, writeRequest); err != nil || len(fields) == 0 {
		t.Fatalf("err %v, traced fields %v", err, fields)
	}
}

// FuzzWriteRequestHead holds writeRequest to req.Write's bytes for any
// header key and value and any path.
func FuzzWriteRequestHead(f *testing.F) {
	f.Add("X-Key", "value", "/v1/chat/completions", "a=b")
	f.Add("x-lower", " \r\n spaced\t", "/a%2Fb", "")
	f.Add("Bad Key", "v", "/", "q=\x7f")
	f.Add("User-Agent", "", "/v1", "")
	f.Fuzz(func(t *testing.T, k, v, path, query string) {
		mk := func() *http.Request {
			req := postTo("http://127.0.0.1:1/", `{"a":1}`, http.Header{k: {v, v + "2"}, "Accept": {"*/*"}})
			req.URL.Path, req.URL.RawQuery = path, query
			return req
		}
		want, werr := written(t, mk(), func(bw *bufio.Writer, r *http.Request) error { return r.Write(bw) })
		got, gerr := written(t, mk(), writeRequest)
		if (werr == nil) != (gerr == nil) || got != want {
			t.Fatalf("wrote %q (%v), req.Write %q (%v)", got, gerr, want, werr)
		}
	})
}
