package proxy

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httptrace"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/shaperproxy/shaperproxy/internal/testenv"
	"github.com/shaperproxy/shaperproxy/sse"
	"github.com/tidwall/gjson"
)

// waitLines waits until log holds n lines whose message starts with
// prefix, and returns them.
func waitLines(t *testing.T, log *testenv.Log, prefix string, n int) []map[string]slog.Value {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		if lines := log.Lines(prefix); len(lines) >= n {
			return lines
		}
	}
	t.Fatalf("fewer than %d %q lines in the log:\n%s", n, prefix, strings.Join(log.Rendered(), "\n"))
	return nil
}

// metricsText returns the proxy's /metrics page.
func metricsText(t *testing.T, px string) string {
	t.Helper()
	_, body := do(t, rawClient(), "GET", px+"/metrics", nil, nil)
	return string(body)
}

// metricsWhen reads the proxy's /metrics page until ready says it holds
// what a call records once its client has the answer (at most five
// seconds), and returns the last page read.
func metricsWhen(t *testing.T, px string, ready func(page string) bool) string {
	t.Helper()
	var page string
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		if page = metricsText(t, px); ready(page) {
			break
		}
	}
	return page
}

// metricValue returns the value of the sample whose name and labels
// start the line (labels in the exposition's sorted order); -1 when there
// is none.
func metricValue(text, sample string) float64 {
	for _, line := range strings.Split(text, "\n") {
		if rest, ok := strings.CutPrefix(line, sample+" "); ok {
			v, err := strconv.ParseFloat(strings.TrimSpace(rest), 64)
			if err == nil {
				return v
			}
		}
	}
	return -1
}

// TestCallIDOnEveryResponse: a forwarded response carries the proxy's call
// id (replacing one from a proxy behind it), the one the observers and
// the log line have; the proxy's own error answers carry it in the header
// and in the OpenAI error body, and a refusal's id is in its log line.
func TestCallIDOnEveryResponse(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set(CallIDHeader, "0123456789abcdef")
		w.Header().Set("Content-Type", "text/event-stream")
		fmt.Fprint(w, "data: {}\n\ndata: [DONE]\n\n")
	}))
	defer up.Close()
	obs, log := &callRecorder{}, &testenv.Log{}
	_, px := newTestProxy(t, up.URL, func(o *Options) { o.Observers, o.Logger = []Observer{obs}, slog.New(log) })
	resp, _ := do(t, rawClient(), "POST", px.URL+"/v1/chat/completions", []byte(chatBody), nil)
	obs.waitEnd(t)
	id := resp.Header.Get(CallIDHeader)
	if !regexp.MustCompile(`^[0-9a-f]{16}$`).MatchString(id) || id == "0123456789abcdef" || id != obs.calls[0].ID {
		t.Fatalf("call id header %q, observer's call %q", id, obs.calls[0].ID)
	}
	if got := waitLines(t, log, "call", 1)[0]["call"].String(); got != id {
		t.Fatalf("log line call=%q, header %q", got, id)
	}

	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	dead := ln.Addr().String()
	ln.Close()
	obs2 := &callRecorder{}
	_, px2 := newTestProxy(t, "http://"+dead, func(o *Options) { o.Observers, o.Logger = []Observer{obs2}, slog.New(log) })
	resp, body := do(t, rawClient(), "POST", px2.URL+"/v1/chat/completions", []byte(chatBody), nil)
	obs2.waitEnd(t)
	id = resp.Header.Get(CallIDHeader)
	if resp.StatusCode != http.StatusBadGateway || id == "" || gjson.GetBytes(body, "error.call_id").String() != id || id != obs2.calls[0].ID {
		t.Fatalf("unreachable upstream: %d, header %q, body %s, call %q", resp.StatusCode, id, body, obs2.calls[0].ID)
	}

	resp, body = do(t, rawClient(), "GET", px.URL+"/v1/models", nil, http.Header{"Origin": {"https://evil.example"}})
	id = resp.Header.Get(CallIDHeader)
	if resp.StatusCode != http.StatusForbidden || id == "" || gjson.GetBytes(body, "error.call_id").String() != id {
		t.Fatalf("refusal: %d, header %q, body %s", resp.StatusCode, id, body)
	}
	if got := waitLines(t, log, "request refused", 1)[0]["call"].String(); got != id {
		t.Fatalf("refusal logged as %q, answered %q", got, id)
	}
}

// lockedBuffer is a bytes.Buffer for a log handler written from several
// goroutines.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// jsonCallLines returns the "call" lines of a JSON log.
func jsonCallLines(t *testing.T, log string) []map[string]any {
	t.Helper()
	var out []map[string]any
	for _, line := range strings.Split(strings.TrimSpace(log), "\n") {
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatalf("not a JSON line: %q", line)
		}
		if m["msg"] == "call" {
			out = append(out, m)
		}
	}
	return out
}

