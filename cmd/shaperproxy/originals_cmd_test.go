package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/shaperproxy/shaperproxy/originals"
)

func originalsFixture(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	st, err := originals.Open(filepath.Join(dir, originals.FileName), originals.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	err = st.Put([]originals.Entry{
		{Shaped: "decided: read config", Original: "where is the config? read it first", Conversation: "conv-a", Turn: 2},
		{Shaped: "decided: call tool", Original: "first way to think", Conversation: "conv-a", Turn: 2},
		{Shaped: "decided: call tool", Original: "second way to think", Conversation: "conv-b", Turn: 5},
	})
	if err != nil {
		t.Fatal(err)
	}
	return dir
}

func runOrig(t *testing.T, stdin string, args ...string) (string, string, error) {
	t.Helper()
	var out, errb bytes.Buffer
	err := originalsMain(args, strings.NewReader(stdin), &out, &errb)
	return out.String(), errb.String(), err
}

func TestOriginalsCommands(t *testing.T) {
	dir := originalsFixture(t)
	sum := sha256.Sum256([]byte("decided: read config"))
	tests := []struct {
		name    string
		stdin   string
		args    []string
		wantErr bool
		out     []string
		errMsg  []string // in the error
		usage   bool     // the error is a usage error
	}{
		{name: "stats", args: []string{"stats", "--data-dir", dir}, out: []string{"conversations  2", "entries        3", "1 shaped texts with more than one original (max 2)"}},
		{name: "stats json", args: []string{"stats", "--json", "--data-dir", dir}, out: []string{`"entries":3`, `"fan_outs":1`, `"proxy":""`}},
		{name: "list", args: []string{"list", "--data-dir", dir}, out: []string{"conv-a", "conv-b", "decided: call tool"}},
		{name: "list conversation", args: []string{"list", "--conversation", "conv-b", "--data-dir", dir}, out: []string{"conv-b        5 "}},
		{name: "lookup text", args: []string{"lookup", "--data-dir", dir, "decided: read config"}, out: []string{"where is the config? read it first", "conversation conv-a, turn 2"}},
		{name: "lookup flags after text", args: []string{"lookup", "decided: read config", "--json", "--data-dir", dir}, out: []string{`"original":"where is the config? read it first"`}},
		{name: "lookup stdin newline", stdin: "decided: read config\n", args: []string{"lookup", "--stdin", "--data-dir", dir}, out: []string{"where is the config"}},
		{name: "lookup sha256", args: []string{"lookup", "--sha256", hex.EncodeToString(sum[:]), "--data-dir", dir}, out: []string{"where is the config"}},
		{name: "fan-out", args: []string{"lookup", "--data-dir", dir, "decided: call tool"}, out: []string{"fan-out: 2 different originals", "first way", "second way", "conv-b, turn 5"}},
		{name: "miss", args: []string{"lookup", "--data-dir", dir, "nope"}, wantErr: true, errMsg: []string{"no original is recorded for sha256", "current turn of each conversation only"}},
		{name: "miss json", args: []string{"lookup", "--json", "--data-dir", dir, "nope"}, wantErr: true, out: []string{`"entries":[]`}},
		{name: "sha256 prefix", args: []string{"lookup", "--sha256", hex.EncodeToString(sum[:])[:16], "--data-dir", dir}, out: []string{"where is the config"}},
		{name: "sha256 prefix unknown", args: []string{"lookup", "--sha256", "00000000", "--data-dir", dir}, wantErr: true, errMsg: []string{"no recorded shaped text has a sha256 starting 00000000"}},
		{name: "sha256 prefix too short", args: []string{"lookup", "--sha256", "1234567", "--data-dir", dir}, wantErr: true, usage: true},
		{name: "config data_dir", args: []string{"stats", "--config", writeConfig(t, dir)}, out: []string{"entries        3"}},
		{name: "data-dir beats config", args: []string{"stats", "--config", writeConfig(t, t.TempDir()), "--data-dir", dir}, out: []string{"entries        3"}},
		{name: "two sources", stdin: "x", args: []string{"lookup", "--stdin", "--data-dir", dir, "text"}, wantErr: true, usage: true},
		{name: "bad sha", args: []string{"lookup", "--sha256", "xyz12345", "--data-dir", dir}, wantErr: true, usage: true},
		{name: "dash text", args: []string{"lookup", "--data-dir", dir, "--", "-x"}, wantErr: true, errMsg: []string{"no original is recorded"}},
		{name: "no table", args: []string{"stats", "--data-dir", t.TempDir()}, wantErr: true},
		{name: "unknown", args: []string{"frob"}, wantErr: true, usage: true},
		{name: "unknown flag", args: []string{"list", "--frob"}, wantErr: true, usage: true},
		{name: "help", args: nil, out: []string{"usage: shaperproxy originals"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out, errOut, err := runOrig(t, tt.stdin, tt.args...)
			if (err != nil) != tt.wantErr {
				t.Fatalf("err = %v, wantErr %v\nstdout:\n%s\nstderr:\n%s", err, tt.wantErr, out, errOut)
			}
			for _, w := range tt.out {
				if !strings.Contains(out, w) {
					t.Errorf("stdout lacks %q:\n%s", w, out)
				}
			}
			for _, w := range tt.errMsg {
				if err == nil || !strings.Contains(strings.Join(strings.Fields(err.Error()), " "), w) {
					t.Errorf("error lacks %q: %v", w, err)
				}
			}
			var ue *usageError
			if errors.As(err, &ue) != tt.usage {
				t.Errorf("usage error: %v, want %v (%v)", ue != nil, tt.usage, err)
			}
			if errOut != "" {
				t.Errorf("stderr: %q (errors are main's to print)", errOut)
			}
			t.Logf("err: %v\n%s%s", err, out, errOut)
		})
	}
}

// TestOriginalsWhileServing: while a proxy holds the table, the commands
// ask it over loopback; with no proxy to ask, the error says what to do.
func TestOriginalsWhileServing(t *testing.T) {
	dir := originalsFixture(t)
	st, err := originals.Open(filepath.Join(dir, originals.FileName), originals.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	srv := httptest.NewServer(originals.Handler(st))
	defer srv.Close()
	sum := sha256.Sum256([]byte("decided: read config"))
	out, _, err := runOrig(t, "", "lookup", "--sha256", hex.EncodeToString(sum[:]), "--data-dir", dir, "--proxy", srv.URL)
	if err != nil || !strings.Contains(out, "where is the config? read it first") {
		t.Fatalf("lookup through the proxy: %v\n%s", err, out)
	}
	out, _, err = runOrig(t, "", "list", "--conversation", "conv-b", "--data-dir", dir, "--proxy", srv.URL)
	if err != nil || !strings.Contains(out, "conv-b") || strings.Contains(out, "conv-a") {
		t.Fatalf("list through the proxy: %v\n%s", err, out)
	}
	out, _, err = runOrig(t, "", "stats", "--data-dir", dir, "--proxy", srv.URL)
	if err != nil || !strings.Contains(out, srv.URL+" (the running proxy)") {
		t.Fatalf("stats through the proxy: %v\n%s", err, out)
	}
	_, _, err = runOrig(t, "", "stats", "--data-dir", dir, "--proxy", "http://127.0.0.1:1")
	if err == nil || !strings.Contains(err.Error(), "a running proxy holds the originals table") {
		t.Errorf("got %v", err)
	}
}

// writeConfig writes a configuration whose data_dir is dir.
func writeConfig(t *testing.T, dir string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "config.toml")
	if err := os.WriteFile(path, []byte(fmt.Sprintf("data_dir = %q\n", dir)), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestOriginalsListHashLooksUp: the hash list prints is one lookup
// --sha256 accepts.
func TestOriginalsListHashLooksUp(t *testing.T) {
	dir := originalsFixture(t)
	out, _, err := runOrig(t, "", "list", "--conversation", "conv-b", "--data-dir", dir)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(out, "\n")
	fields := strings.Fields(lines[1]) // CONVERSATION TURN TIME SHA256 BYTES SHAPED
	if len(fields) < 5 || fields[0] != "conv-b" {
		t.Fatalf("list:\n%s", out)
	}
	out, _, err = runOrig(t, "", "lookup", "--sha256", fields[3], "--data-dir", dir)
	if err != nil || !strings.Contains(out, "second way to think") {
		t.Fatalf("lookup --sha256 %s: %v\n%s", fields[3], err, out)
	}
	// The JSON list carries the whole hash.
	out, _, err = runOrig(t, "", "list", "--json", "--conversation", "conv-b", "--data-dir", dir)
	var e originalJSON
	if err != nil || json.Unmarshal([]byte(out), &e) != nil || len(e.SHA256) != 64 || !strings.HasPrefix(e.SHA256, fields[3]) {
		t.Fatalf("list --json: %v %s", err, out)
	}
}

// startServe runs `shaperproxy serve` on a loopback port with dir as its
// data directory until the test ends, and returns the URL it recorded.
func startServe(t *testing.T, dir string) string {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, []string{"serve", "--listen", "127.0.0.1:0", "--upstream", "http://127.0.0.1:1", "--data-dir", dir}, io.Discard, io.Discard)
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("serve: %v", err)
		}
	})
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		if u := servedURL(dir); u != "" {
			return u
		}
		select {
		case err := <-done:
			t.Fatalf("serve ended: %v", err)
		case <-time.After(10 * time.Millisecond):
		}
	}
	t.Fatal("serve recorded no URL")
	return ""
}

