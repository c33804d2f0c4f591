package main

import (
	"bytes"
	"crypto/sha256"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"runtime/debug"
	"strings"
	"sync"
	"testing"

	"github.com/shaperproxy/shaperproxy/capture"
	"github.com/shaperproxy/shaperproxy/internal/config"
)

// recordingUpstream is an upstream that parses nothing: it keeps a digest
// of every body it receives and answers with answer(body).
type recordingUpstream struct {
	mu     sync.Mutex
	bodies [][32]byte
	sizes  []int
	answer func(body []byte) (int, []byte)
}

func (u *recordingUpstream) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	u.mu.Lock()
	u.bodies = append(u.bodies, sha256.Sum256(body))
	u.sizes = append(u.sizes, len(body))
	u.mu.Unlock()
	status, out := u.answer(body)
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Upstream", "own")
	w.WriteHeader(status)
	_, _ = w.Write(out)
}

// received returns the digests of the bodies received so far.
func (u *recordingUpstream) received() [][32]byte {
	u.mu.Lock()
	defer u.mu.Unlock()
	return append([][32]byte(nil), u.bodies...)
}

// stackTo builds the full stack (default configuration unless mod changes
// it) in front of the upstream at upURL and serves it on loopback; it
// returns the proxy's base URL ("/v1" included) and the stack.
func stackTo(t *testing.T, upURL string, logger *slog.Logger, mod func(*config.Config)) (string, *stack, string) {
	t.Helper()
	c := config.Default()
	c.DataDir = t.TempDir()
	c.Routes = c.WithDefaultRoute(upURL)
	if mod != nil {
		mod(&c)
	}
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	st, err := build(c, logger)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	srv := httptest.NewServer(st)
	t.Cleanup(srv.Close)
	return srv.URL + "/v1", st, c.DataDir
}

