package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/shaperproxy/shaperproxy/internal/config"
	"github.com/shaperproxy/shaperproxy/internal/ledger"
	"github.com/shaperproxy/shaperproxy/internal/testenv"
	"github.com/tidwall/sjson"
)

// The finishers (masked review, deliberate tool) against an upstream that
// fails them: the client must get a clear failure, never a half revision
// closed as whole, a call to the proxy's own tool, or a tool-calls turn
// with no call; what they assemble stays bounded. The upstream here is a
// raw loopback server that writes exact bytes (a cut mid-event needs
// one), one request per connection.

// rawUpstream answers each request with handle(conn, kind).
func rawUpstream(t *testing.T, handle func(c net.Conn, kind string)) string {
	t.Helper()
	return testenv.ServeConns(t, func(c net.Conn) {
		req, err := http.ReadRequest(bufio.NewReader(c))
		if err != nil {
			return
		}
		body, _ := io.ReadAll(req.Body)
		handle(c, faultKind(body))
	})
}

// faultKind tells the proxy's requests apart by their bodies.
func faultKind(body []byte) string {
	switch {
	case isChild(body):
		return "review-child"
	case isContinuation(body):
		return "review-continuation"
	case branchRole(body) != "":
		return "branch"
	case bytes.Contains(body, []byte(`"tool_call_id":"call_delib"`)):
		return "deliberate-continuation"
	}
	return "primary"
}

const (
	sseHeader   = "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\nTransfer-Encoding: chunked\r\n\r\n"
	lastChunk   = "0\r\n\r\n"
	roleChunk   = `{"id":"c","object":"chat.completion.chunk","created":1,"model":"deepseek-reasoner","choices":[{"index":0,"delta":{"role":"assistant","content":""},"finish_reason":null}]}`
	textChunk   = `{"id":"c","object":"chat.completion.chunk","created":1,"model":"deepseek-reasoner","choices":[{"index":0,"delta":{"content":"Fixed the layout."},"finish_reason":null}]}`
	stopChunk   = `{"id":"c","object":"chat.completion.chunk","created":1,"model":"deepseek-reasoner","choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}`
	contChunk   = `{"id":"k","object":"chat.completion.chunk","created":2,"model":"deepseek-reasoner","choices":[{"index":0,"delta":{"content":"Also checked cmd/report."},"finish_reason":null}]}`
	delibArgs   = `{\"goal\":\"g\",\"incumbent\":\"i\",\"branches\":[{\"role\":\"independent-alternative\"}]}`
	delibStart  = `{"id":"c","object":"chat.completion.chunk","created":1,"model":"deepseek-reasoner","choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"call_delib","type":"function","function":{"name":"deliberate","arguments":""}}]},"finish_reason":null}]}`
	delibFinish = `{"id":"c","object":"chat.completion.chunk","created":1,"model":"deepseek-reasoner","choices":[{"index":0,"delta":{},"finish_reason":"tool_calls"}]}`
)

func chunked(s string) string  { return fmt.Sprintf("%x\r\n%s\r\n", len(s), s) }
func event(data string) string { return "data: " + data + "\n\n" }

func jsonAnswer(status int, body string) string {
	return fmt.Sprintf("HTTP/1.1 %d X\r\nContent-Type: application/json\r\nConnection: close\r\nContent-Length: %d\r\n\r\n%s", status, len(body), body)
}

// packetAnswer is a child's non-stream answer holding packet.
func packetAnswer(packet string) string {
	b, _ := sjson.Set(`{"id":"r","object":"chat.completion","model":"deepseek-reasoner","choices":[{"index":0,"message":{"role":"assistant","content":""},"finish_reason":"stop"}]}`, "choices.0.message.content", packet)
	return jsonAnswer(200, b)
}

// delibStream is a streamed answer that calls deliberate alone.
func delibStream() string {
	args := `{"id":"c","object":"chat.completion.chunk","created":1,"model":"deepseek-reasoner","choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"` + delibArgs + `"}}]},"finish_reason":null}]}`
	return event(roleChunk) + event(delibStart) + event(args) + event(delibFinish) + event("[DONE]")
}

var faultTurn atomic.Int32

// faultRequest is a request whose open turn made a tool call (the review
// looks at it) and that declares tools (the deliberate tool is added).
func faultRequest(stream bool) []byte {
	n := faultTurn.Add(1)
	return fmt.Appendf(nil, `{"model":"deepseek-reasoner","stream":%v,"messages":[{"role":"system","content":"sys %d"},{"role":"user","content":"fix it %d"},{"role":"assistant","content":"","tool_calls":[{"id":"c1","type":"function","function":{"name":"read_file","arguments":"{\"path\":\"a.go\"}"}}]},{"role":"tool","tool_call_id":"c1","content":"package a"}],"tools":%s}`, stream, n, n, readFileTool)
}

