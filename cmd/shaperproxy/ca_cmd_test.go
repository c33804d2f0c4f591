package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/shaperproxy/shaperproxy/internal/config"
	"github.com/shaperproxy/shaperproxy/proxy"
)

// TestCAInit writes a CA once (key 0600), says how to trust it, keeps it
// on a second run, and serve with intercept loads it.
func TestCAInit(t *testing.T) {
	dir := t.TempDir()
	var out bytes.Buffer
	if err := run(context.Background(), []string{"ca", "init", "--data-dir", dir}, &out, &out); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"created a local CA", "NODE_EXTRA_CA_CERTS", "SSL_CERT_FILE", "REQUESTS_CA_BUNDLE"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
	key, err := os.Stat(filepath.Join(dir, proxy.CAKeyFile))
	if err != nil || key.Mode().Perm() != 0o600 {
		t.Fatalf("key file: %v, mode %v", err, key.Mode())
	}
	before, _ := os.ReadFile(filepath.Join(dir, proxy.CACertFile))
	out.Reset()
	if err := run(context.Background(), []string{"ca", "init", "--data-dir", dir}, &out, &out); err != nil || !strings.Contains(out.String(), "already exists") {
		t.Fatalf("second init: %v\n%s", err, out.String())
	}
	if after, _ := os.ReadFile(filepath.Join(dir, proxy.CACertFile)); !bytes.Equal(before, after) {
		t.Fatal("second init replaced the CA")
	}
	c, err := loadConfig(serveFlags{dataDir: dir, upstream: "http://127.0.0.1:1"})
	if err != nil {
		t.Fatal(err)
	}
	c.Intercept = []string{"api.deepseek.com"}
	if _, err := newAppForTest(c); err != nil {
		t.Fatalf("intercept with the CA: %v", err)
	}
}

func newAppForTest(c config.Config) (*stack, error) {
	a, err := build(c, nil)
	if err == nil {
		a.Close()
	}
	return a, err
}
