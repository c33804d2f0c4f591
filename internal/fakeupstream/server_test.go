package fakeupstream_test

import (
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tidwall/gjson"

	"github.com/shaperproxy/shaperproxy/fixtures"
	"github.com/shaperproxy/shaperproxy/internal/fakeupstream"
	"github.com/shaperproxy/shaperproxy/sse"
)

func reply(content string) fakeupstream.Response {
	return fakeupstream.Response{Reply: &fakeupstream.Reply{Reasoning: "thinking", Content: content}}
}

func contentOf(t *testing.T, resp *http.Response) string {
	t.Helper()
	return gjson.GetBytes(readBody(t, resp.Body), "choices.0.message.content").String()
}

func TestRecordedRequests(t *testing.T) {
	s, ts := newServer(t)
	req, _ := http.NewRequest(http.MethodPost, ts.URL+"/v1/chat/completions?beta=true", strings.NewReader(plainReq))
	req.Header.Set("Authorization", "Bearer sk-test")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	models, err := http.Get(ts.URL + "/v1/models")
	if err != nil {
		t.Fatal(err)
	}
	if b := readBody(t, models.Body); gjson.GetBytes(b, "data.#").Int() < 1 {
		t.Errorf("models: %s", b)
	}
	emb := post(t, nil, nil, ts.URL+"/embeddings", `{"input":"x"}`)
	if b := readBody(t, emb.Body); !gjson.GetBytes(b, "data.0.embedding.0").Exists() {
		t.Errorf("embeddings: %s", b)
	}
	got := s.Requests()
	want := []struct{ method, path, query, body string }{
		{"POST", "/v1/chat/completions", "beta=true", plainReq},
		{"GET", "/v1/models", "", ""},
		{"POST", "/embeddings", "", `{"input":"x"}`},
	}
	if len(got) != len(want) {
		t.Fatalf("got %d requests, want %d", len(got), len(want))
	}
	for i, w := range want {
		g := got[i]
		if g.Method != w.method || g.Path != w.path || g.RawQuery != w.query || string(g.Body) != w.body || g.At.IsZero() {
			t.Errorf("request %d = %s %s?%s %q", i, g.Method, g.Path, g.RawQuery, g.Body)
		}
	}
	if got[0].Header.Get("Authorization") != "Bearer sk-test" {
		t.Error("header not recorded")
	}
	if !got[0].At.Before(got[2].At) && !got[0].At.Equal(got[2].At) {
		t.Error("times out of order")
	}
}

func TestUnknownGetIs404(t *testing.T) {
	_, ts := newServer(t)
	resp, err := http.Get(ts.URL + "/nothing")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusNotFound {
		t.Errorf("status %d", resp.StatusCode)
	}
}

func TestQueueOrderAndReset(t *testing.T) {
	s, ts := newServer(t)
	s.Push(reply("A"), reply("B"))
	s.Push(reply("C"))
	var ids []string
	for _, want := range []string{"A", "B", "C", "ok", "ok"} {
		b := readBody(t, post(t, nil, nil, ts.URL+"/chat/completions", plainReq).Body)
		if got := gjson.GetBytes(b, "choices.0.message.content").String(); got != want {
			t.Errorf("content %q, want %q", got, want)
		}
		ids = append(ids, gjson.GetBytes(b, "id").String())
	}
	if ids[0] == ids[1] || ids[0] != "00000000-0000-4000-8000-000000000001" {
		t.Errorf("ids %v", ids)
	}
	s.Reset()
	if n := len(s.Requests()); n != 0 {
		t.Errorf("%d requests after Reset", n)
	}
	b := readBody(t, post(t, nil, nil, ts.URL+"/chat/completions", plainReq).Body)
	if got := gjson.GetBytes(b, "id").String(); got != ids[0] {
		t.Errorf("id after Reset %q, want %q", got, ids[0])
	}
}

