package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/shaperproxy/shaperproxy/internal/config"
	"github.com/shaperproxy/shaperproxy/sse"
)

// outBuffer collects a command's output for a test reading it while it
// is written.
type outBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (o *outBuffer) Write(p []byte) (int, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.b.Write(p)
}

func (o *outBuffer) String() string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.b.String()
}

// waitFor waits until out holds want.
func waitFor(t *testing.T, out *outBuffer, want string) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if strings.Contains(out.String(), want) {
			return
		}
	}
	t.Fatalf("no %q in:\n%s", want, out)
}

// streamUpstream answers every chat request with an SSE stream: one
// event, then an event every 20 ms until release is closed (then [DONE])
// or the request ends. A nil release never closes.
func streamUpstream(t *testing.T, release <-chan struct{}) *httptest.Server {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		rc := http.NewResponseController(w)
		w.Header().Set("Content-Type", "text/event-stream")
		fmt.Fprint(w, "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"first\"}}]}\n\n")
		_ = rc.Flush()
		tick := time.NewTicker(20 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-release:
				fmt.Fprint(w, "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"last\"}}]}\n\ndata: [DONE]\n\n")
				return
			case <-r.Context().Done():
				return
			case <-tick.C:
				fmt.Fprint(w, ": keep-alive\n\n")
				_ = rc.Flush()
			}
		}
	}))
	t.Cleanup(up.Close)
	return up
}

