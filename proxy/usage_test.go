package proxy

import (
	"bytes"
	"compress/gzip"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"unsafe"

	"github.com/shaperproxy/shaperproxy/conv"
)

// TestEndCarriesUsage: the observers get, with the end of each call, the
// usage the response reported, read once by the proxy: from a stream's
// usage chunk, a plain body, and a gzip body (decoded); and a body's
// answer (conv.Answer), read in the same pass.
func TestEndCarriesUsage(t *testing.T) {
	const usage = `{"prompt_tokens":12,"completion_tokens":3,"prompt_tokens_details":{"cached_tokens":8}}`
	stream := "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"hi\"}}],\"usage\":null}\n\n" +
		"data: {\"model\":\"m-stream\",\"choices\":[],\"usage\":" + usage + "}\n\ndata: [DONE]\n\n"
	body := `{"model":"m-body","choices":[{"index":0,"message":{"role":"assistant","content":"hi"},"finish_reason":"stop"}],"usage":` + usage + `}`
	var zbuf bytes.Buffer
	zw := gzip.NewWriter(&zbuf)
	_, _ = io.WriteString(zw, body)
	_ = zw.Close()
	for _, tc := range []struct{ name, ctype, encoding, model string }{
		{"stream", "text/event-stream", "", "m-stream"},
		{"body", "application/json", "", "m-body"},
		{"gzip body", "application/json", "gzip", "m-body"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", tc.ctype)
				switch {
				case tc.encoding != "":
					w.Header().Set("Content-Encoding", tc.encoding)
					_, _ = w.Write(zbuf.Bytes())
				case tc.ctype == "text/event-stream":
					_, _ = io.WriteString(w, stream)
				default:
					_, _ = io.WriteString(w, body)
				}
			}))
			defer up.Close()
			obs := &recordingObserver{}
			_, px := newTestProxy(t, up.URL, func(o *Options) { o.Observers = []Observer{obs} })
			do(t, rawClient(), "POST", px.URL+"/v1/chat/completions", []byte(chatBody), http.Header{"Accept-Encoding": {"gzip"}})
			end := obs.waitEnd(t)
			if string(end.Usage) != usage || end.UsageModel != tc.model {
				t.Fatalf("end usage %s (model %q), want %s (%q)", end.Usage, end.UsageModel, usage, tc.model)
			}
			// A body's answer, read once for every sink; none for a stream.
			if tc.ctype == "text/event-stream" {
				if end.Answer != nil {
					t.Fatal("a stream's end carries an answer")
				}
				return
			}
			if end.Answer == nil {
				t.Fatal("a body's end carries no answer")
			}
			if c, ok := end.Answer.Choice(); !ok || c.Content != "hi" {
				t.Fatalf("the end's answer read %+v, %v", c, ok)
			}
		})
	}
}

// TestUsageWatcherGuarded: a panic in the usage watcher (input it did not
// expect) turns it off for the attempt, like a failing sink: the call
// goes on, its sinks still get the end, without a usage.
func TestUsageWatcherGuarded(t *testing.T) {
	rec := &recordingObserver{}
	sinks := sinkList{s: []ResponseSink{rec.Request(&Call{}, nil)}, usage: &usageWatch{}}
	sinks.watch(func(*conv.UsageWatcher) { panic("unexpected input") })
	if !sinks.usage.off {
		t.Fatal("the watcher is still on after a panic")
	}
	sinks.Body([]byte(`{"usage":{"prompt_tokens":1}}`))
	sinks.End(End{Outcome: OutcomeComplete})
	if end := rec.waitEnd(t); end.Usage != nil {
		t.Fatalf("end carries usage %s from a watcher turned off", end.Usage)
	}
}

// callThrough sends body through a proxy to an upstream answering
// answer, and returns the call its observer saw, the call's end and the
// body the upstream got.
func callThrough(t *testing.T, answer string, body []byte) (*Call, End, []byte) {
	t.Helper()
	var mu sync.Mutex
	var got []byte
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		got = b
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, answer)
	}))
	defer up.Close()
	var call *Call
	rec := &recordingObserver{}
	obs := observerFunc(func(c *Call, u *Upstream) ResponseSink {
		mu.Lock()
		call = c
		mu.Unlock()
		return rec.Request(c, u)
	})
	_, srv := newTestProxy(t, up.URL, func(o *Options) { o.Observers = []Observer{obs} })
	do(t, rawClient(), http.MethodPost, srv.URL+"/v1/chat/completions", body, nil)
	end := rec.waitEnd(t)
	mu.Lock()
	defer mu.Unlock()
	if call == nil {
		t.Fatal("the observer saw no call")
	}
	return call, end, got
}