// faultStack is the default stack with the review and the deliberate tool
// on, in front of upstream.
func faultStack(t *testing.T, upstream string, mod func(*config.Config)) (url string, st *stack, dataDir string) {
	t.Helper()
	c := config.Default()
	c.DataDir = t.TempDir()
	c.Routes = c.WithDefaultRoute(upstream)
	withReviewAndDeliberate(&c)
	if mod != nil {
		mod(&c)
	}
	st, err := build(c, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(st)
	srv.Config.ConnContext = st.ConnContext
	srv.Start()
	t.Cleanup(func() { srv.Close(); st.Close() })
	return srv.URL + "/v1", st, c.DataDir
}

type faultResult struct {
	status int
	body   string
	err    error // reading the body
}

func faultPost(t *testing.T, url string, body []byte) faultResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "POST", url+"/chat/completions", bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	resp, err := (&http.Transport{DisableCompression: true}).RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return faultResult{resp.StatusCode, string(b), err}
}

// TestDeliberateFailuresFailTheCall: when the deliberate tool cannot
// finish a turn — its continuation cut mid-event or answering 500, the
// model calling deliberate round after round, a call whose arguments
// outgrow what the proxy holds — the client's stream is cut (a read
// error, as for a cut upstream stream), and a non-stream call gets a 502
// in the OpenAI error shape. Before, the client got a cut continuation
// closed as whole, the proxy's own tool call (a tool it never declared),
// or a tool-calls turn with no call.
func TestDeliberateFailuresFailTheCall(t *testing.T) {
	longArgs := func() string {
		var b strings.Builder
		b.WriteString(event(roleChunk) + event(delibStart))
		frag := event(`{"id":"c","object":"chat.completion.chunk","created":1,"model":"deepseek-reasoner","choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"` + strings.Repeat("a", 32<<10) + `"}}]},"finish_reason":null}]}`)
		for range 140 { // 4.5 MB: over the 4 MiB the proxy holds
			b.WriteString(frag)
		}
		return b.String() + event(delibFinish) + event("[DONE]")
	}
	cases := []struct {
		name    string
		primary string
		cont    string
	}{
		{"continuation cut mid-event", delibStream(), sseHeader + chunked(event(roleChunk)+event(contChunk)+`data: {"id`)},
		{"continuation answers 500", delibStream(), jsonAnswer(500, `{"error":{"message":"overloaded"}}`)},
		{"continuation has no choice", delibStream(), sseHeader + lastChunk},
		{"the model keeps calling", delibStream(), sseHeader + chunked(delibStream()) + lastChunk},
		{"arguments over the hold", longArgs(), jsonAnswer(500, `{}`)},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			up := rawUpstream(t, func(c net.Conn, kind string) {
				switch kind {
				case "primary":
					_, _ = c.Write([]byte(sseHeader + chunked(tc.primary) + lastChunk))
				case "branch":
					_, _ = c.Write([]byte(packetAnswer(`{"role":"independent-alternative","status":"no_update"}`)))
				case "deliberate-continuation":
					_, _ = c.Write([]byte(tc.cont))
				default:
					_, _ = c.Write([]byte(packetAnswer(packetNoUpdate)))
				}
			})
			url, _, _ := faultStack(t, up, nil)
			res := faultPost(t, url, faultRequest(true))
			if res.err == nil {
				t.Errorf("the client read a whole stream:\n%.600s", res.body)
			}
			if strings.Contains(res.body, `"name":"deliberate"`) {
				t.Errorf("the client got a call to the proxy's own tool")
			}
			if strings.Contains(res.body, `"finish_reason":"tool_calls"`) || strings.Contains(res.body, "[DONE]") {
				t.Errorf("the client got an end of turn:\n%.600s", res.body)
			}
		})
	}
	t.Run("non-stream continuation answers 500", func(t *testing.T) {
		up := rawUpstream(t, func(c net.Conn, kind string) {
			switch kind {
			case "primary":
				_, _ = c.Write([]byte(jsonAnswer(200, `{"id":"c","object":"chat.completion","created":1,"model":"deepseek-reasoner","choices":[{"index":0,"message":{"role":"assistant","content":null,"tool_calls":[{"id":"call_delib","type":"function","function":{"name":"deliberate","arguments":"`+delibArgs+`"}}]},"finish_reason":"tool_calls"}]}`)))
			case "branch":
				_, _ = c.Write([]byte(packetAnswer(`{"role":"independent-alternative","status":"no_update"}`)))
			default:
				_, _ = c.Write([]byte(jsonAnswer(500, `{"error":{"message":"overloaded"}}`)))
			}
		})
		url, _, _ := faultStack(t, up, func(c *config.Config) { c.Deliberate.KeepAlive = time.Minute })
		res := faultPost(t, url, faultRequest(false))
		if res.status != http.StatusBadGateway || !strings.Contains(res.body, `"finisher_failed"`) || strings.Contains(res.body, "tool_calls") {
			t.Fatalf("client got %d %.400s, want a 502 finisher_failed error", res.status, res.body)
		}
	})
}