// retryOnce is a transform that marks the body and asks for a retry
// without it when the upstream answers 400.
type retryOnce struct{}

func (retryOnce) TransformRequest(_ context.Context, call *Call, body []byte) ([]byte, error) {
	if call.Retry {
		return body, nil
	}
	return bytes.Replace(body, []byte(`"hi"`), []byte(`"marked"`), 1), nil
}

func (retryOnce) RetryWithout(*Call, int, []byte) bool { return true }

// internalCaller makes an internal call on behalf of every chat request
// whose model is "parent".
type internalCaller struct{}

func (internalCaller) TransformRequest(ctx context.Context, call *Call, body []byte) ([]byte, error) {
	if call.Model == "parent" && !call.Internal {
		_, _, _ = call.DoRead(ctx, "test-purpose", []byte(`{"model":"child","messages":[]}`), 1<<20)
	}
	return body, nil
}

// TestCallLogLine: one line per call with the fields an operator filters
// on; the path's key-like parameters (";key=", "?key=") are redacted; err
// appears only on failure, retry only on a retried call, internal, parent
// and purpose only on an internal call.
func TestCallLogLine(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		if bytes.Contains(body, []byte("marked")) {
			http.Error(w, `{"error":"no"}`, http.StatusBadRequest)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprint(w, `{"ok":true}`)
	}))
	defer up.Close()
	buf := &lockedBuffer{}
	obs := &recordingObserver{}
	_, px := newTestProxy(t, up.URL, func(o *Options) {
		o.Logger = slog.New(slog.NewJSONHandler(buf, nil))
		o.Transforms = []RequestTransform{retryOnce{}, internalCaller{}}
		o.Observers = []Observer{obs}
	})
	do(t, rawClient(), "GET", px.URL+"/v1/models;key=sk-matrix-secret?api_key=sk-query-secret&limit=5", nil, nil)
	do(t, rawClient(), "POST", px.URL+"/v1/chat/completions", []byte(`{"model":"m","messages":[{"role":"user","content":"hi"}]}`), nil)
	do(t, rawClient(), "POST", px.URL+"/v1/chat/completions", []byte(`{"model":"parent","messages":[]}`), nil)
	obs.waitEnds(t, 5) // models, retried + retry, child, parent
	var lines []map[string]any
	for deadline := time.Now().Add(5 * time.Second); len(lines) < 4 && time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		lines = jsonCallLines(t, buf.String())
	}
	if len(lines) != 4 {
		t.Fatalf("%d call lines, want 4:\n%s", len(lines), buf)
	}
	if strings.Contains(buf.String(), "secret") {
		t.Fatalf("a key reached the log:\n%s", buf)
	}
	for _, l := range lines {
		for _, k := range []string{"call", "route", "model", "method", "path", "stream", "status", "outcome", "duration_ms", "bytes", "events"} {
			if _, ok := l[k]; !ok {
				t.Errorf("line lacks %q: %v", k, l)
			}
		}
		if _, ok := l["err"]; ok {
			t.Errorf("a successful call logs err: %v", l)
		}
	}
	byModel := map[string]map[string]any{}
	for _, l := range lines {
		byModel[l["model"].(string)] = l
	}
	if p := byModel[""]["path"].(string); !strings.Contains(p, "/v1/models;key=%5BREDACTED") || !strings.Contains(p, "api_key=%5BREDACTED") || !strings.Contains(p, "limit=5") {
		t.Errorf("path %q: want the keys redacted, the rest kept", p)
	}
	if byModel["m"]["retry"] != true || byModel[""]["retry"] != nil {
		t.Errorf("retry: %v on the retried call, %v on another", byModel["m"]["retry"], byModel[""]["retry"])
	}
	child, parent := byModel["child"], byModel["parent"]
	if child["internal"] != true || child["purpose"] != "test-purpose" || child["parent"] != parent["call"] || parent["internal"] != nil {
		t.Errorf("internal call: %v; parent %v", child, parent)
	}
}

