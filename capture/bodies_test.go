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
	"github.com/shaperproxy/shaperproxy/internal/bigbuf"
	"github.com/shaperproxy/shaperproxy/proxy"
)

// bodiesRig is a proxy in front of an upstream that keeps the bodies it
// reads, with the capture observer (client requests too) writing to a
// Writer whose records wait in its queue until a Flush: meanwhile the
// calls end and give their large bodies back for the next ones.
type bodiesRig struct {
	w   *Writer
	dir string
	url string
	mu  sync.Mutex
	got [][]byte
	// A client has a large request's answer before its call ends (the
	// observers are told of the request once the answer's first bytes
	// are out), so a test waits for the calls to end before it flushes
	// the writer (ended): ends counts the proxy's handlers that returned,
	// answered the requests the test counted.
	ends     atomic.Int64
	answered int64
}

// newBodiesRig starts the rig; refuse, when it says so, has the upstream
// answer 400 at once, without reading the body.
func newBodiesRig(t *testing.T, transform proxy.RequestTransform, refuse func() bool) *bodiesRig {
	t.Helper()
	rig := &bodiesRig{}
	rig.w, rig.dir = openTest(t, Options{FlushInterval: time.Hour})
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if refuse() {
			w.WriteHeader(http.StatusBadRequest)
			_, _ = io.WriteString(w, `{"error":"reasoning"}`)
			return
		}
		b, _ := io.ReadAll(r.Body)
		rig.mu.Lock()
		rig.got = append(rig.got, b)
		rig.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"choices":[{"index":0,"message":{"role":"assistant","content":"ok"},"finish_reason":"stop"}]}`)
	}))
	t.Cleanup(up.Close)
	u, _ := url.Parse(up.URL)
	p, err := proxy.New(proxy.Options{
		Routes:     []proxy.Route{{Name: "default", Upstream: u}},
		Transforms: []proxy.RequestTransform{transform},
		Observers:  []proxy.Observer{NewObserver(rig.w, true)},
	})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer rig.ends.Add(1)
		p.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	t.Cleanup(p.CloseIdleConnections)
	rig.url = srv.URL + "/v1/chat/completions"
	return rig
}

// post sends the i-th request of a test, a large one, and returns it.
func (rig *bodiesRig) post(t *testing.T, i, size int) []byte {
	t.Helper()
	body := fmt.Appendf(nil, `{"model":"m","messages":[{"role":"user","content":"%s"}]}`, strings.Repeat(string(rune('a'+i)), size))
	resp, err := http.Post(rig.url, "application/json", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()
	rig.ended(t)
	return body
}

// ended counts a request the client has had its answer to, and waits
// until the calls of all it counted have ended: their records queued to
// the writer, their bodies given back or held by the records.
func (rig *bodiesRig) ended(t *testing.T) {
	t.Helper()
	rig.answered++
	for deadline := time.Now().Add(10 * time.Second); rig.ends.Load() < rig.answered; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d calls ended after 10 s", rig.ends.Load(), rig.answered)
		}
	}
}

// records returns the request records' data, as sent upstream and as the
// client sent them, and the bodies the upstream read.
func (rig *bodiesRig) records(t *testing.T) (wire, client, got [][]byte) {
	t.Helper()
	for _, l := range scanAll(t, openReaderTest(t, rig.dir)) {
		switch l.Record.Kind {
		case KindRequest:
			wire = append(wire, l.Record.Data)
		case KindClientRequest:
			client = append(client, l.Record.Data)
		}
	}
	rig.mu.Lock()
	defer rig.mu.Unlock()
	return wire, client, rig.got
}

// shaped is a request edited as shapeFirst edits it.
func shaped(body []byte) []byte {
	return bytes.Replace(body, body[bytes.Index(body, []byte(`"content":"`)):][:len(`"content":"`)+8], []byte(`"content":"shaped!!`), 1)
}

// shapeFirst edits the first message's content, as shaping does, into a
// large body of its own, and hands the proxy its view (conv.Request.Apply,
// whose view keeps the strings of the client's body).
func shapeFirst(_ context.Context, call *proxy.Call, body []byte) ([]byte, error) {
	m := call.View.Messages[0]
	at := bytes.Index(body[m.Start:m.End], []byte(`"content":"`)) + m.Start + len(`"content":"`)
	v, err := call.View.Apply([]conv.Edit{{Start: at, End: at + 8, Repl: []byte("shaped!!")}})
	if err != nil {
		return nil, err
	}
	call.SetView(v)
	return v.Body, nil
}

// TestQueuedBodiesHeld: a request's large bodies go back to bigbuf when
// the call ends, and the next request writes into them; the capture's
// records of a call still queued must not see that. Four large requests,
// each edited by a transform (a second large body), wait in the queue
// until a Flush: each record holds the bytes its upstream received, the
// edited bodies come back only once encoded, and then all of them do.
func TestQueuedBodiesHeld(t *testing.T) {
	rig := newBodiesRig(t, proxy.RequestTransformFunc(shapeFirst), func() bool { return false })
	released := bigbuf.Released()
	var sent [][]byte
	for i := range 4 {
		sent = append(sent, rig.post(t, i, 300<<10))
	}
	if n := bigbuf.Released() - released; n != 0 {
		t.Fatalf("%d bodies went back while their records waited in the queue", n)
	}
	mustFlush(t, rig.w)
	if n := bigbuf.Released() - released; n < 4 {
		t.Fatalf("%d bodies went back once their records were written, want the 4 edited ones at least", n)
	}
	wire, client, got := rig.records(t)
	if len(wire) != 4 || len(client) != 4 || len(got) != 4 {
		t.Fatalf("%d wire and %d client records for %d requests upstream, want 4 each", len(wire), len(client), len(got))
	}
	for i := range 4 {
		if !bytes.Equal(wire[i], got[i]) || !bytes.Equal(got[i], shaped(sent[i])) {
			t.Errorf("request %d: the wire record is not what the upstream received (%.40q… against %.40q…)", i, wire[i][30:], got[i][30:])
		}
		if !bytes.Equal(client[i], sent[i]) {
			t.Errorf("request %d: the client record is not what the client sent (%.40q… against %.40q…)", i, client[i][30:], sent[i][30:])
		}
	}
}

// retryAll is shapeFirst, left out of every second attempt.
type retryAll struct{ proxy.RequestTransformFunc }

func (retryAll) RetryWithout(*proxy.Call, int, []byte) bool { return true }

// TestRetriedLargeBodiesCaptured: large requests whose first attempt the
// upstream refuses early, before reading the body (the h1Transport writes
// it aside), are sent again without the edit (a Retrier), and captured with
// records waiting in the queue: every record, of each attempt and of the
// client, holds its own bytes, though each call gives its bodies back at
// its end for the next one to overwrite.
func TestRetriedLargeBodiesCaptured(t *testing.T) {
	var n atomic.Int32
	edit := retryAll{func(ctx context.Context, call *proxy.Call, body []byte) ([]byte, error) {
		if call.Retry {
			return body, nil
		}
		return shapeFirst(ctx, call, body)
	}}
	rig := newBodiesRig(t, edit, func() bool { return n.Add(1)%2 == 1 })
	var sent [][]byte
	for i := range 8 {
		sent = append(sent, rig.post(t, i, 900<<10))
		if i%3 == 2 {
			mustFlush(t, rig.w)
		}
	}
	mustFlush(t, rig.w)
	wire, client, got := rig.records(t)
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
		if !bytes.Equal(wire[2*i], shaped(sent[i])) {
			t.Errorf("request %d: the first attempt's record is not the edited body", i)
		}
	}
}