// TestReviewContinuationCutIsCut: a review continuation cut by its
// upstream after part of the revision went out cuts the client's stream;
// before, the proxy closed it with the draft's finish chunk and [DONE],
// and the client took the half revision for a whole one.
func TestReviewContinuationCutIsCut(t *testing.T) {
	up := rawUpstream(t, func(c net.Conn, kind string) {
		switch kind {
		case "primary":
			_, _ = c.Write([]byte(sseHeader + chunked(event(roleChunk)+event(textChunk)+event(stopChunk)+event("[DONE]")) + lastChunk))
		case "review-child":
			_, _ = c.Write([]byte(packetAnswer(packetUpdate)))
		case "review-continuation":
			_, _ = c.Write([]byte(sseHeader + chunked(event(roleChunk)+event(contChunk)+`data: {"id`)))
		}
	})
	url, _, _ := faultStack(t, up, nil)
	res := faultPost(t, url, faultRequest(true))
	if res.err == nil || strings.Contains(res.body, "[DONE]") || strings.Contains(res.body, `"finish_reason":"stop"`) {
		t.Fatalf("the client read %v and an end of turn: %v\n%.600s", res.err, strings.Contains(res.body, "[DONE]"), res.body)
	}
	if !strings.Contains(res.body, "Also checked cmd/report.") {
		t.Fatalf("the revision's first part did not stream:\n%.600s", res.body)
	}
}

// TestContinuationAssemblyBounded: a streamed continuation of 96 MB (the
// review's and the deliberate tool's) streams to the client whole, while
// what the proxy assembles of it to record stays bounded: before, the
// heap grew by the continuation's size several times over and the ledger
// recorded all of it (this test on that code: 477 and 557 MB of heap
// growth, a state.db of 112 and 208 MB).
func TestContinuationAssemblyBounded(t *testing.T) {
	if testing.Short() {
		t.Skip("streams 96 MB twice")
	}
	const total = 96 << 20
	long := func(c net.Conn) {
		bw := bufio.NewWriterSize(c, 1<<20)
		_, _ = bw.WriteString(sseHeader)
		piece := strings.Repeat("z", 64<<10)
		e := chunked(event(`{"id":"k","object":"chat.completion.chunk","created":2,"model":"deepseek-reasoner","choices":[{"index":0,"delta":{"content":"` + piece + `"},"finish_reason":null}]}`))
		for sent := 0; sent < total; sent += len(piece) {
			if _, err := bw.WriteString(e); err != nil {
				return
			}
		}
		_, _ = bw.WriteString(chunked(event(stopChunk)+event("[DONE]")) + lastChunk)
		_ = bw.Flush()
	}
	for _, which := range []string{"review", "deliberate"} {
		t.Run(which, func(t *testing.T) {
			up := rawUpstream(t, func(c net.Conn, kind string) {
				switch kind {
				case "primary":
					if which == "review" {
						_, _ = c.Write([]byte(sseHeader + chunked(event(roleChunk)+event(textChunk)+event(stopChunk)+event("[DONE]")) + lastChunk))
					} else {
						_, _ = c.Write([]byte(sseHeader + chunked(delibStream()) + lastChunk))
					}
				case "review-child":
					_, _ = c.Write([]byte(packetAnswer(packetUpdate)))
				case "branch":
					_, _ = c.Write([]byte(packetAnswer(`{"role":"independent-alternative","status":"no_update"}`)))
				case "review-continuation", "deliberate-continuation":
					long(c)
				}
			})
			url, st, dataDir := faultStack(t, up, func(c *config.Config) {
				c.Review.Timeout = 5 * time.Minute
				c.Capture.Enabled = false // the capture's own bounded queue is not what is measured
			})
			runtime.GC()
			var ms runtime.MemStats
			runtime.ReadMemStats(&ms)
			base := ms.HeapInuse
			var peak atomic.Uint64
			stop := make(chan struct{})
			go func() {
				var ms runtime.MemStats
				for {
					select {
					case <-stop:
						return
					case <-time.After(50 * time.Millisecond):
					}
					runtime.ReadMemStats(&ms)
					if ms.HeapInuse > peak.Load() {
						peak.Store(ms.HeapInuse)
					}
				}
			}()
			req, _ := http.NewRequest("POST", url+"/chat/completions", bytes.NewReader(faultRequest(true)))
			resp, err := (&http.Transport{DisableCompression: true}).RoundTrip(req)
			if err != nil {
				t.Fatal(err)
			}
			n, err := io.Copy(io.Discard, resp.Body) // the client keeps nothing: the heap is the proxy's
			resp.Body.Close()
			close(stop)
			if err != nil || n < total {
				t.Fatalf("the client read %d MB, %v; want the whole revision", n>>20, err)
			}
			if grew := int64(peak.Load()) - int64(base); grew > 3*total/2+64<<20 {
				t.Errorf("the heap grew by %d MB for a %d MB continuation", grew>>20, total>>20)
			}
			st.Close()
			if fi, err := os.Stat(filepath.Join(dataDir, ledger.FileName)); err == nil && fi.Size() > 16<<20 {
				t.Errorf("the ledger holds %d MB after a %d MB continuation", fi.Size()>>20, total>>20)
			}
		})
	}
}
