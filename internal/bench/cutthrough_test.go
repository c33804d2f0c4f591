package bench

import (
	"bytes"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"reflect"
	"testing"
	"time"
)

// countingSrc hands out a body a few bytes at a time and counts what it
// handed out.
type countingSrc struct {
	r    *bytes.Reader
	read int
}

func (s *countingSrc) Read(p []byte) (int, error) {
	n, err := s.r.Read(p[:min(len(p), 1000)])
	s.read += n
	return n, err
}

func (s *countingSrc) Close() error { return nil }

// TestTailHeld: the body comes out whole and in order; no byte of its
// last cutTail comes out before the source was read to its end and the
// hold passed; a source that ends short is an error.
func TestTailHeld(t *testing.T) {
	body := bytes.Repeat([]byte("0123456789abcdef"), 20<<10) // 320 KiB
	src := &countingSrc{r: bytes.NewReader(body)}
	const hold = 5 * time.Millisecond
	th := &tailHeld{src: src, left: int64(len(body)), hold: hold}
	var out []byte
	p := make([]byte, 7000)
	for {
		start := time.Now()
		n, err := th.Read(p)
		if n > 0 && len(out)+n > len(body)-cutTail && len(out) <= len(body)-cutTail {
			if src.read != len(body) {
				t.Fatalf("a byte of the tail came out with %d of %d bytes read from the source", src.read, len(body))
			}
			if d := time.Since(start); d < hold {
				t.Fatalf("the tail came out %v after it was asked for, before the hold of %v", d, hold)
			}
		}
		out = append(out, p[:n]...)
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	if !bytes.Equal(out, body) {
		t.Fatalf("%d bytes out, not the body's %d", len(out), len(body))
	}
	short := &tailHeld{src: &countingSrc{r: bytes.NewReader(body[:1000])}, left: int64(len(body))}
	if _, err := io.ReadAll(short); !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Fatalf("a source short of its length: %v, want io.ErrUnexpectedEOF", err)
	}
}

// TestCutThroughModes: each form of the experiment passes the body on
// unchanged, declaring its length except chunked; the two cut-through
// forms send the body's start upstream while the client still holds back
// its end, and the whole form does not.
func TestCutThroughModes(t *testing.T) {
	body := bytes.Repeat([]byte("x"), 400<<10)
	first := len(body) - 100<<10 // more than cutTail left after it
	type got struct {
		te     []string
		length int64
		body   []byte
	}
	results := make(chan got, 1)
	reached := make(chan struct{}, 1)
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var b bytes.Buffer
		buf := make([]byte, 32<<10)
		signalled := false
		for {
			n, err := r.Body.Read(buf)
			b.Write(buf[:n])
			if !signalled && b.Len() >= first {
				signalled = true
				reached <- struct{}{}
			}
			if err != nil {
				break
			}
		}
		results <- got{r.TransferEncoding, r.ContentLength, b.Bytes()}
		w.Write([]byte("{}"))
	}))
	defer up.Close()
	if _, err := newCutThrough([]string{"sideways", "1ms", up.URL}); err == nil {
		t.Fatal("an unknown mode was taken")
	}
	for _, mode := range cutModes {
		h, err := newCutThrough([]string{mode, "1ms", up.URL})
		if err != nil {
			t.Fatal(err)
		}
		px := httptest.NewServer(h)
		pr, pw := io.Pipe()
		req, _ := http.NewRequest(http.MethodPost, px.URL+chatPath, pr)
		req.ContentLength = int64(len(body))
		done := make(chan error, 1)
		go func() {
			resp, err := http.DefaultClient.Do(req)
			if err == nil {
				resp.Body.Close()
			}
			done <- err
		}()
		if _, err := pw.Write(body[:first]); err != nil {
			t.Fatal(err)
		}
		early := false
		wait := 10 * time.Second // the start must reach the upstream before the client sends the rest
		if mode == cutWhole {
			wait = 200 * time.Millisecond // and must not, read whole (a slow machine can only miss a wrong early send)
		}
		select {
		case <-reached:
			early = true
		case <-time.After(wait):
		}
		if early != (mode != cutWhole) {
			pw.CloseWithError(errors.New("test failed")) // the upstream's handler ends, and the servers close
			t.Fatalf("%s: the body's first %d bytes reached the upstream before its end was sent: %v, want %v", mode, first, early, mode != cutWhole)
		}
		if _, err := pw.Write(body[first:]); err != nil {
			t.Fatal(err)
		}
		pw.Close()
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		g := <-results
		if !early {
			<-reached
		}
		px.Close()
		if !bytes.Equal(g.body, body) {
			t.Fatalf("%s: the upstream got %d bytes, not the body's %d", mode, len(g.body), len(body))
		}
		chunked := len(g.te) == 1 && g.te[0] == "chunked"
		if chunked != (mode == cutChunked) || !chunked && g.length != int64(len(body)) {
			t.Fatalf("%s: the upstream got Transfer-Encoding %q and length %d", mode, g.te, g.length)
		}
	}
}

// TestStreamedCoreConfig: the experiment's streamed core is the
// transparent core with every body of the section over its
// max_body_bytes (the proxy streams those through unread:
// proxy.TestOversizeBodyStreamsThrough), and nothing else changed.
func TestStreamedCoreConfig(t *testing.T) {
	core := variantConfig(bare, "http://127.0.0.1:1", "http://127.0.0.1:1", t.TempDir(), "")
	streamed := variantConfig(streamedCore, "http://127.0.0.1:1", "http://127.0.0.1:1", t.TempDir(), "")
	for _, b := range append(smallBodies(16), seedBody()) {
		if int64(len(b)) <= streamed.MaxBodyBytes {
			t.Fatalf("a body of %d bytes is not over the streamed core's max_body_bytes %d", len(b), streamed.MaxBodyBytes)
		}
	}
	if err := streamed.Validate(); err != nil {
		t.Fatal(err)
	}
	streamed.MaxBodyBytes, streamed.DataDir = core.MaxBodyBytes, core.DataDir
	if !reflect.DeepEqual(core, streamed) {
		t.Fatalf("the streamed core differs from the core beyond max_body_bytes:\n%+v\n%+v", core, streamed)
	}
}
