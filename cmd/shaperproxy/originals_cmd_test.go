package main

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"

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
		errOut  []string
	}{
		{name: "stats", args: []string{"stats", "--data-dir", dir}, out: []string{"conversations  2", "entries        3", "1 shaped texts with more than one original (max 2)"}},
		{name: "stats json", args: []string{"stats", "--json", "--data-dir", dir}, out: []string{`"entries": 3`, `"fan_outs": 1`}},
		{name: "list", args: []string{"list", "--data-dir", dir}, out: []string{"conv-a", "conv-b", "decided: call tool"}},
		{name: "list conversation", args: []string{"list", "--conversation", "conv-b", "--data-dir", dir}, out: []string{"conv-b        5 "}},
		{name: "lookup text", args: []string{"lookup", "--data-dir", dir, "decided: read config"}, out: []string{"where is the config? read it first", "conversation conv-a, turn 2"}},
		{name: "lookup flags after text", args: []string{"lookup", "decided: read config", "--json", "--data-dir", dir}, out: []string{`"original": "where is the config? read it first"`}},
		{name: "lookup stdin newline", stdin: "decided: read config\n", args: []string{"lookup", "--stdin", "--data-dir", dir}, out: []string{"where is the config"}},
		{name: "lookup sha256", args: []string{"lookup", "--sha256", hex.EncodeToString(sum[:]), "--data-dir", dir}, out: []string{"where is the config"}},
		{name: "fan-out", args: []string{"lookup", "--data-dir", dir, "decided: call tool"}, out: []string{"fan-out: 2 different originals", "first way", "second way", "conv-b, turn 5"}},
		{name: "miss", args: []string{"lookup", "--data-dir", dir, "nope"}, wantErr: true, errOut: []string{"current turn of each conversation only"}},
		{name: "miss json", args: []string{"lookup", "--json", "--data-dir", dir, "nope"}, wantErr: true, out: []string{`"entries": []`}},
		{name: "two sources", stdin: "x", args: []string{"lookup", "--stdin", "--data-dir", dir, "text"}, wantErr: true},
		{name: "bad sha", args: []string{"lookup", "--sha256", "abc", "--data-dir", dir}, wantErr: true},
		{name: "dash text", args: []string{"lookup", "--data-dir", dir, "--", "-x"}, wantErr: true, errOut: []string{"no original is recorded"}},
		{name: "no table", args: []string{"stats", "--data-dir", t.TempDir()}, wantErr: true},
		{name: "unknown", args: []string{"frob"}, wantErr: true},
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
			for _, w := range tt.errOut {
				if !strings.Contains(strings.Join(strings.Fields(errOut), " "), w) {
					t.Errorf("stderr lacks %q:\n%s", w, errOut)
				}
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
	if err != nil || !strings.Contains(out, "via "+srv.URL) {
		t.Fatalf("stats through the proxy: %v\n%s", err, out)
	}
	_, _, err = runOrig(t, "", "stats", "--data-dir", dir, "--proxy", "http://127.0.0.1:1")
	if err == nil || !strings.Contains(err.Error(), "a running proxy holds the originals table") {
		t.Errorf("got %v", err)
	}
}
