package proxy

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"runtime/debug"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/shaperproxy/shaperproxy/conv"
	"github.com/shaperproxy/shaperproxy/internal/bigbuf"
)

// shapeFirst is a transform that edits the first message's content, as
// shaping does, into a large body of its own, and hands the proxy its view
// (conv.Request.Apply, whose view keeps the strings of the client's body).
var shapeFirst = RequestTransformFunc(func(_ context.Context, call *Call, body []byte) ([]byte, error) {
	m := call.View.Messages[0]
	at := bytes.Index(body[m.Start:m.End], []byte(`"content":"`)) + m.Start + len(`"content":"`)
	v, err := call.View.Apply([]conv.Edit{{Start: at, End: at + 8, Repl: []byte("shaped!!")}})
	if err != nil {
		return nil, err
	}
	call.SetView(v)
	return v.Body, nil
})

// answerOK starts an upstream that reads each request and answers a
// short chat completion.
func answerOK(t *testing.T) *httptest.Server {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"choices":[{"index":0,"message":{"role":"assistant","content":"ok"},"finish_reason":"stop"}]}`)
	}))
	t.Cleanup(up.Close)
	return up
}

// TestLargeBodiesReused: a conversation's large requests, each read into
// a bigbuf buffer and edited into another (written over the previous
// request's edited body: conv.Request.Apply), take no fresh buffer once
// the first requests have made theirs: each call gives its bodies back when it
// ends (the client's once the conversation's next request replaced it in
// the parse cache), and the upstream gets every request as edited.
func TestLargeBodiesReused(t *testing.T) {
	var last []byte
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		last, _ = io.ReadAll(r.Body)
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"choices":[{"index":0,"message":{"role":"assistant","content":"ok"},"finish_reason":"stop"}]}`)
	}))
	defer up.Close()
	_, srv := newTestProxy(t, up.URL, func(o *Options) { o.Transforms = []RequestTransform{shapeFirst} })

	// No collection meanwhile: one lets bigbuf drop a buffer that waited
	// on its free list through two (its idle trim), which a fresh one
	// would then replace: not what this test is about.
	defer debug.SetGCPercent(debug.SetGCPercent(-1))
	msgs := []string{fmt.Sprintf(`{"role":"user","content":"%s"}`, strings.Repeat("x", 300<<10))}
	var madeAfterWarmup, releasedAfterWarmup int64
	back := bigbuf.Released()
	edited := 0 // bytes of the edited bodies the upstream got
	const warmup, n = 4, 24
	for i := range n {
		if i == warmup {
			madeAfterWarmup, _ = bigbuf.Counts()
			releasedAfterWarmup = bigbuf.Released()
		}
		msgs = append(msgs, fmt.Sprintf(`{"role":"assistant","content":"answer %d"}`, i), fmt.Sprintf(`{"role":"user","content":"question %d"}`, i))
		body := []byte(`{"model":"m","messages":[` + strings.Join(msgs, ",") + `]}`)
		resp, _ := do(t, http.DefaultClient, http.MethodPost, srv.URL+"/v1/chat/completions", body, nil)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("request %d: status %d", i, resp.StatusCode)
		}
		edited += len(last)
		if want := bytes.Replace(body, []byte(`"content":"xxxxxxxx`), []byte(`"content":"shaped!!`), 1); !bytes.Equal(last, want) {
			t.Fatalf("request %d: the upstream did not get the edited body", i)
		}
		// Its bodies come back (the edited one to be written over by
		// the next request's, the client's previous one from the parse
		// cache), the last of them when the transport closes the
		// upstream body, which it may do after the answer came: waited
		// for, so that the next request finds them.
		want := back + 2
		if i == 0 {
			want = back + 1 // the parse cache keeps the client's
		}
		for deadline := time.Now().Add(5 * time.Second); bigbuf.Released() < want; time.Sleep(time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("request %d: %d of its bodies came back, want %d", i, bigbuf.Released()-back, want-back)
			}
		}
		back = bigbuf.Released()
	}
	made, _ := bigbuf.Counts()
	if fresh := made - madeAfterWarmup; fresh != 0 {
		t.Errorf("%d fresh buffers for the last %d requests, want none: the calls' bodies did not come back", fresh, n-warmup)
	}
	if back := bigbuf.Released() - releasedAfterWarmup; back < 2*(n-warmup) {
		t.Errorf("%d bodies given back by the last %d calls, want 2 each", back, n-warmup)
	}
	// /metrics says so: every request after the first read against the
	// one before and edited over the body edited for it.
	page := metricsText(t, srv.URL)
	over, fresh := metricValue(page, `shaperproxy_edited_bodies_total{how="written_over"}`), metricValue(page, `shaperproxy_edited_bodies_total{how="fresh"}`)
	if over+fresh != n || over < n-warmup {
		t.Errorf("edited bodies: %v written over, %v fresh; want %d in all, the last %d written over", over, fresh, n, n-warmup)
	}
	if got := metricValue(page, `shaperproxy_history_requests_total{how="repeated"}`); got != n-1 {
		t.Errorf("%v requests read against the one before, want %d", got, n-1)
	}
	// And of their bytes, all but what each request added were in place
	// already: kept, not written.
	kept, written := metricValue(page, `shaperproxy_edited_bytes_total{how="kept"}`), metricValue(page, `shaperproxy_edited_bytes_total{how="written"}`)
	if kept+written != float64(edited) || kept < 0.75*float64(edited) {
		t.Errorf("edited bytes: %v kept, %v written, of %d the upstream got; want them all, most kept", kept, written, edited)
	}
}