// TestCallLogLineError: a failed call is a warning with err.
func TestCallLogLineError(t *testing.T) {
	var buf *lockedBuffer
	var px *httptest.Server
	for {
		ln, _ := net.Listen("tcp", "127.0.0.1:0")
		dead := ln.Addr().String()
		ln.Close()
		buf = &lockedBuffer{}
		_, px = newTestProxy(t, "http://"+dead, func(o *Options) { o.Logger = slog.New(slog.NewJSONHandler(buf, nil)) })
		if px.Listener.Addr().String() != dead {
			break
		}
		// The system gave the closed port to the proxy's own listener:
		// that is another refusal (the loop check); pick another port.
	}
	do(t, rawClient(), "POST", px.URL+"/v1/chat/completions", []byte(chatBody), nil)
	var lines []map[string]any
	for deadline := time.Now().Add(5 * time.Second); len(lines) < 1 && time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		lines = jsonCallLines(t, buf.String())
	}
	if len(lines) != 1 || lines[0]["level"] != "WARN" || lines[0]["err"] != "connection refused" || lines[0]["outcome"] != "upstream_error" {
		t.Fatalf("lines %v", lines)
	}
}

// TestTunnelLineAndMetrics: every CONNECT and proxy-form request is one
// "tunnel" line (host, mode, via, bytes each way, duration) and is
// counted in shaperproxy_tunnels_total, its bytes in
// shaperproxy_tunnel_bytes_total: tunnelled, intercepted and refused.
func TestTunnelLineAndMetrics(t *testing.T) {
	up := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, "direct")
	}))
	defer up.Close()
	plain := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "plain") }))
	defer plain.Close()
	log := &testenv.Log{}
	_, px := newTestProxy(t, up.URL, func(o *Options) { o.Tunnel, o.Logger = []string{"127.0.0.1"}, slog.New(log) })
	pxURL, _ := url.Parse(px.URL)
	tr := up.Client().Transport.(*http.Transport).Clone()
	tr.Proxy = http.ProxyURL(pxURL)
	if _, body := do(t, &http.Client{Transport: tr}, "GET", up.URL+"/x", nil, nil); string(body) != "direct" {
		t.Fatalf("tunnelled: %q", body)
	}
	tr.CloseIdleConnections() // the tunnel ends
	if _, body := do(t, &http.Client{Transport: &http.Transport{Proxy: http.ProxyURL(pxURL)}}, "GET", plain.URL+"/y", nil, nil); string(body) != "plain" {
		t.Fatalf("proxy-form: %q", body)
	}
	resp, _, _, _ := rawExchange(t, pxURL.Host, "CONNECT elsewhere.example:443 HTTP/1.1\r\nHost: elsewhere.example:443\r\n\r\n")
	if resp.StatusCode != http.StatusForbidden || resp.Header.Get(CallIDHeader) == "" {
		t.Fatalf("refused CONNECT: %d, id %q", resp.StatusCode, resp.Header.Get(CallIDHeader))
	}
	lines := waitLines(t, log, "tunnel", 3)
	byVia := map[string]map[string]slog.Value{}
	for _, l := range lines {
		byVia[l["mode"].String()+"/"+l["via"].String()] = l
	}
	upHost := strings.TrimPrefix(up.URL, "https://")
	if l := byVia["tunnelled/connect"]; l == nil || l["host"].String() != upHost || l["bytes_up"].Int64() == 0 || l["bytes_down"].Int64() == 0 {
		t.Errorf("tunnelled CONNECT line: %v", l)
	}
	if l := byVia["tunnelled/proxy-form"]; l == nil || l["bytes_down"].Int64() != int64(len("plain")) {
		t.Errorf("proxy-form line: %v", l)
	}
	if l := byVia["refused/connect"]; l == nil || l["reason"].String() != "target_not_allowed" || l["host"].String() != "elsewhere.example:443" || l["id"].String() != resp.Header.Get(CallIDHeader) {
		t.Errorf("refused line: %v", l)
	}
	m := metricsText(t, px.URL)
	for _, s := range []string{
		`shaperproxy_tunnels_total{host="127.0.0.1",mode="tunnelled",via="connect"}`,
		`shaperproxy_tunnels_total{host="127.0.0.1",mode="tunnelled",via="proxy-form"}`,
		`shaperproxy_tunnels_total{host="elsewhere.example",mode="refused",via="connect"}`,
	} {
		if metricValue(m, s) != 1 {
			t.Errorf("%s = %v, want 1", s, metricValue(m, s))
		}
	}
	if metricValue(m, `shaperproxy_tunnel_bytes_total{direction="client",mode="tunnelled"}`) <= 0 || metricValue(m, `shaperproxy_tunnels_open{mode="tunnelled"}`) != 0 {
		t.Errorf("tunnel bytes or open tunnels wrong:\n%s", grepLines([]byte(m), "shaperproxy_tunnel"))
	}
}

