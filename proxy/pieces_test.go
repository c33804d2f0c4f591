package proxy

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/shaperproxy/shaperproxy/conv"
	"github.com/shaperproxy/shaperproxy/internal/testenv"
)

// TestPiecedBodies: a large body a transform edited (conv.Request.Apply,
// or ApplyLater with its view left to the proxy: SetViewLater) goes
// upstream as its pieces, the client's body and the replacements (one
// writev), and the upstream gets exactly the edited body: random edits of
// the messages' contents, longer, shorter, emptied and at the ends of
// their strings, over a growing conversation, some bodies under the size
// that has pieces. A view left to make is the observers' View: that of
// the body sent.
func TestPiecedBodies(t *testing.T) {
	for _, later := range []bool{false, true} {
		t.Run(map[bool]string{false: "view", true: "view-later"}[later], func(t *testing.T) { testPiecedBodies(t, later) })
	}
}

func testPiecedBodies(t *testing.T, later bool) {
	var mu sync.Mutex
	var got [][]byte
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		got = append(got, b)
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"choices":[{"index":0,"message":{"role":"assistant","content":"ok"},"finish_reason":"stop"}]}`)
	}))
	defer up.Close()
	rng := rand.New(rand.NewPCG(15, 4))
	var want [][]byte // the edited bodies, as the transform made them
	edit := RequestTransformFunc(func(_ context.Context, call *Call, body []byte) ([]byte, error) {
		var edits []conv.Edit
		for _, m := range call.View.Messages {
			if m.ContentEnd-m.ContentStart < 4 || rng.IntN(3) == 0 {
				continue
			}
			s, e := m.ContentStart+1, m.ContentEnd-1 // inside the quotes
			switch rng.IntN(4) {
			case 0: // the string's first bytes
				e = s + rng.IntN(e-s)
			case 1: // its last
				s = e - rng.IntN(e-s)
			case 2: // an insertion
				s = s + rng.IntN(e-s)
				e = s
			}
			edits = append(edits, conv.Edit{Start: s, End: e, Repl: []byte(strings.Repeat("~", rng.IntN(3)*rng.IntN(200)))})
		}
		var out []byte
		if later {
			a := call.View.ApplyLater(edits)
			call.SetViewLater(a)
			out = a.Body
		} else {
			v, err := call.View.Apply(edits)
			if err != nil {
				return nil, err
			}
			call.SetView(v)
			out = v.Body
		}
		mu.Lock()
		want = append(want, bytes.Clone(out))
		mu.Unlock()
		return out, nil
	})
	var seen []string // what the observers found wrong with View
	watch := observerFunc(func(call *Call, up *Upstream) ResponseSink {
		if msg := viewOfBody(call.View, up.Body); msg != "" {
			mu.Lock()
			seen = append(seen, msg)
			mu.Unlock()
		}
		return nil
	})
	_, srv := newTestProxy(t, up.URL, func(o *Options) {
		o.Transforms = []RequestTransform{edit}
		o.Observers = []Observer{watch}
	})
	before := piecedBodies.Load()
	msgs := []string{`{"role":"system","content":"be brief"}`}
	large := 0
	for i := range 40 {
		msgs = append(msgs, fmt.Sprintf(`{"role":"user","content":"question %d %s"}`, i, strings.Repeat("q", rng.IntN(8000))),
			fmt.Sprintf(`{"role":"assistant","content":"answer %d %s"}`, i, strings.Repeat("a", rng.IntN(8000))))
		body := []byte(`{"model":"m","messages":[` + strings.Join(msgs, ",") + `]}`)
		resp, _ := do(t, http.DefaultClient, http.MethodPost, srv.URL+"/v1/chat/completions", body, nil)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("request %d: status %d", i, resp.StatusCode)
		}
		mu.Lock()
		last, edited, ran := got[len(got)-1], want[len(want)-1], len(want)
		mu.Unlock()
		if ran != i+1 {
			t.Fatalf("request %d: the transform ran %d times", i, ran)
		}
		if !bytes.Equal(last, edited) {
			n := 0
			for n < len(last) && n < len(edited) && last[n] == edited[n] {
				n++
			}
			t.Fatalf("request %d: the upstream got %d bytes, differing from the edited body's %d at byte %d", i, len(last), len(edited), n)
		}
		if len(edited) >= 64<<10 && !bytes.Equal(edited, body) {
			large++
		}
	}
	if large < 20 {
		t.Fatalf("%d large edited bodies: the test checked little", large)
	}
	if len(seen) > 0 {
		t.Fatalf("%d requests' observers read another view than the body sent's; the first: %s", len(seen), seen[0])
	}
	if n := piecedBodies.Load() - before; n != int64(large) {
		t.Fatalf("%d bodies written from their pieces, want the %d large edited ones", n, large)
	}
}

// viewOfBody says how v is not the view of body ("" when it is: body's
// very bytes, and the messages ParseRequest reads in them).
func viewOfBody(v *conv.Request, body []byte) string {
	if v == nil || !sameBuffer(v.Body, body) {
		return "a view of another body"
	}
	want, err := conv.ParseRequest(body)
	if err != nil {
		return err.Error()
	}
	if len(want.Messages) != len(v.Messages) {
		return fmt.Sprintf("%d messages, want %d", len(v.Messages), len(want.Messages))
	}
	for i := range want.Messages {
		a, b := &v.Messages[i], &want.Messages[i]
		if a.Start != b.Start || a.End != b.End || a.Content != b.Content || a.Reasoning != b.Reasoning || a.Role != b.Role {
			return fmt.Sprintf("message %d differs", i)
		}
	}
	return ""
}

// TestViewLaterRead: the view a transform left to make (SetViewLater) is
// made at once for the transform after it, which reads it as View; when
// that one changes the body again with a view of its own, the observers
// read that one.
func TestViewLaterRead(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"choices":[{"index":0,"message":{"role":"assistant","content":"ok"},"finish_reason":"stop"}]}`)
	}))
	defer up.Close()
	// first replaces the user's content with "first" and leaves its view
	// to make; the second reads View and, when asked, appends "second".
	first := RequestTransformFunc(func(_ context.Context, call *Call, body []byte) ([]byte, error) {
		m := call.View.Messages[0]
		a := call.View.ApplyLater([]conv.Edit{{Start: m.ContentStart, End: m.ContentEnd, Repl: []byte(`"first"`)}})
		call.SetViewLater(a)
		return a.Body, nil
	})
	for _, change := range []bool{false, true} {
		var mu sync.Mutex
		var read, observed []string
		second := RequestTransformFunc(func(_ context.Context, call *Call, body []byte) ([]byte, error) {
			mu.Lock()
			read = append(read, call.View.Messages[0].Content+"|"+viewOfBody(call.View, body))
			mu.Unlock()
			if !change {
				return body, nil
			}
			m := call.View.Messages[0]
			v, err := call.View.Apply([]conv.Edit{{Start: m.ContentEnd - 1, End: m.ContentEnd - 1, Repl: []byte(" second")}})
			if err != nil {
				return nil, err
			}
			call.SetView(v)
			return v.Body, nil
		})
		watch := observerFunc(func(call *Call, up *Upstream) ResponseSink {
			mu.Lock()
			observed = append(observed, call.View.Messages[0].Content)
			mu.Unlock()
			return nil
		})
		_, srv := newTestProxy(t, up.URL, func(o *Options) {
			o.Transforms = []RequestTransform{first, second}
			o.Observers = []Observer{watch}
		})
		body := []byte(`{"model":"m","messages":[{"role":"user","content":"hello"}]}`)
		if resp, _ := do(t, http.DefaultClient, http.MethodPost, srv.URL+"/v1/chat/completions", body, nil); resp.StatusCode != http.StatusOK {
			t.Fatalf("status %d", resp.StatusCode)
		}
		mu.Lock()
		if len(read) != 1 || read[0] != "first|" {
			t.Errorf("change %v: the second transform read %q, want the first's output's view", change, read)
		}
		want := map[bool]string{false: "first", true: "first second"}[change]
		if len(observed) != 1 || observed[0] != want {
			t.Errorf("change %v: the observer read %q, want %q", change, observed, want)
		}
		mu.Unlock()
	}
}

