package main

import (
	"context"
	"encoding/pem"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/shaperproxy/shaperproxy/capture"
	"github.com/shaperproxy/shaperproxy/internal/config"
)

// secureStack builds the default stack in front of upURL (mod changes
// the configuration) and serves it on loopback.
func secureStack(t *testing.T, upURL string, mod func(*config.Config)) (string, *stack, config.Config) {
	t.Helper()
	c := config.Default()
	c.DataDir = filepath.Join(t.TempDir(), "data")
	c.Routes = c.WithDefaultRoute(upURL)
	if mod != nil {
		mod(&c)
	}
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	st, err := build(c, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	srv := httptest.NewServer(st)
	t.Cleanup(srv.Close)
	return srv.URL, st, c
}

// TestDataDirMadePrivate: an existing data directory open to others is
// made 0700 when the stack starts (it holds the CA key, the originals and
// the capture). (Before: it kept its 0755.)
func TestDataDirMadePrivate(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o755); err != nil { // whatever the umask
		t.Fatal(err)
	}
	_, _, _ = secureStack(t, "http://127.0.0.1:1", func(c *config.Config) { c.DataDir = dir })
	fi, err := os.Stat(dir)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o700 {
		t.Fatalf("data dir mode = %o, want 700", fi.Mode().Perm())
	}
}

// TestServeRefusesOpenListenWithoutKeys: serve will not listen off
// loopback without client keys unless allow_unauthenticated says so; the
// check comes before anything is bound. (Before: it listened, silently.)
func TestServeRefusesOpenListenWithoutKeys(t *testing.T) {
	err := run(context.Background(), []string{"serve", "--listen", "0.0.0.0:0", "--data-dir", t.TempDir()}, io.Discard, io.Discard)
	if err == nil || !strings.Contains(err.Error(), "client_keys") || !strings.Contains(err.Error(), "allow_unauthenticated") {
		t.Fatalf("err = %v, want a refusal naming client_keys and allow_unauthenticated", err)
	}
	key := "0123456789abcdef-key"
	tests := []struct {
		listen, admin string
		keys          []string
		allow, ok     bool
	}{
		{"127.0.0.1:8787", "", nil, false, true},
		{"localhost:8787", "[::1]:9000", nil, false, true},
		{"0.0.0.0:8787", "", nil, false, false},
		{":8787", "", nil, false, false},
		{"192.168.1.5:8787", "", nil, false, false},
		{"127.0.0.1:8787", "0.0.0.0:9000", nil, false, false},
		{"0.0.0.0:8787", "", []string{key}, false, true},
		{"0.0.0.0:8787", "", nil, true, true},
	}
	for _, tt := range tests {
		c := config.Default()
		c.Listen, c.AdminListen, c.AllowUnauthenticated = tt.listen, tt.admin, tt.allow
		_, err := checkExposure(c, tt.keys)
		if (err == nil) != tt.ok {
			t.Errorf("listen %s admin %q keys %d allow %v: err = %v", tt.listen, tt.admin, len(tt.keys), tt.allow, err)
		}
	}
}

// TestClientKeysFromConfig: keys from the file and from the environment
// reach the proxy; a request without one is refused.
func TestClientKeysFromConfig(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "{}") }))
	defer up.Close()
	t.Setenv("SHAPER_TEST_KEYS", "env-key-0123456789ab")
	url, _, _ := secureStack(t, up.URL, func(c *config.Config) {
		c.ClientKeys, c.ClientKeysEnv = []string{"file-key-0123456789a"}, "SHAPER_TEST_KEYS"
	})
	for key, want := range map[string]int{"": 401, "nope": 401, "file-key-0123456789a": 200, "env-key-0123456789ab": 200} {
		req, _ := http.NewRequest("POST", url+"/v1/chat/completions", strings.NewReader(`{"model":"m","messages":[]}`))
		if key != "" {
			req.Header.Set("X-Shaper-Key", key)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != want {
			t.Errorf("key %q: %d, want %d", key, resp.StatusCode, want)
		}
	}
}