// TestInterceptedTunnelLine: an intercepted CONNECT is one tunnel line
// with the number of calls it served.
func TestInterceptedTunnelLine(t *testing.T) {
	log := &testenv.Log{}
	c, upURL := mitmRig(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "{}") }), testCA(t), func(o *Options) { o.Logger = slog.New(log) })
	do(t, c, "POST", upURL+"/v1/chat/completions", []byte(chatBody), nil)
	do(t, c, "POST", upURL+"/v1/chat/completions", []byte(chatBody), nil)
	c.CloseIdleConnections()
	l := waitLines(t, log, "tunnel", 1)[0]
	if l["mode"].String() != "intercepted" || l["via"].String() != "connect" || l["requests"].Int64() != 2 || l["bytes_up"].Int64() == 0 || l["bytes_down"].Int64() == 0 {
		t.Fatalf("intercepted line: %v", l)
	}
	if calls := waitLines(t, log, "call", 2); calls[0]["route"].String() != "127.0.0.1" {
		t.Fatalf("calls inside the tunnel: %v", calls)
	}
}

// TestTimingMetrics: time to the response header, to the first body byte
// and to the first token (the first delta with content or reasoning text,
// not the role-only chunk before it), and the stream's duration, by route
// and model; duration buckets reach 30 minutes.
func TestTimingMetrics(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rc := http.NewResponseController(w)
		w.Header().Set("Content-Type", "text/event-stream")
		w.WriteHeader(200)
		_ = rc.Flush()
		time.Sleep(100 * time.Millisecond)
		fmt.Fprint(w, "data: {\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"\"}}]}\n\n")
		_ = rc.Flush()
		time.Sleep(200 * time.Millisecond)
		fmt.Fprint(w, "data: {\"choices\":[{\"index\":0,\"delta\":{\"reasoning_content\":\"So\"}}]}\n\ndata: [DONE]\n\n")
	}))
	defer up.Close()
	obs := &recordingObserver{}
	_, px := newTestProxy(t, up.URL, func(o *Options) { o.Observers = []Observer{obs} })
	do(t, rawClient(), "POST", px.URL+"/v1/chat/completions", []byte(chatBody), nil)
	obs.waitEnd(t)
	labels := `{model="deepseek-reasoner",route="default"}`
	m := metricsWhen(t, px.URL, func(m string) bool { return metricValue(m, "shaperproxy_stream_duration_seconds_count"+labels) == 1 })
	header := metricValue(m, "shaperproxy_upstream_header_seconds_sum"+labels)
	first := metricValue(m, "shaperproxy_time_to_first_byte_seconds_sum"+labels)
	token := metricValue(m, "shaperproxy_time_to_first_token_seconds_sum"+labels)
	stream := metricValue(m, "shaperproxy_stream_duration_seconds_sum"+labels)
	client := metricValue(m, "shaperproxy_client_first_byte_seconds_sum"+labels)
	if !(header >= 0 && header <= first && first >= 0.1 && token >= 0.3 && first < token && stream >= token-header-0.001) {
		t.Fatalf("header %v, first byte %v, first token %v, stream %v", header, first, token, stream)
	}
	// The stream's header goes to the client with its first event (the
	// role-only chunk), not before it nor with the first token.
	if !(client >= first && client < token) {
		t.Fatalf("first byte to the client %v, from the upstream %v, first token %v", client, first, token)
	}
	if metricValue(m, `shaperproxy_request_duration_seconds_bucket{model="deepseek-reasoner",route="default",le="1800"}`) != 1 {
		t.Fatalf("no 30-minute bucket:\n%s", grepLines([]byte(m), "shaperproxy_request_duration_seconds_bucket"))
	}
}

