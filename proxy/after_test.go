package proxy

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// afterTransform gives f to Call.After on every attempt.
func afterTransform(f func(*Call)) RequestTransform { return leaving((*Call).After, f) }

// TestAfter: work a transform leaves with Call.After runs once the client
// has the whole answer — it waits for the client to have read it, which
// it could not if the answer waited for it — served by net/http's server
// and by the proxy's own, for an answer of declared length and for a
// stream; it can still read the call's body (not released yet); it runs
// for every attempt, not for a transform that failed, and a panic in it
// is logged while the work after it still runs.
func TestAfter(t *testing.T) {
	for _, answer := range []struct {
		name, contentType, body string
		done                    string // what tells the client it has the whole answer
	}{
		{"declared length", "application/json", `{"ok":true}`, `{"ok":true}`},
		{"stream", "text/event-stream", "data: {\"a\":1}\n\ndata: [DONE]\n\n", "data: [DONE]\n\n"},
	} {
		up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			_, _ = io.Copy(io.Discard, r.Body)
			w.Header().Set("Content-Type", answer.contentType)
			if answer.contentType == "application/json" {
				w.Header().Set("Content-Length", fmt.Sprint(len(answer.body)))
			}
			_, _ = io.WriteString(w, answer.body)
		}))
		t.Cleanup(up.Close)
		body := []byte(`{"model":"m","messages":[{"role":"user","content":"` + strings.Repeat("x", 100<<10) + `"}]}`) // a body of bigbuf's
		clientHas := make(chan struct{}, 1)
		var sawAnswer, bodyIntact, ran atomic.Int32
		p, _ := newTestProxy(t, up.URL, func(o *Options) {
			o.Transforms = []RequestTransform{afterTransform(func(c *Call) {
				select { // an answer that waits for this work would keep it waiting
				case <-clientHas:
					sawAnswer.Add(1)
				case <-time.After(5 * time.Second):
				}
				if bytes.Equal(c.ClientBody, body) {
					bodyIntact.Add(1)
				}
				ran.Add(1)
			})}
		})
		plain, fast := serveBoth(t, p)
		for _, server := range []struct{ name, addr string }{{"net/http's server", plain}, {"the proxy's server", fast}} {
			t.Run(answer.name+", "+server.name, func(t *testing.T) {
				ran.Store(0)
				sawAnswer.Store(0)
				bodyIntact.Store(0)
				resp, err := http.Post("http://"+server.addr+"/v1/chat/completions", "application/json", bytes.NewReader(body))
				if err != nil {
					t.Fatal(err)
				}
				defer resp.Body.Close()
				var got []byte
				buf := make([]byte, 4096)
				for !strings.HasSuffix(string(got), answer.done) {
					n, err := resp.Body.Read(buf)
					got = append(got, buf[:n]...)
					if err != nil {
						break
					}
				}
				if string(got) != answer.body {
					t.Fatalf("answer %q, want %q", got, answer.body)
				}
				clientHas <- struct{}{}
				_, _ = io.Copy(io.Discard, resp.Body)
				if err := p.Wait(context.Background()); err != nil {
					t.Fatal(err)
				}
				if ran.Load() != 1 || sawAnswer.Load() != 1 || bodyIntact.Load() != 1 {
					t.Fatalf("the work ran %d times (want 1), after the client had the answer %d, with the call's body intact %d", ran.Load(), sawAnswer.Load(), bodyIntact.Load())
				}
			})
		}
	}

	t.Run("every attempt", func(t *testing.T) {
		var runs, retries atomic.Int32
		p, srv := newTestProxy(t, rejectsMarked(t), func(o *Options) {
			o.Transforms = []RequestTransform{retryOnce{}, RequestTransformFunc(func(_ context.Context, c *Call, b []byte) ([]byte, error) {
				retry := c.Retry // the attempt's, as it runs (the work runs after both)
				c.After(func() {
					runs.Add(1)
					if retry {
						retries.Add(1)
					}
				})
				return b, nil
			})}
		})
		postOK(t, srv.URL+"/v1/chat/completions", []byte(`{"model":"m","messages":[{"role":"user","content":"hi"}]}`))
		if err := p.Wait(context.Background()); err != nil {
			t.Fatal(err)
		}
		if runs.Load() != 2 || retries.Load() != 1 {
			t.Fatalf("ran %d times (%d of the retry's), want 2 (1)", runs.Load(), retries.Load())
		}
	})

	t.Run("not for a transform that failed; a panic", func(t *testing.T) {
		var failed, kept atomic.Int32
		up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			_, _ = io.Copy(io.Discard, r.Body)
			_, _ = io.WriteString(w, `{"ok":true}`)
		}))
		defer up.Close()
		p, srv := newTestProxy(t, up.URL, func(o *Options) {
			o.Transforms = append([]RequestTransform{afterTransform(func(*Call) { panic("boom") })},
				append(failing((*Call).After, func() { failed.Add(1) }), afterTransform(func(*Call) { kept.Add(1) }))...)
		})
		for range 2 {
			postOK(t, srv.URL+"/v1/chat/completions", []byte(`{"model":"m","messages":[]}`))
		}
		if err := p.Wait(context.Background()); err != nil {
			t.Fatal(err)
		}
		if kept.Load() != 2 || failed.Load() != 0 {
			t.Fatalf("the work after the one that panicked ran %d times (want 2), of the transforms that failed %d (want 0)", kept.Load(), failed.Load())
		}
	})
}
