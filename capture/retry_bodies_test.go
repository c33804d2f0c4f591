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
	"sync/atomic"
	"testing"
	"time"

	"github.com/shaperproxy/shaperproxy/conv"
	"github.com/shaperproxy/shaperproxy/proxy"
)

type retryAll struct{ proxy.RequestTransformFunc }

func (retryAll) RetryWithout(*proxy.Call, int, []byte) bool { return true }

// TestRetriedLargeBodiesCaptured: large requests whose first attempt the
// upstream refuses early, before reading the body (the h1Transport writes
// it aside), are sent again without the edit (a Retrier), and captured with
// records waiting in the queue: every record, of each attempt and of the
// client, holds its own bytes, though each call gives its bodies back at
// its end for the next one to overwrite.
func TestRetriedLargeBodiesCaptured(t *testing.T) {
	w, dir := openTest(t, Options{FlushInterval: time.Hour})
	var mu sync.Mutex
	var got [][]byte
	var n atomic.Int32
	up := httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		if n.Add(1)%2 == 1 {
			rw.WriteHeader(400)
			_, _ = io.WriteString(rw, `{"error":"reasoning"}`)
			return
		}
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		got = append(got, b)
		mu.Unlock()
		rw.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(rw, `{"choices":[{"index":0,"message":{"role":"assistant","content":"ok"},"finish_reason":"stop"}]}`)
	}))
	defer up.Close()
	u, _ := url.Parse(up.URL)
	edit := retryAll{func(_ context.Context, call *proxy.Call, body []byte) ([]byte, error) {
		if call.Retry {
			return body, nil
		}
		m := call.View.Messages[0]
		at := bytes.Index(body[m.Start:m.End], []byte(`"content":"`)) + m.Start + len(`"content":"`)
		v, err := call.View.Apply([]conv.Edit{{Start: at, End: at + 8, Repl: []byte("shaped!!")}})
		if err != nil {
			return nil, err
		}
		call.SetView(v)
		return v.Body, nil
	}}
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
	var sent [][]byte
	for i := range 8 {
		body := fmt.Appendf(nil, `{"model":"m","messages":[{"role":"user","content":"%s"}]}`, strings.Repeat(string(rune('a'+i)), 900<<10))
		sent = append(sent, body)
		resp, err := http.Post(srv.URL+"/v1/chat/completions", "application/json", bytes.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		_ = resp.Body.Close()
		if i%3 == 2 {
			mustFlush(t, w)
		}
	}
	mustFlush(t, w)
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
	if len(wire) != 16 || len(client) != 8 || len(got) != 8 {
		t.Fatalf("%d wire and %d client records, %d bodies upstream, want 16, 8 and 8", len(wire), len(client), len(got))
	}
	for i := range 8 {
		if !bytes.Equal(client[i], sent[i]) {
			t.Errorf("request %d: the client record is not what the client sent", i)
		}
		if !bytes.Equal(wire[2*i+1], sent[i]) || !bytes.Equal(got[i], sent[i]) {
			t.Errorf("request %d: the second attempt's record or body is not the client's", i)
		}
		want := bytes.Replace(sent[i], []byte(`"content":"`+strings.Repeat(string(rune('a'+i)), 8)), []byte(`"content":"shaped!!`), 1)
		if !bytes.Equal(wire[2*i], want) {
			t.Errorf("request %d: the first attempt's record is not the edited body", i)
		}
	}
}