func TestHandlePrecedence(t *testing.T) {
	s, ts := newServer(t)
	s.Push(reply("queued"))
	s.Handle(func(req fakeupstream.Recorded) (fakeupstream.Response, bool) {
		if bytes.Contains(req.Body, []byte("review")) {
			return reply("reviewed"), true
		}
		return fakeupstream.Response{}, false
	})
	tests := []struct{ body, want string }{
		{`{"messages":[{"role":"user","content":"please review"}]}`, "reviewed"},
		{plainReq, "queued"},
		{`{"messages":[{"role":"user","content":"review again"}]}`, "reviewed"},
		{plainReq, "ok"},
	}
	for _, tt := range tests {
		if got := contentOf(t, post(t, nil, nil, ts.URL+"/chat/completions", tt.body)); got != tt.want {
			t.Errorf("%s: got %q, want %q", tt.body, got, tt.want)
		}
	}
	s.Handle(nil)
	s.Push(reply("after"))
	if got := contentOf(t, post(t, nil, nil, ts.URL+"/chat/completions", `{"x":"review"}`)); got != "after" {
		t.Errorf("after Handle(nil): %q", got)
	}
}

func TestRawAndErrorResponses(t *testing.T) {
	missing := fakeupstream.ErrorResponse(http.StatusBadRequest, "Missing `reasoning_content` field in the assistant message at message index 2")
	missing.ContentType = "application/octet-stream"
	tests := []struct {
		name   string
		push   []fakeupstream.Response
		body   string
		status int
		ct     string
		check  string // gjson path that must exist in the body
	}{
		{"error octet-stream", []fakeupstream.Response{missing}, plainReq, 400, "application/octet-stream", "error.message"},
		{"raw default status", []fakeupstream.Response{{Body: []byte(`{"x":1}`)}}, plainReq, 200, "application/json", "x"},
		{"invalid request JSON", []fakeupstream.Response{reply("kept")}, `{"messages":`, 400, "application/json", "error.type"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, ts := newServer(t)
			s.Push(tt.push...)
			resp := post(t, nil, nil, ts.URL+"/chat/completions", tt.body)
			b := readBody(t, resp.Body)
			if resp.StatusCode != tt.status || resp.Header.Get("Content-Type") != tt.ct || !gjson.GetBytes(b, tt.check).Exists() {
				t.Errorf("%d %q %s", resp.StatusCode, resp.Header.Get("Content-Type"), b)
			}
		})
	}
	// The invalid request consumed nothing.
	s, ts := newServer(t)
	s.Push(reply("kept"))
	post(t, nil, nil, ts.URL+"/chat/completions", `not json`)
	if got := contentOf(t, post(t, nil, nil, ts.URL+"/chat/completions", plainReq)); got != "kept" {
		t.Errorf("queue consumed by an invalid request: %q", got)
	}
}

func TestExchangeReplay(t *testing.T) {
	all, err := fixtures.All()
	if err != nil {
		t.Fatal(err)
	}
	s, ts := newServer(t)
	for _, ex := range all {
		t.Run(ex.Name, func(t *testing.T) {
			s.Push(fakeupstream.Response{Exchange: &ex})
			resp := post(t, nil, nil, ts.URL+ex.Path, string(ex.RequestBody))
			if got := readBody(t, resp.Body); !bytes.Equal(got, ex.ResponseBody) {
				t.Errorf("body differs: got %d bytes, want %d", len(got), len(ex.ResponseBody))
			}
			if resp.StatusCode != ex.Status || resp.Header.Get("Content-Type") != ex.ResponseHeader.Get("Content-Type") {
				t.Errorf("status %d Content-Type %q", resp.StatusCode, resp.Header.Get("Content-Type"))
			}
			for k := range ex.ResponseHeader {
				if resp.Header.Get(k) != ex.ResponseHeader.Get(k) {
					t.Errorf("header %s = %q, want %q", k, resp.Header.Get(k), ex.ResponseHeader.Get(k))
				}
			}
		})
	}
}

func TestKeepAlives(t *testing.T) {
	s, ts := newServer(t)
	s.Push(fakeupstream.Response{KeepAlives: 2, Reply: &fakeupstream.Reply{Content: "ok"}})
	evs := mustEvents(t, post(t, nil, nil, ts.URL+"/chat/completions", streamReq).Body)
	if len(evs) < 3 || evs[0].raw != ": keep-alive\n\n" || evs[1].raw != ": keep-alive\n\n" || !evs[0].comment || evs[2].comment {
		t.Errorf("stream keep-alives: %+v", evs[:min(3, len(evs))])
	}
	s.Push(fakeupstream.Response{KeepAlives: 3, Reply: &fakeupstream.Reply{Content: "ok"}})
	b := readBody(t, post(t, nil, nil, ts.URL+"/chat/completions", plainReq).Body)
	if !bytes.HasPrefix(b, []byte("\n\n\n{")) || gjson.GetBytes(bytes.TrimSpace(b), "choices.0.message.content").String() != "ok" {
		t.Errorf("non-stream keep-alives: %q", b[:min(10, len(b))])
	}
}