// TestOriginalsAskTheRunningProxy: against a real `serve` holding the
// table, every command answers through the proxy's own admin handler at
// once (not after the table's lock timeout), and a stale serve.url falls
// back to the file.
func TestOriginalsAskTheRunningProxy(t *testing.T) {
	dir := originalsFixture(t)
	url := startServe(t, dir)
	sum := sha256.Sum256([]byte("decided: read config"))
	for _, args := range [][]string{
		{"stats"}, {"list"}, {"list", "--conversation", "conv-b"},
		{"lookup", "--sha256", hex.EncodeToString(sum[:])}, {"lookup", "--sha256", hex.EncodeToString(sum[:])[:12]},
		{"lookup", "decided: read config"}, {"stats", "--json"},
	} {
		start := time.Now()
		out, errOut, err := runOrig(t, "", append(args, "--data-dir", dir)...)
		took := time.Since(start)
		if err != nil {
			t.Fatalf("%v: %v\n%s%s", args, err, out, errOut)
		}
		if took > time.Second/2 {
			t.Errorf("%v took %v through the running proxy", args, took)
		}
		if args[0] == "stats" && !strings.Contains(out, url) {
			t.Errorf("%v did not go through the proxy at %s:\n%s", args, url, out)
		}
		if args[0] == "lookup" && !strings.Contains(out, "where is the config? read it first") {
			t.Errorf("%v:\n%s", args, out)
		}
	}
}

// TestOriginalsStaleServeURL: a serve.url left by a proxy that is gone is
// tried, then the file is read, without waiting.
func TestOriginalsStaleServeURL(t *testing.T) {
	dir := originalsFixture(t)
	if err := writeServeURL(dir, "http://127.0.0.1:1"); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	out, _, err := runOrig(t, "", "stats", "--data-dir", dir)
	if err != nil || !strings.Contains(out, "entries        3") || strings.Contains(out, "running proxy") {
		t.Fatalf("stats: %v\n%s", err, out)
	}
	if took := time.Since(start); took > time.Second/2 {
		t.Errorf("took %v", took)
	}
}