// postChat sends body to the proxy's chat completions endpoint and returns the
// status, the X-Upstream header and the body of the answer.
func postChat(t *testing.T, url string, body []byte) (int, string, []byte) {
	t.Helper()
	resp, err := http.Post(url+"/chat/completions", "application/json", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	out, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, resp.Header.Get("X-Upstream"), out
}

const (
	upstreamBadJSON = `{"error":{"message":"Failed to parse the request body as JSON","type":"invalid_request_error"}}`
	upstreamOK      = `{"id":"x","object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":"ok"},"finish_reason":"stop"}]}`
)

// TestDeepNestingBodyThroughProxy sends issue 10's body, a chat request
// whose messages array opens twelve million arrays, through the whole
// default stack (guard, shaping, originals, capture). Before the fix the
// process died of a stack overflow. Now the body is not JSON to the
// proxy: it reaches the upstream byte for byte, the client gets the
// upstream's own answer, the capture holds the request, and the proxy
// goes on serving.
func TestDeepNestingBodyThroughProxy(t *testing.T) {
	up := &recordingUpstream{answer: func(body []byte) (int, []byte) {
		if bytes.HasPrefix(body, []byte(`{"model":"m","messages":[[[`)) {
			return http.StatusBadRequest, []byte(upstreamBadJSON)
		}
		return http.StatusOK, []byte(upstreamOK)
	}}
	upSrv := httptest.NewServer(up)
	defer upSrv.Close()
	url, st, dataDir := stackTo(t, upSrv.URL, nil, nil)

	deep := []byte(`{"model":"m","messages":` + strings.Repeat("[", 12_000_000))
	status, from, body := postChat(t, url, deep)
	if status != http.StatusBadRequest || from != "own" || string(body) != upstreamBadJSON {
		t.Fatalf("deep body: %d from %q: %.200s", status, from, body)
	}
	if got := up.received(); len(got) != 1 || got[0] != sha256.Sum256(deep) {
		t.Fatalf("the upstream did not get the body byte for byte (%d bodies)", len(got))
	}
	// Still serving: a normal request, and the health check.
	if status, _, body := postChat(t, url, []byte(`{"model":"m","messages":[{"role":"user","content":"hi"}]}`)); status != 200 || string(body) != upstreamOK {
		t.Fatalf("next request: %d %s", status, body)
	}
	if resp, err := http.Get(strings.TrimSuffix(url, "/v1") + "/healthz"); err != nil || resp.StatusCode != 200 {
		t.Fatalf("healthz after the deep body: %v", err)
	} else {
		resp.Body.Close()
	}
	if n := capturedRequestSizes(t, st, dataDir); n[len(deep)] != 1 {
		t.Errorf("the deep request is not in the capture log: sizes %v", n)
	}
}

// TestDeepToolJSONThroughProxy: a valid, shallow chat request whose
// tool-call arguments and tool results are JSON texts nested a million
// levels deep (the guard's two other paths to the recursion). The guard
// reads them as unknown arguments and plain text, the request goes out
// unchanged and the upstream's answer comes back. The stack limit is
// lowered to 64 MiB for the test: plenty for the proxy, and a recursion
// over a million levels (about 100 MB of stack with gjson) dies at once.
func TestDeepToolJSONThroughProxy(t *testing.T) {
	defer debug.SetMaxStack(debug.SetMaxStack(64 << 20))
	up := &recordingUpstream{answer: func([]byte) (int, []byte) { return http.StatusOK, []byte(upstreamOK) }}
	upSrv := httptest.NewServer(up)
	defer upSrv.Close()
	url, _, _ := stackTo(t, upSrv.URL, nil, nil)

	args := strings.Repeat("[", 1_000_000)
	result := `{\"error\":` + strings.Repeat("[", 1_000_000)
	var b strings.Builder
	b.WriteString(`{"model":"m","messages":[{"role":"user","content":"build it"}`)
	for _, id := range []string{"a", "b", "c"} {
		b.WriteString(`,{"role":"assistant","content":null,"reasoning_content":"r","tool_calls":[{"id":"` + id +
			`","type":"function","function":{"name":"bash","arguments":"` + args + `"}}]}`)
		b.WriteString(`,{"role":"tool","tool_call_id":"` + id + `","content":"` + result + `"}`)
	}
	b.WriteString(`]}`)
	req := []byte(b.String())
	status, from, body := postChat(t, url, req)
	if status != 200 || from != "own" || string(body) != upstreamOK {
		t.Fatalf("%d from %q: %.200s", status, from, body)
	}
	if got := up.received(); len(got) != 1 || got[0] != sha256.Sum256(req) {
		t.Fatal("the request was changed on its way")
	}
}

// capturedRequestSizes counts the request records of the capture log by
// the size of their body.
func capturedRequestSizes(t *testing.T, st *stack, dataDir string) map[int]int {
	t.Helper()
	if err := st.Flush(); err != nil {
		t.Fatal(err)
	}
	rd, err := capture.OpenReader(filepath.Join(dataDir, capture.Dir))
	if err != nil {
		t.Fatal(err)
	}
	defer rd.Close()
	sizes := map[int]int{}
	err = rd.Scan(func(l capture.Located) error {
		if l.Err == nil && l.Record.Kind == capture.KindRequest {
			sizes[len(l.Record.Data)]++
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return sizes
}

// TestTinyElementsThroughProxy: chat requests shaped to make the parsed
// view or the key checks cost far more than the body — a million
// one-byte messages (a view of ~200 bytes each: 231 MB for these 2 MB),
// a message of a million tool calls, a message of 200,000 distinct keys
// (every key was compared with every earlier one: about a minute) — go
// through the whole default stack to the upstream byte for byte, the
// client gets the upstream's answer, and the proxy goes on serving.
func TestTinyElementsThroughProxy(t *testing.T) {
	up := &recordingUpstream{answer: func([]byte) (int, []byte) { return http.StatusOK, []byte(upstreamOK) }}
	upSrv := httptest.NewServer(up)
	defer upSrv.Close()
	url, _, _ := stackTo(t, upSrv.URL, nil, nil)

	zeros := strings.TrimSuffix(strings.Repeat("0,", 1<<20), ",")
	var keys strings.Builder
	for i := range 200_000 {
		fmt.Fprintf(&keys, `,"k%d":0`, i)
	}
	bodies := [][]byte{
		[]byte(`{"model":"m","messages":[` + zeros + `]}`),
		[]byte(`{"model":"m","messages":[{"role":"assistant","content":"","tool_calls":[` + zeros + `]},{"role":"user","content":"go on"}]}`),
		[]byte(`{"model":"m","messages":[{"role":"user","content":"hi"` + keys.String() + `}]}`),
	}
	for i, body := range bodies {
		status, _, got := postChat(t, url, body)
		if status != http.StatusOK || string(got) != upstreamOK {
			t.Fatalf("body %d: %d %.200s", i, status, got)
		}
		if rec := up.received(); len(rec) != i+1 || rec[i] != sha256.Sum256(body) {
			t.Fatalf("body %d did not reach the upstream byte for byte", i)
		}
	}
	if status, _, body := postChat(t, url, []byte(`{"model":"m","messages":[{"role":"user","content":"hi"}]}`)); status != 200 || string(body) != upstreamOK {
		t.Fatalf("next request: %d %s", status, body)
	}
}