// TestHeldBodyUntilClosed: an upstream body read from the call's bodies
// keeps them after the call ended, until the transport closes it (which
// http.Transport may do after RoundTrip returned); a Hold does the same
// until its release.
func TestHeldBodyUntilClosed(t *testing.T) {
	call := &Call{}
	buf := bigbuf.Make(1 << 20)
	buf[0], buf[len(buf)-1] = '{', '}' // not the pattern of a buffer given back (bigbuf.Poisoned)
	call.own(buf)
	call.own(buf) // owned once, whatever its owner says
	body := newHeldBody(call, buf)
	hold := call.Hold()
	call.releaseBodies()
	if bigbuf.Poisoned(buf) { // the buffer alone: Released counts the binary's
		t.Fatal("the bodies went back at the call's end while a reader and a hold kept them")
	}
	_ = body.Close()
	_ = body.Close() // a second close releases nothing more
	if bigbuf.Poisoned(buf) {
		t.Fatal("the bodies went back while a hold kept them")
	}
	hold.Release()
	if !bigbuf.Poisoned(buf) {
		t.Fatal("the bodies did not go back at the last release")
	}
	defer func() {
		if recover() == nil {
			t.Fatal("a Hold after the call's bodies went back did not panic")
		}
	}()
	call.Hold()
}

// TestHoldBeforeLargeBody: a transform that keeps its output past the
// call takes a Hold, as RequestTransform says; the Hold covers the large
// body the call takes over afterwards, though the client's body was small
// (the call owned no large body when the Hold was taken).
func TestHoldBeforeLargeBody(t *testing.T) {
	up := answerOK(t)
	type kept struct {
		body, want []byte
		hold       Hold
	}
	keptc := make(chan kept, 1)
	grow := RequestTransformFunc(func(_ context.Context, call *Call, body []byte) ([]byte, error) {
		m := call.View.Messages[0]
		out := conv.ApplyEdits(body, []conv.Edit{{Start: m.ContentEnd - 1, End: m.ContentEnd - 1, Repl: bytes.Repeat([]byte("z"), 200<<10)}})
		keptc <- kept{out, bytes.Clone(out), call.Hold()}
		return out, nil
	})
	p, srv := newTestProxy(t, up.URL, func(o *Options) { o.Transforms = []RequestTransform{grow} })
	released := bigbuf.Released()
	body := []byte(`{"model":"m","messages":[{"role":"user","content":"` + strings.Repeat("s", 1000) + `"}]}`)
	if resp, _ := do(t, http.DefaultClient, http.MethodPost, srv.URL+"/v1/chat/completions", body, nil); resp.StatusCode != http.StatusOK {
		t.Fatalf("status %d", resp.StatusCode)
	}
	for p.InFlight() > 0 {
		time.Sleep(time.Millisecond)
	}
	k := <-keptc
	if !bytes.Equal(k.body, k.want) {
		t.Fatalf("the held output changed after the call ended: %.16q…", k.body)
	}
	k.hold.Release()
	if got := bigbuf.Released() - released; got != 1 {
		t.Fatalf("%d bodies went back at the hold's release, want the output", got)
	}
}