// TestClientFirstByteMetric: the answer's first bytes flushed to the
// client are timed from the request: a non-stream body that comes 100 ms
// after its header goes out when it comes (after the upstream's header,
// before the call's end), once a call; an answer the proxy makes itself
// (the upstream unreachable) is not counted.
func TestClientFirstByteMetric(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(200)
		_ = http.NewResponseController(w).Flush()
		time.Sleep(100 * time.Millisecond)
		fmt.Fprint(w, `{"choices":[{"message":{"role":"assistant","content":"ok"}}]}`)
	}))
	defer up.Close()
	_, px := newTestProxy(t, up.URL, nil)
	for range 2 {
		if resp, body := do(t, rawClient(), "POST", px.URL+"/v1/chat/completions", []byte(chatBody), nil); resp.StatusCode != 200 || !strings.Contains(string(body), "ok") {
			t.Fatalf("status %d: %s", resp.StatusCode, body)
		}
	}
	labels := `{model="deepseek-reasoner",route="default"}`
	m := metricsWhen(t, px.URL, func(m string) bool { return metricValue(m, "shaperproxy_request_duration_seconds_count"+labels) == 2 })
	header := metricValue(m, "shaperproxy_upstream_header_seconds_sum"+labels)
	client := metricValue(m, "shaperproxy_client_first_byte_seconds_sum"+labels)
	duration := metricValue(m, "shaperproxy_request_duration_seconds_sum"+labels)
	if n := metricValue(m, "shaperproxy_client_first_byte_seconds_count"+labels); n != 2 {
		t.Fatalf("%v answers timed to the client, want 2:\n%s", n, grepLines([]byte(m), "shaperproxy_client_first_byte"))
	}
	if !(client >= header+0.2 && client <= duration) {
		t.Fatalf("first bytes to the client after %v s in all, the upstream's header after %v, the calls took %v", client, header, duration)
	}

	_, dead := newTestProxy(t, "http://127.0.0.1:1", nil)
	if resp, _ := do(t, rawClient(), "POST", dead.URL+"/v1/chat/completions", []byte(chatBody), nil); resp.StatusCode < 500 {
		t.Fatalf("status %d from an unreachable upstream", resp.StatusCode)
	}
	m = metricsWhen(t, dead.URL, func(m string) bool { return strings.Contains(m, "shaperproxy_request_duration_seconds_count") })
	if strings.Contains(m, "shaperproxy_client_first_byte_seconds_count{") {
		t.Fatalf("the proxy's own answer was timed:\n%s", grepLines([]byte(m), "shaperproxy_client_first_byte"))
	}
}

// TestHoldMetric: the hold histogram times what the proxy does between
// the body's last byte and the request's hand-off upstream (a transform
// that takes 30 ms), not the wait for a body the client sends slowly (a
// pause of 300 ms between its halves), once per call.
func TestHoldMetric(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		fmt.Fprint(w, "{}")
	}))
	defer up.Close()
	slow := RequestTransformFunc(func(_ context.Context, _ *Call, b []byte) ([]byte, error) {
		time.Sleep(30 * time.Millisecond)
		return b, nil
	})
	_, px := newTestProxy(t, up.URL, func(o *Options) { o.Transforms = []RequestTransform{slow} })
	conn, err := net.Dial("tcp", px.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	half := len(chatBody) / 2
	fmt.Fprintf(conn, "POST /v1/chat/completions HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s",
		px.Listener.Addr(), len(chatBody), chatBody[:half])
	time.Sleep(300 * time.Millisecond)
	fmt.Fprint(conn, chatBody[half:])
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	labels := `{model="deepseek-reasoner",route="default"}`
	m := metricsWhen(t, px.URL, func(m string) bool { return metricValue(m, "shaperproxy_request_duration_seconds_count"+labels) == 1 })
	hold, n := metricValue(m, "shaperproxy_request_hold_seconds_sum"+labels), metricValue(m, "shaperproxy_request_hold_seconds_count"+labels)
	total := metricValue(m, "shaperproxy_request_duration_seconds_sum"+labels)
	if n != 1 || hold < 0.03 || hold >= 0.3 || total < 0.3 {
		t.Fatalf("hold %v s over %v calls, the call %v s:\n%s", hold, n, total, grepLines([]byte(m), "shaperproxy_request_hold_seconds"))
	}
}

// TestModelLabelBounded: the model label keeps the first maxModels
// distinct names, then says "other".
func TestModelLabelBounded(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if b, _ := io.ReadAll(r.Body); bytes.Contains(b, []byte("junk")) {
			http.Error(w, `{"error":{"message":"model not found"}}`, http.StatusNotFound)
			return
		}
		fmt.Fprint(w, "{}")
	}))
	defer up.Close()
	_, px := newTestProxy(t, up.URL, nil)
	// Names anyone can send, which the upstream refuses, take no place.
	for i := range maxModels + 8 {
		do(t, rawClient(), "POST", px.URL+"/v1/chat/completions", fmt.Appendf(nil, `{"model":"junk%d","messages":[]}`, i), nil)
	}
	for i := range maxModels + 8 {
		do(t, rawClient(), "POST", px.URL+"/v1/chat/completions", fmt.Appendf(nil, `{"model":"m%d","messages":[]}`, i), nil)
	}
	var models map[string]bool
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		models = map[string]bool{}
		for _, m := range regexp.MustCompile(`shaperproxy_requests_total\{[^}]*model="([^"]*)"`).FindAllStringSubmatch(metricsText(t, px.URL), -1) {
			models[m[1]] = true
		}
		if models[otherLabel] && len(models) == maxModels+1 {
			break
		}
	}
	// Which names near the 32nd take the last places is not fixed: a call's
	// metrics are recorded after its answer is sent, so the next call can
	// be recorded first.
	if len(models) != maxModels+1 || !models[otherLabel] || !models["m0"] || models["junk0"] {
		t.Fatalf("%d model labels: %v", len(models), models)
	}
}

