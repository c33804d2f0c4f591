package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"

	"github.com/shaperproxy/shaperproxy/proxy"
)

func runCA(_ context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 || args[0] != "init" {
		return errors.New("usage: shaperproxy ca init [--data-dir DIR]")
	}
	fs := flag.NewFlagSet("ca init", flag.ContinueOnError)
	fs.SetOutput(stderr)
	dataDir := fs.String("data-dir", "", "data `directory`")
	if err := fs.Parse(args[1:]); err != nil {
		return err
	}
	dir, err := resolveDataDir(*dataDir)
	if err != nil {
		return err
	}
	path, created, err := proxy.InitCA(dir)
	if err != nil {
		return err
	}
	if created {
		fmt.Fprintf(stdout, "created a local CA: %s (key mode 0600 beside it)\n", path)
	} else {
		fmt.Fprintf(stdout, "a local CA already exists: %s\n", path)
	}
	fmt.Fprintf(stdout, `
Trust it in the tools you run through HTTPS_PROXY (only those; do not add it to the system store):
  export HTTPS_PROXY=http://127.0.0.1:8787
  export NODE_EXTRA_CA_CERTS=%[1]s    # Node.js tools (Claude Code, opencode, qwen-code)
  export SSL_CERT_FILE=%[1]s          # Go and OpenSSL-based tools (replaces the system bundle: concatenate if needed)
  export REQUESTS_CA_BUNDLE=%[1]s     # Python requests / httpx
Then list the hosts to decrypt in the config: intercept = ["api.deepseek.com"]
`, path)
	return nil
}