// TestModelKeysOwnTheirBytes: the model names long-lived caches (profiles,
// metric children, the meter's sets), so the call's model may not be a
// string of the body, which would keep the body alive with the cache's
// key. (The usage's model: conv's TestUsageModelOwnsItsBytes.)
func TestModelKeysOwnTheirBytes(t *testing.T) {
	call, end, _ := callThrough(t, `{"model":"m-answer","choices":[],"usage":{"prompt_tokens":1,"completion_tokens":1}}`,
		[]byte(`{"model":"m-request","messages":[{"role":"user","content":"hi"}]}`))
	if call.Model != "m-request" || end.UsageModel != "m-answer" {
		t.Fatalf("model %q, usage model %q", call.Model, end.UsageModel)
	}
	within := func(s string, b []byte) bool {
		p, lo := uintptr(unsafe.Pointer(unsafe.StringData(s))), uintptr(unsafe.Pointer(unsafe.SliceData(b)))
		return p >= lo && p < lo+uintptr(len(b))
	}
	if within(call.Model, call.ClientBody) || call.View != nil && within(call.Model, call.View.Body) {
		t.Error("the call's model is a string of the request body")
	}
}

// TestModelKeysBounded: a model name of a megabyte in the request, and
// one of a kilobyte in the answer (a longer answer's usage is looked for
// in its tail only), key the caches by their first conv.MaxModelBytes
// bytes; the upstream gets the request's name whole.
func TestModelKeysBounded(t *testing.T) {
	long := strings.Repeat("m", 1<<20)
	body := []byte(`{"model":"` + long + `","messages":[{"role":"user","content":"hi"}]}`)
	call, end, got := callThrough(t, `{"model":"`+long[:1000]+`-answer","choices":[],"usage":{"prompt_tokens":1,"completion_tokens":1}}`, body)
	if call.Model != long[:conv.MaxModelBytes] || end.UsageModel != long[:conv.MaxModelBytes] {
		t.Fatalf("model of %d bytes, usage model of %d", len(call.Model), len(end.UsageModel))
	}
	if !bytes.Equal(got, body) {
		t.Fatal("the upstream did not get the request as sent")
	}
}

// observerFunc adapts a function to Observer.
type observerFunc func(*Call, *Upstream) ResponseSink

func (f observerFunc) Request(c *Call, u *Upstream) ResponseSink { return f(c, u) }

// TestClientView: after a transform changed the body, ClientView is
// still the view of the client's own body (the capture's client-request
// record reuses it instead of parsing that body again).
func TestClientView(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		_, _ = io.WriteString(w, `{"choices":[]}`)
	}))
	defer up.Close()
	var mu sync.Mutex
	var client *conv.Request
	var clientBody, sent []byte
	grow := RequestTransformFunc(func(_ context.Context, c *Call, body []byte) ([]byte, error) {
		out := bytes.Replace(body, []byte(`"hi"`), []byte(`"hi there"`), 1)
		v, err := conv.ParseRequest(out)
		if err != nil {
			return nil, err
		}
		c.SetView(v) // View becomes the changed body's
		return out, nil
	})
	var view *conv.Request
	obs := observerFunc(func(c *Call, u *Upstream) ResponseSink {
		mu.Lock()
		client, clientBody, sent, view = c.ClientView(), c.ClientBody, u.Body, c.View
		mu.Unlock()
		return nil
	})
	_, srv := newTestProxy(t, up.URL, func(o *Options) {
		o.Transforms = []RequestTransform{grow}
		o.Observers = []Observer{obs}
	})
	body := []byte(`{"model":"m","messages":[{"role":"user","content":"hi"}]}`)
	do(t, rawClient(), http.MethodPost, srv.URL+"/v1/chat/completions", body, nil)
	mu.Lock()
	defer mu.Unlock()
	if !bytes.Contains(sent, []byte(`"hi there"`)) || view == nil || view.Messages[0].Content != "hi there" {
		t.Fatalf("the transform did not change the body and its view: %s", sent)
	}
	if client == nil || !bytes.Equal(client.Body, body) || &client.Body[0] != &clientBody[0] || client.Messages[0].Content != "hi" {
		t.Fatalf("ClientView is not the view of the client's body: %+v", client)
	}
}