// openChatStream posts a streaming chat request to base (a proxy URL) and
// reads its first event.
func openChatStream(t *testing.T, base string) *http.Response {
	t.Helper()
	resp, err := http.Post(base+"/v1/chat/completions", "application/json", strings.NewReader(`{"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	if ev, err := sse.NewReader(resp.Body).Next(); err != nil || !strings.Contains(string(ev.Data), "first") {
		t.Fatalf("first event %q: %v", ev.Raw, err)
	}
	return resp
}

// waitRefused waits until addr refuses connections.
func waitRefused(t *testing.T, addr string) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			return
		}
		c.Close()
	}
	t.Fatalf("%s still accepts connections", addr)
}

// serveRun is `serve` running in this process, with its two signals: the
// first cancels its context, the second closes its cut channel.
type serveRun struct {
	url, addr      string
	stdout, stderr *outBuffer
	first          context.CancelFunc
	cut            chan struct{}
	done           chan error
}

// runServeT runs `serve args` in this process and waits for its banner.
func runServeT(t *testing.T, args ...string) *serveRun {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	s := &serveRun{stdout: &outBuffer{}, stderr: &outBuffer{}, first: cancel, cut: make(chan struct{}), done: make(chan error, 1)}
	ctx = withCut(ctx, s.cut)
	go func() { s.done <- run(ctx, append([]string{"serve"}, args...), s.stdout, s.stderr) }()
	t.Cleanup(func() {
		cancel()
		select {
		case <-s.cut:
		default:
			close(s.cut)
		}
		<-s.done
	})
	for deadline := time.Now().Add(10 * time.Second); !strings.Contains(s.stdout.String(), "  stop:"); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("no banner; stderr:\n%s", s.stderr)
		}
	}
	for _, line := range strings.Split(s.stdout.String(), "\n") {
		if u, ok := strings.CutPrefix(strings.TrimSpace(line), "HTTPS_PROXY mode: HTTPS_PROXY="); ok {
			s.url, s.addr = u, strings.TrimPrefix(u, "http://")
		}
	}
	return s
}

// wait returns serve's error, failing the test if it takes longer than d.
func (s *serveRun) wait(t *testing.T, d time.Duration) error {
	t.Helper()
	select {
	case err := <-s.done:
		s.done <- err // for the cleanup
		return err
	case <-time.After(d):
		t.Fatalf("serve did not stop within %s; stderr:\n%s", d, s.stderr)
	}
	return nil
}

// TestServeStopsCleanly: the first signal closes the listener while a
// stream is in flight; the stream finishes whole, and serve returns nil.
func TestServeStopsCleanly(t *testing.T) {
	release := make(chan struct{})
	up := streamUpstream(t, release)
	s := runServeT(t, "--listen", "127.0.0.1:0", "--upstream", up.URL, "--data-dir", t.TempDir())
	resp := openChatStream(t, s.url)
	s.first()
	waitFor(t, s.stderr, "stopping")
	waitRefused(t, s.addr)
	close(release)
	rest, err := io.ReadAll(resp.Body)
	if err != nil || !strings.HasSuffix(string(rest), "data: [DONE]\n\n") {
		t.Fatalf("the stream in flight did not finish: %v, ends %q", err, rest[max(0, len(rest)-40):])
	}
	if err := s.wait(t, 10*time.Second); err != nil {
		t.Fatalf("serve returned %v", err)
	}
	for _, want := range []string{"in_flight=1", "outcome=complete", "stopped: every call finished"} {
		if !strings.Contains(s.stderr.String(), want) {
			t.Errorf("log lacks %q:\n%s", want, s.stderr)
		}
	}
}

// TestServeSecondSignalCuts: after the first signal the stream goes on;
// the second cuts it at once (the client sees a cut, the call is logged as
// cut) and serve returns an error saying so.
func TestServeSecondSignalCuts(t *testing.T) {
	up := streamUpstream(t, nil)
	s := runServeT(t, "--listen", "127.0.0.1:0", "--upstream", up.URL, "--data-dir", t.TempDir())
	resp := openChatStream(t, s.url)
	s.first()
	waitFor(t, s.stderr, "stopping")
	rd := sse.NewReader(resp.Body)
	for range 3 { // still flowing
		if _, err := rd.Next(); err != nil {
			t.Fatalf("the stream stopped at the first signal: %v", err)
		}
	}
	close(s.cut)
	for {
		if _, err := rd.Next(); err != nil {
			if errors.Is(err, io.EOF) {
				t.Fatal("the cut stream ended cleanly for the client")
			}
			break
		}
	}
	err := s.wait(t, 10*time.Second)
	if err == nil || !strings.Contains(err.Error(), "1 call(s) cut by a second signal") {
		t.Fatalf("serve returned %v", err)
	}
	for _, want := range []string{"call cut: the proxy is stopping", "outcome=shutdown"} {
		if !strings.Contains(s.stderr.String(), want) {
			t.Errorf("log lacks %q:\n%s", want, s.stderr)
		}
	}
}

// TestServeGraceOver: a stream that outlasts shutdown_grace is cut when
// the grace period is over.
func TestServeGraceOver(t *testing.T) {
	up := streamUpstream(t, nil)
	cfg := filepath.Join(t.TempDir(), "c.toml")
	if err := os.WriteFile(cfg, []byte("shutdown_grace = \"300ms\"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	s := runServeT(t, "--config", cfg, "--listen", "127.0.0.1:0", "--upstream", up.URL, "--data-dir", t.TempDir())
	openChatStream(t, s.url)
	start := time.Now()
	s.first()
	err := s.wait(t, 10*time.Second)
	if err == nil || !strings.Contains(err.Error(), "shutdown_grace 300ms over") || time.Since(start) < 300*time.Millisecond {
		t.Fatalf("serve returned %v after %s", err, time.Since(start))
	}
}

// serveProcess runs `serve args` as a process of its own (this test
// binary running main) and waits for its banner.
func serveProcess(t *testing.T, args ...string) (*exec.Cmd, string, *outBuffer) {
	t.Helper()
	cmd := exec.Command(os.Args[0], append([]string{"serve"}, args...)...)
	cmd.Env = append(os.Environ(), "SHAPERPROXY_TEST_MAIN=1")
	stderr := &outBuffer{}
	cmd.Stderr = stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	br := bufio.NewReader(stdout)
	var url string
	for url == "" {
		line, err := br.ReadString('\n')
		if err != nil {
			t.Fatalf("no banner: %v; stderr:\n%s", err, stderr)
		}
		if u, ok := strings.CutPrefix(strings.TrimSpace(line), "HTTPS_PROXY mode: HTTPS_PROXY="); ok {
			url = u
		}
	}
	go io.Copy(io.Discard, br)
	return cmd, url, stderr
}

// exitStatus waits for cmd and returns its exit status.
func exitStatus(t *testing.T, cmd *exec.Cmd, d time.Duration) int {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			return ee.ExitCode()
		}
		if err != nil {
			t.Fatal(err)
		}
		return 0
	case <-time.After(d):
		t.Fatalf("the process did not exit within %s", d)
	}
	return -1
}

// TestServeSignals sends real signals to a serve process: SIGHUP is
// logged and changes nothing; SIGTERM lets the stream in flight finish and
// the process exits 0; in a second process, a second SIGTERM cuts the
// stream and the process exits 1.
func TestServeSignals(t *testing.T) {
	release := make(chan struct{})
	up := streamUpstream(t, release)
	cmd, url, stderr := serveProcess(t, "--listen", "127.0.0.1:0", "--upstream", up.URL, "--data-dir", t.TempDir())
	_ = cmd.Process.Signal(syscall.SIGHUP)
	waitFor(t, stderr, "SIGHUP: reloading the configuration is not supported")
	if resp, err := http.Get(url + "/healthz"); err != nil || resp.StatusCode != 200 {
		t.Fatalf("after SIGHUP: %v %v", resp, err)
	}
	resp := openChatStream(t, url)
	_ = cmd.Process.Signal(syscall.SIGTERM)
	waitFor(t, stderr, "stopping")
	close(release)
	if rest, err := io.ReadAll(resp.Body); err != nil || !strings.HasSuffix(string(rest), "data: [DONE]\n\n") {
		t.Fatalf("the stream did not finish: %v", err)
	}
	if code := exitStatus(t, cmd, 10*time.Second); code != 0 {
		t.Fatalf("exit status %d after a clean stop; stderr:\n%s", code, stderr)
	}

	up2 := streamUpstream(t, nil)
	cmd, url, stderr = serveProcess(t, "--listen", "127.0.0.1:0", "--upstream", up2.URL, "--data-dir", t.TempDir())
	openChatStream(t, url)
	_ = cmd.Process.Signal(syscall.SIGTERM)
	waitFor(t, stderr, "stopping")
	_ = cmd.Process.Signal(syscall.SIGTERM)
	if code := exitStatus(t, cmd, 10*time.Second); code != 1 || !strings.Contains(stderr.String(), "call cut") {
		t.Fatalf("exit status %d after a second signal; stderr:\n%s", code, stderr)
	}
}

// TestStopTimeoutCoversGrace: the systemd unit waits longer than the
// default shutdown_grace before it kills the process.
func TestStopTimeoutCoversGrace(t *testing.T) {
	unit := readFileT(t, filepath.Join("..", "..", "contrib", "shaperproxy.service"))
	m := regexp.MustCompile(`(?m)^TimeoutStopSec=(\d+)min$`).FindStringSubmatch(unit)
	if m == nil {
		t.Fatal("shaperproxy.service has no TimeoutStopSec=Nmin")
	}
	n, _ := strconv.Atoi(m[1])
	if grace := config.Default().ShutdownGrace; time.Duration(n)*time.Minute <= grace {
		t.Fatalf("TimeoutStopSec %d min does not cover shutdown_grace %s", n, grace)
	}
}