// TestPiecedBodyCutShort: a large body a transform edited (Apply, or
// ApplyLater with its view left to the proxy) and a later transform cut
// short (the start of the same buffer: trailing spaces trimmed) goes
// upstream as the cut body, exactly its declared length: not as the
// edited view's pieces, which hold more. The bytes past the length
// would be read as the next request's on the kept connection.
func TestPiecedBodyCutShort(t *testing.T) {
	for _, later := range []bool{false, true} {
		t.Run(map[bool]string{false: "view", true: "view-later"}[later], func(t *testing.T) {
			// The upstream reads each request of a connection as
			// net/http's client sent it: a byte past a body's length is
			// the next request's first, and spoils it.
			var mu sync.Mutex
			var got [][]byte
			var bad []error
			upURL := testenv.ServeConns(t, func(c net.Conn) {
				br := bufio.NewReader(c)
				for {
					r, err := http.ReadRequest(br)
					if err != nil {
						if err != io.EOF {
							mu.Lock()
							bad = append(bad, err)
							mu.Unlock()
						}
						return
					}
					b, _ := io.ReadAll(r.Body)
					mu.Lock()
					got = append(got, b)
					mu.Unlock()
					const answer = `{"choices":[{"index":0,"message":{"role":"assistant","content":"ok"},"finish_reason":"stop"}]}`
					fmt.Fprintf(c, "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(answer), answer)
				}
			})
			edit := RequestTransformFunc(func(_ context.Context, call *Call, body []byte) ([]byte, error) {
				m := call.View.Messages[1]
				edits := []conv.Edit{{Start: m.ContentStart + 1, End: m.ContentEnd - 1, Repl: []byte("short")}}
				if later {
					a := call.View.ApplyLater(edits)
					call.SetViewLater(a)
					return a.Body, nil
				}
				v, err := call.View.Apply(edits)
				if err != nil {
					return nil, err
				}
				call.SetView(v)
				return v.Body, nil
			})
			trim := RequestTransformFunc(func(_ context.Context, _ *Call, body []byte) ([]byte, error) {
				return bytes.TrimRight(body, " "), nil
			})
			_, srv := newTestProxy(t, upURL, func(o *Options) { o.Transforms = []RequestTransform{edit, trim} })
			before := piecedBodies.Load()
			for i := range 3 {
				body := []byte(fmt.Sprintf(`{"model":"m","messages":[{"role":"user","content":"%d %s"},{"role":"assistant","content":"%s"}]}`, i, strings.Repeat("q", 80<<10), strings.Repeat("a", 40<<10)) + strings.Repeat(" ", 300))
				want := bytes.Replace(bytes.TrimRight(body, " "), []byte(strings.Repeat("a", 40<<10)), []byte("short"), 1)
				resp, _ := do(t, http.DefaultClient, http.MethodPost, srv.URL+"/v1/chat/completions", body, nil)
				if resp.StatusCode != http.StatusOK {
					t.Fatalf("request %d: status %d (the bytes past the last body's length read as this request's start?)", i, resp.StatusCode)
				}
				mu.Lock()
				last, n := got[len(got)-1], len(got)
				mu.Unlock()
				if n != i+1 || !bytes.Equal(last, want) {
					t.Fatalf("request %d: the upstream got %d bodies, the last of %d bytes; want %d bodies, the last the cut edited body's %d bytes", i, n, len(last), i+1, len(want))
				}
			}
			mu.Lock()
			defer mu.Unlock()
			if len(bad) > 0 {
				t.Fatalf("the upstream read %d requests it could not parse, the first: %v (a body's bytes past its length)", len(bad), bad[0])
			}
			if n := piecedBodies.Load() - before; n != 0 {
				t.Fatalf("%d cut bodies written from the edited view's pieces", n)
			}
		})
	}
}

// TestPiecedBodyResumedAfterEarlyAnswer: a large edited body, written as
// its pieces in the handler's goroutine, whose upstream answers before it
// has read the whole body and reads the rest afterwards: the write stops
// for the answer and the rest goes on aside from where it stopped, so the
// upstream gets exactly the edited body, and the client the answer.
func TestPiecedBodyResumedAfterEarlyAnswer(t *testing.T) {
	if !idleCheckWorks {
		t.Skip("no peek on this platform: plain HTTP goes through http.Transport")
	}
	const answer = `{"choices":[{"index":0,"message":{"role":"assistant","content":"ok"},"finish_reason":"stop"}]}`
	var mu sync.Mutex
	var want []byte // the edited body
	edit := RequestTransformFunc(func(_ context.Context, call *Call, body []byte) ([]byte, error) {
		var edits []conv.Edit
		for i, m := range call.View.Messages {
			if i%3 == 0 && m.ContentEnd-m.ContentStart > 4 {
				edits = append(edits, conv.Edit{Start: m.ContentStart + 1, End: m.ContentStart + 3, Repl: []byte("~edited~")})
			}
		}
		v, err := call.View.Apply(edits)
		if err != nil {
			return nil, err
		}
		call.SetView(v)
		mu.Lock()
		want = bytes.Clone(v.Body)
		mu.Unlock()
		return v.Body, nil
	})
	whole := make(chan bool, 1)
	up := newRawUpstream(t, func(u *rawUpstream, c net.Conn, br *bufio.Reader, _ int64) {
		got, ok := answerBeforeBody(c, br, "application/json", len(answer))
		if !ok {
			return
		}
		mu.Lock()
		whole <- bytes.Equal(got, want)
		mu.Unlock()
		_, _ = io.WriteString(c, answer)
		_, _ = br.ReadByte()
	})
	p, srv := newTestProxy(t, up.url(), func(o *Options) { o.Transforms = []RequestTransform{edit} })
	tr, ok := p.transport.(*h1Transport)
	if !ok {
		t.Fatalf("the proxy's transport is a %T", p.transport)
	}
	var msgs []string
	for i := range 1600 { // about 13 MB: more than the sockets' buffers hold
		msgs = append(msgs, fmt.Sprintf(`{"role":"user","content":"message %d %s"}`, i, strings.Repeat("m", 8000)))
	}
	before := piecedBodies.Load()
	body := []byte(`{"model":"m","messages":[` + strings.Join(msgs, ",") + `]}`)
	resp, got := do(t, http.DefaultClient, http.MethodPost, srv.URL+"/v1/chat/completions", body, nil)
	if resp.StatusCode != http.StatusOK || string(got) != answer {
		t.Fatalf("status %d, answer %q", resp.StatusCode, got)
	}
	select {
	case ok := <-whole:
		if !ok {
			t.Fatal("the upstream did not get the edited body byte for byte")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the upstream never read the whole body")
	}
	if in, cut := tr.largeInline.Load(), tr.largeCut.Load(); in != 1 || cut != 1 {
		t.Fatalf("large bodies written inline %d, cut %d (want 1, 1)", in, cut)
	}
	if n := piecedBodies.Load() - before; n < 1 {
		t.Fatal("the body was not written from its pieces")
	}
}