// TestDrainAndCut: Drain waits for a stream in flight and returns once it
// ends; when it does not end in time, Cut ends it (logged, outcome
// shutdown, the client sees the stream cut, not ended), and a call cut
// before the upstream answered gets a 503. Served with ConnContext (a call
// cut through its connection's context) and without (its own context).
func TestDrainAndCut(t *testing.T) {
	for _, connCtx := range []bool{false, true} {
		t.Run(fmt.Sprintf("ConnContext=%v", connCtx), func(t *testing.T) { testDrainAndCut(t, connCtx) })
	}
}

func testDrainAndCut(t *testing.T, connCtx bool) {
	release := make(chan struct{})
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body) // the server then sees the proxy leave
		if strings.HasPrefix(r.URL.Path, "/silent") {
			<-r.Context().Done()
			return
		}
		w.Header().Set("Content-Type", "text/event-stream")
		fmt.Fprint(w, "data: {\"a\":1}\n\n")
		_ = http.NewResponseController(w).Flush()
		ends := release
		if strings.HasPrefix(r.URL.Path, "/endless") {
			ends = nil
		}
		select {
		case <-ends:
			fmt.Fprint(w, "data: [DONE]\n\n")
		case <-r.Context().Done():
		}
	}))
	defer up.Close()
	obs, log := &recordingObserver{}, &testenv.Log{}
	p, px := newTestProxy(t, up.URL, func(o *Options) { o.Observers, o.Logger = []Observer{obs}, slog.New(log) })
	if connCtx {
		px = serveProxy(t, p, func(s *http.Server) { s.ConnContext = p.ConnContext })
	}

	resp, cancel := openStream(t, rawClient(), px.URL+"/v1/chat/completions")
	defer cancel()
	short, scancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer scancel()
	if err := p.Drain(short); !errors.Is(err, context.DeadlineExceeded) || p.InFlight() != 1 {
		t.Fatalf("Drain with a stream in flight: %v, %d in flight", err, p.InFlight())
	}
	close(release)
	rest, err := io.ReadAll(resp.Body)
	if err != nil || string(rest) != "data: [DONE]\n\n" {
		t.Fatalf("the stream did not finish: %q %v", rest, err)
	}
	if err := p.Drain(context.Background()); err != nil {
		t.Fatal(err)
	}

	resp, cancel2 := openStream(t, rawClient(), px.URL+"/endless/v1/chat/completions")
	defer cancel2()
	if n := p.Cut(); n != 1 {
		t.Fatalf("Cut cut %d calls", n)
	}
	if _, err := io.ReadAll(resp.Body); err == nil {
		t.Fatal("a cut stream ended cleanly for the client")
	}
	if end := obs.waitEnds(t, 2)[1]; end.Outcome != OutcomeShutdown {
		t.Fatalf("outcome %s (%s)", end.Outcome, end.Err)
	}
	if l := waitLines(t, log, "call cut", 1)[0]; l["call"].String() == "" {
		t.Fatalf("cut line %v", l)
	}

	done := make(chan *http.Response, 1)
	go func() {
		resp, _ := rawClient().Post(px.URL+"/silent/v1/chat/completions", "application/json", strings.NewReader(chatBody))
		done <- resp
	}()
	for p.InFlight() == 0 {
		time.Sleep(time.Millisecond)
	}
	p.Cut()
	if resp := <-done; resp == nil || resp.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("cut before the upstream answered: %v", resp)
	}
	if err := p.Drain(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// TestLabelValue: a label value from a request is valid UTF-8 (the client
// library panics on anything else) and short.
func TestLabelValue(t *testing.T) {
	s := newLabelSet(2)
	if got := s.value("a\xffb"); got != "a\uFFFDb" {
		t.Errorf("invalid UTF-8: %q", got)
	}
	if got := s.value(strings.Repeat("é", 100)); len(got) > maxLabelBytes || !utf8.ValidString(got) {
		t.Errorf("long value: %d bytes, valid %v", len(got), utf8.ValidString(got))
	}
	if got := s.value("third"); got != otherLabel {
		t.Errorf("third value: %q", got)
	}
	if got := s.value(""); got != "" {
		t.Errorf("empty value: %q", got)
	}
}

// TestConnContextCalls: served with ConnContext, a call makes no context
// of its own, and its end leaves its connection's context alone: the next
// call on the same keep-alive connection is served. Without ConnContext
// each call has its own context.
func TestConnContextCalls(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		_, _ = io.WriteString(w, `{"choices":[]}`)
	}))
	defer up.Close()
	for _, connCtx := range []bool{false, true} {
		var p *Proxy
		var mu sync.Mutex
		var own []bool
		p, px := newTestProxy(t, up.URL, func(o *Options) {
			o.Transforms = []RequestTransform{RequestTransformFunc(func(_ context.Context, c *Call, b []byte) ([]byte, error) {
				p.flight.mu.Lock()
				o := p.flight.calls[c].own
				p.flight.mu.Unlock()
				mu.Lock()
				own = append(own, o)
				mu.Unlock()
				return b, nil
			})}
		})
		if connCtx {
			px = serveProxy(t, p, func(s *http.Server) { s.ConnContext = p.ConnContext })
		}
		c := rawClient()
		conns := map[string]bool{}
		for i := range 3 {
			var addr string
			ctx := httptrace.WithClientTrace(context.Background(), &httptrace.ClientTrace{
				GotConn: func(ci httptrace.GotConnInfo) { addr = ci.Conn.LocalAddr().String() },
			})
			req, _ := http.NewRequestWithContext(ctx, http.MethodPost, px.URL+"/v1/chat/completions", strings.NewReader(`{"model":"m","messages":[{"role":"user","content":"hi"}]}`))
			resp, err := c.Do(req)
			if err != nil {
				t.Fatalf("ConnContext=%v, call %d: %v", connCtx, i, err)
			}
			got, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK || string(got) != `{"choices":[]}` {
				t.Fatalf("ConnContext=%v, call %d: status %d, body %q", connCtx, i, resp.StatusCode, got)
			}
			conns[addr] = true
		}
		if len(conns) != 1 {
			t.Fatalf("ConnContext=%v: %d connections for 3 calls", connCtx, len(conns))
		}
		mu.Lock()
		for i, o := range own {
			if o == connCtx {
				t.Errorf("ConnContext=%v, call %d: own context %v", connCtx, i, o)
			}
		}
		if len(own) != 3 {
			t.Errorf("ConnContext=%v: %d calls transformed", connCtx, len(own))
		}
		mu.Unlock()
	}
}

