package main

import (
	"bufio"
	"context"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestServe starts `serve` on a free loopback port, checks /healthz and
// the recorded URL, and stops it with its context.
func TestServe(t *testing.T) {
	dir := t.TempDir()
	ctx, cancel := context.WithCancel(context.Background())
	pr, pw := io.Pipe()
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, []string{"serve", "--listen", "127.0.0.1:0", "--upstream", "http://127.0.0.1:1", "--data-dir", dir}, pw, io.Discard)
		pw.Close()
	}()
	line, err := bufio.NewReader(pr).ReadString('\n')
	if err != nil {
		t.Fatal(err)
	}
	go io.Copy(io.Discard, pr)
	url := strings.Fields(line)[4] // "shaperproxy dev listening on URL (data in DIR)"
	resp, err := http.Get(url + "/healthz")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 || servedURL(dir) != url {
		t.Fatalf("healthz %d, recorded URL %q, want %q", resp.StatusCode, servedURL(dir), url)
	}
	// An unreachable upstream gives the OpenAI error shape.
	resp, err = http.Post(url+"/v1/chat/completions", "application/json", strings.NewReader(`{"model":"m","messages":[]}`))
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 502 || !strings.Contains(string(body), `"error"`) {
		t.Fatalf("unreachable upstream: %d %s", resp.StatusCode, body)
	}
	cancel()
	select {
	case err := <-done:
		if err != nil && err != http.ErrServerClosed {
			t.Fatalf("serve returned %v", err)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("serve did not stop")
	}
	if _, err := os.Stat(filepath.Join(dir, serveURLFile)); !os.IsNotExist(err) {
		t.Fatal("serve.url left behind")
	}
}

func TestServeRejectsBadConfig(t *testing.T) {
	path := filepath.Join(t.TempDir(), "c.toml")
	if err := os.WriteFile(path, []byte("[shaping]\nmax_chars = 3\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	err := run(context.Background(), []string{"serve", "--config", path, "--data-dir", t.TempDir()}, io.Discard, io.Discard)
	if err == nil || !strings.Contains(err.Error(), "shaping.max_chars") {
		t.Fatalf("err = %v, want one naming shaping.max_chars", err)
	}
}
