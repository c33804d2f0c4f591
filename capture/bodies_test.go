package capture

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/shaperproxy/shaperproxy/conv"
	"github.com/shaperproxy/shaperproxy/internal/bigbuf"
	"github.com/shaperproxy/shaperproxy/proxy"
)

// TestQueuedBodiesHeld: a request's large bodies go back to bigbuf when
// the call ends, and the next request writes into them; the capture's
// records of a call still queued must not see that. Four large requests,
// each edited by a transform (a second large body), wait in the queue
// until a Flush: each record holds the bytes its upstream received, the
// edited bodies come back only once encoded, and then all of them do.
func TestQueuedBodiesHeld(t *testing.T) {
	w, dir := openTest(t, Options{FlushInterval: time.Hour})
	var mu sync.Mutex
	var got [][]byte
	up := httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		got = append(got, b)
		mu.Unlock()
		rw.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(rw, `{"choices":[{"index":0,"message":{"role":"assistant","content":"ok"},"finish_reason":"stop"}]}`)
	}))
	defer up.Close()
	u, _ := url.Parse(up.URL)
	edit := proxy.RequestTransformFunc(func(_ context.Context, call *proxy.Call, body []byte) ([]byte, error) {
		m := call.View.Messages[0]
		at := bytes.Index(body[m.Start:m.End], []byte(`"content":"`)) + m.Start + len(`"content":"`)
		return conv.ApplyEdits(body, []conv.Edit{{Start: at, End: at + 8, Repl: []byte("shaped!!")}}), nil
	})
	p, err := proxy.New(proxy.Options{
		Routes:     []proxy.Route{{Name: "default", Upstream: u}},
		Transforms: []proxy.RequestTransform{edit},
		Observers:  []proxy.Observer{NewObserver(w, true)},
	})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(p)
	defer srv.Close()
	defer p.CloseIdleConnections()

	released := bigbuf.Released()
	var sent [][]byte
	for i := range 4 {
		body := fmt.Appendf(nil, `{"model":"m","messages":[{"role":"user","content":"%s"}]}`, strings.Repeat(string(rune('a'+i)), 300<<10))
		sent = append(sent, body)
		resp, err := http.Post(srv.URL+"/v1/chat/completions", "application/json", bytes.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		_ = resp.Body.Close()
	}
	if n := bigbuf.Released() - released; n != 0 {
		t.Fatalf("%d bodies went back while their records waited in the queue", n)
	}
	mustFlush(t, w)
	if n := bigbuf.Released() - released; n < 4 {
		t.Fatalf("%d bodies went back once their records were written, want the 4 edited ones at least", n)
	}
	var wire, client [][]byte
	for _, l := range scanAll(t, openReaderTest(t, dir)) {
		switch l.Record.Kind {
		case KindRequest:
			wire = append(wire, l.Record.Data)
		case KindClientRequest:
			client = append(client, l.Record.Data)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if len(wire) != 4 || len(client) != 4 || len(got) != 4 {
		t.Fatalf("%d wire and %d client records for %d requests upstream, want 4 each", len(wire), len(client), len(got))
	}
	for i := range 4 {
		if !bytes.Equal(wire[i], got[i]) || !bytes.Contains(got[i], []byte("shaped!!")) {
			t.Errorf("request %d: the wire record is not what the upstream received (%.40q… against %.40q…)", i, wire[i][30:], got[i][30:])
		}
		if !bytes.Equal(client[i], sent[i]) {
			t.Errorf("request %d: the client record is not what the client sent (%.40q… against %.40q…)", i, client[i][30:], sent[i][30:])
		}
	}
}