// TestConnContextCancellableBase: under a base context that can be
// cancelled, ConnContext makes no context (one derived from it would stay
// registered with it, a connection's never cancelled but by Cut); calls
// then make their own.
func TestConnContextCancellableBase(t *testing.T) {
	p, err := New(Options{Routes: []Route{{Name: "default", Upstream: &url.URL{Scheme: "http", Host: "127.0.0.1:1"}}}})
	if err != nil {
		t.Fatal(err)
	}
	base, cancel := context.WithCancel(context.Background())
	defer cancel()
	if got := p.ConnContext(base, nil); got != base {
		t.Fatal("a context derived from a cancellable base")
	}
	if _, ok := p.ConnContext(context.Background(), nil).Value(connCutKey{}).(context.CancelCauseFunc); !ok {
		t.Fatal("no connection context under a base that cannot be cancelled")
	}
}

// heldObserver's sinks wait in Response until release is closed (at
// most five seconds).
type heldObserver struct{ release chan struct{} }

func (o *heldObserver) Request(*Call, *Upstream) ResponseSink { return o }
func (o *heldObserver) Response(*ResponseInfo) {
	select {
	case <-o.release:
	case <-time.After(5 * time.Second):
	}
}
func (o *heldObserver) Event(*sse.Event, int, time.Duration) {}
func (o *heldObserver) Body([]byte)                          {}
func (o *heldObserver) End(End)                              {}