// TestHeldBodyReadAfterClose: the upstream body's Close, which may come
// from another goroutine than its reader's, ends its reads: nothing is read
// from bodies that may have gone back.
func TestHeldBodyReadAfterClose(t *testing.T) {
	call := &Call{}
	buf := bigbuf.Make(bigbuf.MinSize)
	call.own(buf)
	h := newHeldBody(call, buf)
	p := make([]byte, 10)
	if n, err := h.Read(p); n != 10 || err != nil {
		t.Fatalf("read %d, %v before the close", n, err)
	}
	_ = h.Close()
	if n, err := h.Read(p); n != 0 || err == nil {
		t.Fatalf("read %d, %v after the close, want an error", n, err)
	}
	call.releaseBodies()
}

// viewKeeper is an observer that keeps each call's view under a Hold, as
// the capture does for its queued records.
type viewKeeper struct {
	mu    sync.Mutex
	views []*conv.Request
	holds []Hold
}

func (k *viewKeeper) Request(call *Call, _ *Upstream) ResponseSink {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.views, k.holds = append(k.views, call.View), append(k.holds, call.Hold())
	return nil
}

// TestViewRecycledWithBodies: the view a transform left (made by Apply)
// gives its message array back with the call's bodies, after the last
// Hold — not at the call's end while an observer still reads it — and
// the client's view, which the parse cache keeps, is not given back.
func TestViewRecycledWithBodies(t *testing.T) {
	up := answerOK(t)
	var client *conv.Request
	apply := RequestTransformFunc(func(ctx context.Context, call *Call, body []byte) ([]byte, error) {
		client = call.View
		return shapeFirst(ctx, call, body)
	})
	keeper := &viewKeeper{}
	p, srv := newTestProxy(t, up.URL, func(o *Options) {
		o.Transforms, o.Observers = []RequestTransform{apply}, []Observer{keeper}
	})
	// Enough messages for their array to be recycled (a short one is
	// not: conv's minRecycled).
	msgs := []string{`{"role":"user","content":"` + strings.Repeat("x", 100<<10) + `"}`}
	for i := range 200 {
		msgs = append(msgs, fmt.Sprintf(`{"role":"user","content":"more %d"}`, i))
	}
	body := []byte(`{"model":"m","messages":[` + strings.Join(msgs, ",") + `]}`)
	if resp, _ := do(t, http.DefaultClient, http.MethodPost, srv.URL+"/v1/chat/completions", body, nil); resp.StatusCode != http.StatusOK {
		t.Fatalf("status %d", resp.StatusCode)
	}
	for p.InFlight() > 0 {
		time.Sleep(time.Millisecond)
	}
	keeper.mu.Lock()
	defer keeper.mu.Unlock()
	v := keeper.views[0]
	if v == client || len(v.Messages) != 201 || v.Messages[200].Content != "more 199" || !strings.HasPrefix(v.Messages[0].Content, "shaped!!") {
		t.Fatalf("the held view after the call: %d messages", len(v.Messages))
	}
	keeper.holds[0].Release()
	if v.Messages != nil {
		t.Fatal("the transforms' view kept its messages after the last hold")
	}
	if len(client.Messages) != 201 {
		t.Fatal("the client's view lost its messages")
	}
}