func TestCutAfter(t *testing.T) {
	ex := loadExchange(t, "openrouter_o3_stream_raw-sse_reasoning-details-encrypted.pydantic-ai.vcr.yaml")
	tests := []struct {
		name string
		resp fakeupstream.Response
		want int
	}{
		{"reply", fakeupstream.Response{CutAfter: 3, Reply: &fakeupstream.Reply{Reasoning: strings.Repeat("r", 80), Content: "ok"}}, 3},
		{"reply gzip", fakeupstream.Response{CutAfter: 2, Gzip: true}, 2},
		{"exchange", fakeupstream.Response{CutAfter: 5, Exchange: &ex}, 5},
		{"beyond the end", fakeupstream.Response{CutAfter: 100, Reply: &fakeupstream.Reply{Content: "ok"}}, 4},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, ts := newServer(t)
			s.Push(tt.resp)
			resp := post(t, nil, noGzipClient(), ts.URL+"/chat/completions", streamReq)
			var r io.Reader = resp.Body
			if tt.resp.Gzip {
				zr, err := gzip.NewReader(resp.Body)
				if err != nil {
					t.Fatal(err)
				}
				r = zr
			}
			evs, err := readEvents(r)
			if err == nil {
				t.Error("no read error after a dropped connection")
			}
			if len(evs) != tt.want {
				t.Errorf("got %d events, want %d", len(evs), tt.want)
			}
			if tt.want < 4 && len(evs) > 0 && evs[len(evs)-1].done {
				t.Error("[DONE] before the cut")
			}
		})
	}
}

func TestCutNonStream(t *testing.T) {
	s, ts := newServer(t)
	s.Push(fakeupstream.Response{CutAfter: 1})
	resp := post(t, nil, nil, ts.URL+"/chat/completions", plainReq)
	b, err := io.ReadAll(resp.Body)
	if err == nil || len(b) == 0 || gjson.ValidBytes(b) {
		t.Errorf("got %d bytes (valid JSON %v), err %v", len(b), gjson.ValidBytes(b), err)
	}
}

func TestStallPauses(t *testing.T) {
	s, ts := newServer(t)
	const stall = 400 * time.Millisecond
	s.Push(fakeupstream.Response{StallAfter: 2, Stall: stall, Reply: &fakeupstream.Reply{Content: "abcdefghijklmnop"}})
	resp := post(t, nil, nil, ts.URL+"/chat/completions", streamReq)
	times := eventTimes(t, resp.Body)
	if len(times) < 4 {
		t.Fatalf("%d events", len(times))
	}
	if gap := times[2].Sub(times[1]); gap < stall*9/10 {
		t.Errorf("gap after event 2: %v, want about %v", gap, stall)
	}
	if gap := times[1].Sub(times[0]); gap > stall*3/4 {
		t.Errorf("gap after event 1: %v", gap)
	}
}

func TestStallHonoursCancellation(t *testing.T) {
	s := fakeupstream.New()
	ts := httptest.NewServer(s)
	s.Push(fakeupstream.Response{StallAfter: 1, Stall: time.Minute})
	ctx, cancel := context.WithCancel(t.Context())
	resp := post(t, ctx, nil, ts.URL+"/chat/completions", streamReq)
	buf := make([]byte, 1)
	if _, err := resp.Body.Read(buf); err != nil { // the first event arrives
		t.Fatal(err)
	}
	cancel()
	start := time.Now()
	ts.Close() // waits for the handler
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("handler kept stalling %v after cancellation", d)
	}
}