// TestObserversAfterFirstBytes: the observers are told of a body the
// proxy copies as it comes once its first bytes are on their way to the
// client: an observer that takes its time over the response does not
// hold the answer back (a small one arrives whole while it waits).
func TestObserversAfterFirstBytes(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprint(w, `{"choices":[{"message":{"role":"assistant","content":"ok"}}]}`)
	}))
	defer up.Close()
	obs := &heldObserver{release: make(chan struct{})}
	defer close(obs.release)
	_, px := newTestProxy(t, up.URL, func(o *Options) { o.Observers = []Observer{obs} })
	c := rawClient()
	c.Timeout = 2 * time.Second
	resp, err := c.Post(px.URL+"/v1/chat/completions", "application/json", strings.NewReader(chatBody))
	if err != nil {
		t.Fatalf("the answer waited for the observers: %v", err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil || !strings.Contains(string(body), `"ok"`) {
		t.Fatalf("the answer waited for the observers: %q, %v", body, err)
	}
}

// waitingObserver's Request waits until release is closed (or 5 s) and
// notes what it was told; its sink notes the order of what follows.
type waitingObserver struct {
	release chan struct{}
	told    atomic.Bool  // Request has returned
	at      atomic.Int64 // Upstream.At it was told
	order   chan string  // "response", "end", in the order the sink got them
}

func (o *waitingObserver) Request(_ *Call, up *Upstream) ResponseSink {
	select {
	case <-o.release:
	case <-time.After(5 * time.Second):
	}
	o.at.Store(int64(up.At))
	o.told.Store(true)
	return o
}
func (o *waitingObserver) Response(*ResponseInfo)               { o.order <- "response" }
func (o *waitingObserver) Event(*sse.Event, int, time.Duration) {}
func (o *waitingObserver) Body([]byte)                          {}
func (o *waitingObserver) End(End)                              { o.order <- "end" }

// leaveAlone is a finisher that takes no session.
type leaveAlone struct{}

func (leaveAlone) Start(*Call, *ResponseInfo) FinishSession { return nil }

// TestLargeBodyObserversAfterFirstBytes: for a body written aside (over
// maxInlineBody) with no transform's work beside its trip, the observers
// are told of the request once the answer's first bytes are on their way
// (the upstream is still reading the body when its write ends: work then
// takes a processor from it), dated when the request was handed to the
// transport; they still get the request before the response, the response
// before the end. So are an error answer's, and an answer's when a finisher
// is configured but takes no session (the view a finisher reads is made
// before the trip then). A stream's observers are told before anything of
// it reaches the client, and a small body's before its answer is read.
func TestLargeBodyObserversAfterFirstBytes(t *testing.T) {
	large := []byte(`{"model":"m","messages":[{"role":"user","content":"` + strings.Repeat("x", 2*maxInlineBody) + `"}]}`)
	small := []byte(`{"model":"m","messages":[{"role":"user","content":"hi"}]}`)
	rig := func(t *testing.T, stream bool, status int, finishers ...Finisher) (*waitingObserver, string) {
		up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			_, _ = io.Copy(io.Discard, r.Body)
			if stream {
				w.Header().Set("Content-Type", "text/event-stream")
				_, _ = io.WriteString(w, "data: {\"choices\":[]}\n\n")
				return
			}
			w.WriteHeader(status)
			_, _ = io.WriteString(w, `{"ok":true}`)
		}))
		t.Cleanup(up.Close)
		obs := &waitingObserver{release: make(chan struct{}), order: make(chan string, 4)}
		_, px := newTestProxy(t, up.URL, func(o *Options) { o.Observers, o.Finishers = []Observer{obs}, finishers })
		return obs, px.URL + "/v1/chat/completions"
	}
	for _, tc := range []struct {
		name      string
		status    int
		finishers []Finisher
	}{
		{"a large body's answer", http.StatusOK, nil},
		{"a large body's error answer", http.StatusBadRequest, nil},
		{"a large body's answer, a finisher leaving it alone", http.StatusOK, []Finisher{leaveAlone{}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			obs, url := rig(t, false, tc.status, tc.finishers...)
			start := time.Now()
			c := rawClient()
			c.Timeout = 3 * time.Second
			resp, err := c.Post(url, "application/json", bytes.NewReader(large))
			if err != nil {
				t.Fatalf("the answer waited for the observers: %v", err)
			}
			got, err := io.ReadAll(resp.Body)
			resp.Body.Close()
			if err != nil || resp.StatusCode != tc.status || string(got) != `{"ok":true}` {
				t.Fatalf("the answer waited for the observers: %d %q, %v", resp.StatusCode, got, err)
			}
			if obs.told.Load() {
				t.Fatal("the observers were told of the request before the client had the answer")
			}
			took := time.Since(start)
			close(obs.release)
			for _, want := range []string{"response", "end"} {
				select {
				case o := <-obs.order:
					if o != want {
						t.Fatalf("the sink got %q, want %q", o, want)
					}
				case <-time.After(5 * time.Second):
					t.Fatalf("the sink never got the %s", want)
				}
			}
			if at := time.Duration(obs.at.Load()); at <= 0 || at > took {
				t.Fatalf("the request told as sent at %v, want when it was handed off (within the %v the client waited)", at, took)
			}
		})
	}
	for _, c := range []struct {
		name   string
		body   []byte
		stream bool
	}{{"a large body's stream", large, true}, {"a small body's answer", small, false}} {
		t.Run(c.name, func(t *testing.T) {
			obs, url := rig(t, c.stream, http.StatusOK)
			time.AfterFunc(300*time.Millisecond, func() { close(obs.release) })
			resp, err := rawClient().Post(url, "application/json", bytes.NewReader(c.body))
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			if !obs.told.Load() {
				t.Fatal("the client had the answer's header before the observers were told of the request")
			}
			if _, err := resp.Body.Read(make([]byte, 1)); err != nil {
				t.Fatal(err)
			}
		})
	}
}