// TestRouteCAFile: a route's ca_file makes an upstream with a private CA
// trusted; without it the client is told it is a certificate problem.
func TestRouteCAFile(t *testing.T) {
	up := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "{}") }))
	defer up.Close()
	caFile := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(caFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: up.Certificate().Raw}), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		caFile string
		want   int
		text   string
	}{{"", 502, "certificate"}, {caFile, 200, "{}"}} {
		url, _, _ := secureStack(t, up.URL, func(c *config.Config) {
			c.Routes = []config.Route{{Name: "private", Upstream: up.URL, Default: true, CAFile: tc.caFile}}
		})
		resp, err := http.Post(url+"/v1/chat/completions", "application/json", strings.NewReader(`{"model":"m","messages":[]}`))
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != tc.want || !strings.Contains(string(body), tc.text) {
			t.Errorf("ca_file %q: %d %s", tc.caFile, resp.StatusCode, body)
		}
	}
	c := config.Default()
	c.Routes = []config.Route{{Name: "private", Upstream: up.URL, Default: true, CAFile: filepath.Join(t.TempDir(), "missing.pem")}}
	if _, err := proxyOptions(c, nil); err == nil || !strings.Contains(err.Error(), "ca_file") {
		t.Errorf("missing ca_file: err = %v", err)
	}
}

// TestCaptureMarksTruncatedEvent: an event longer than the proxy keeps
// reaches the client whole; the capture holds its beginning, its size and
// a note that it was cut. (Before: capture cloned the whole event.)
func TestCaptureMarksTruncatedEvent(t *testing.T) {
	big := "data: " + strings.Repeat("b", 5<<20) + "\n\n"
	body := big + "data: [DONE]\n\n"
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		io.WriteString(w, body)
	}))
	defer up.Close()
	url, st, c := secureStack(t, up.URL, nil)
	resp, err := http.Post(url+"/v1/chat/completions", "application/json", strings.NewReader(`{"model":"m","stream":true,"messages":[]}`))
	if err != nil {
		t.Fatal(err)
	}
	got, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if string(got) != body {
		t.Fatalf("client got %d bytes, want %d", len(got), len(body))
	}
	if err := st.Flush(); err != nil {
		t.Fatal(err)
	}
	rd, err := capture.OpenReader(filepath.Join(c.DataDir, capture.Dir))
	if err != nil {
		t.Fatal(err)
	}
	defer rd.Close()
	var events []capture.Record
	_ = rd.Scan(func(l capture.Located) error {
		if l.Record.Kind == capture.KindEvent {
			events = append(events, l.Record)
		}
		return nil
	})
	if len(events) != 2 {
		t.Fatalf("captured %d events, want 2", len(events))
	}
	ev := events[0]
	if !strings.HasPrefix(ev.Err, capture.TruncatedErr) || ev.Bytes != int64(len(big)) || len(ev.Data) >= len(big) || string(ev.Data) != big[:len(ev.Data)] {
		t.Fatalf("big event captured as %d bytes, err %q, size %d", len(ev.Data), ev.Err, ev.Bytes)
	}
	if events[1].Err != "" || string(events[1].Data) != "data: [DONE]\n\n" {
		t.Fatalf("second event: %q %q", events[1].Data, events[1].Err)
	}
}

// TestBuildFailsCleanly: a stack that cannot be built (its data directory
// is a file) is an error, not a panic, and what was opened is closed.
func TestBuildFailsCleanly(t *testing.T) {
	file := filepath.Join(t.TempDir(), "not-a-dir")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	c := config.Default()
	c.DataDir = file
	c.Routes = c.WithDefaultRoute("http://127.0.0.1:1")
	st, err := build(c, nil)
	if err == nil || st != nil {
		t.Fatalf("build with a file as data directory: %v, %v; want an error and no stack", st, err)
	}
}