func TestGzip(t *testing.T) {
	tests := []struct {
		name string
		req  string
	}{
		{"stream", streamReq},
		{"json", plainReq},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, ts := newServer(t)
			rp := fakeupstream.Reply{Reasoning: "zip", Content: "ok", Usage: &fakeupstream.Usage{PromptTokens: 9, CompletionTokens: 2}}
			s.Push(fakeupstream.Response{Gzip: true, Reply: &rp})
			resp := post(t, nil, noGzipClient(), ts.URL+"/chat/completions", tt.req)
			if resp.Header.Get("Content-Encoding") != "gzip" {
				t.Fatalf("Content-Encoding %q", resp.Header.Get("Content-Encoding"))
			}
			zr, err := gzip.NewReader(resp.Body)
			if err != nil {
				t.Fatal(err)
			}
			b := readBody(t, zr)
			want := fakeupstream.RenderJSON(rp)
			if tt.req == streamReq {
				want = fakeupstream.RenderStream([]byte(streamReq), rp)
			}
			if !bytes.Equal(b, want) {
				t.Errorf("decompressed\n%s\nwant\n%s", b, want)
			}
		})
	}
}

// TestPerEventFlush checks that each event reaches the client as it is
// written, not when the answer ends.
func TestPerEventFlush(t *testing.T) {
	for _, gz := range []bool{false, true} {
		t.Run(fmt.Sprint("gzip=", gz), func(t *testing.T) {
			s, ts := newServer(t)
			const delay = 50 * time.Millisecond
			s.Push(fakeupstream.Response{EventDelay: delay, Gzip: gz, Reply: &fakeupstream.Reply{Content: "0123456789abcdefghijklmnopqrstuv"}})
			start := time.Now()
			resp := post(t, nil, noGzipClient(), ts.URL+"/chat/completions", streamReq)
			var r io.Reader = resp.Body
			if gz {
				zr, err := gzip.NewReader(resp.Body)
				if err != nil {
					t.Fatal(err)
				}
				r = zr
			}
			times := eventTimes(t, r)
			// 1 first + 4 content + 1 final + [DONE] = 7 events, 6 delays.
			if len(times) != 7 {
				t.Fatalf("%d events", len(times))
			}
			// Unflushed events would all arrive together at the end.
			first, last := times[0].Sub(start), times[len(times)-1].Sub(start)
			if last-first < 5*delay {
				t.Errorf("first event at %v, last at %v: not flushed per event", first, last)
			}
		})
	}
}

func TestConcurrentRequests(t *testing.T) {
	s, ts := newServer(t)
	const n = 40
	for i := range n {
		s.Push(reply(fmt.Sprint(i)))
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	seen := map[string]bool{}
	for range n {
		wg.Go(func() {
			resp, err := http.Post(ts.URL+"/chat/completions", "application/json", strings.NewReader(streamReq))
			if err != nil {
				t.Error(err)
				return
			}
			defer resp.Body.Close()
			evs, err := readEvents(resp.Body)
			if err != nil || len(evs) == 0 {
				t.Error(err)
				return
			}
			mu.Lock()
			seen[gjson.Get(evs[0].data, "id").String()] = true
			mu.Unlock()
		})
	}
	wg.Wait()
	if len(seen) != n || len(s.Requests()) != n {
		t.Errorf("%d distinct ids, %d requests, want %d", len(seen), len(s.Requests()), n)
	}
}

func TestStart(t *testing.T) {
	s := fakeupstream.New()
	base, stop, err := s.Start("")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(base, "http://127.0.0.1:") {
		t.Errorf("base URL %q", base)
	}
	if got := contentOf(t, post(t, nil, nil, base+"/chat/completions", plainReq)); got != "ok" {
		t.Errorf("content %q", got)
	}
	stop()
	stop() // a second call is harmless
	c := &http.Client{Transport: &http.Transport{}}
	if resp, err := c.Post(base+"/chat/completions", "application/json", strings.NewReader(plainReq)); err == nil {
		resp.Body.Close()
		t.Error("server still answering after close")
	}
}

// eventTimes reads a stream and returns the arrival time of each event.
func eventTimes(t *testing.T, r io.Reader) []time.Time {
	t.Helper()
	rd := sse.NewReader(r)
	var times []time.Time
	for {
		ev, err := rd.Next()
		if errors.Is(err, io.EOF) {
			return times
		}
		if err != nil {
			t.Fatal(err)
		}
		if !ev.Comment {
			times = append(times, time.Now())
		}
	}
}

func noGzipClient() *http.Client {
	return &http.Client{Transport: &http.Transport{DisableCompression: true}}
}

func loadExchange(t *testing.T, file string) fixtures.Exchange {
	t.Helper()
	exs, err := fixtures.Load(file)
	if err != nil {
		t.Fatal(err)
	}
	return exs[0]
}
