package main

import (
	"context"
	"flag"
	"fmt"
	"io"

	"github.com/shaperproxy/shaperproxy/proxy"
)

const caUsageText = `usage: shaperproxy ca init [--data-dir DIR | --config FILE]

Create the local CA of HTTPS_PROXY mode (ca.pem, and ca-key.pem mode 0600,
in the data directory) if it does not exist, and print how to make the
tools you run through the proxy trust it.
`

func runCA(_ context.Context, args []string, stdout, stderr io.Writer) error {
	switch {
	case len(args) == 0:
		_, err := io.WriteString(stdout, caUsageText)
		return err
	case isHelpFlag(args[0]):
		_, err := io.WriteString(stdout, caUsageText)
		if err == nil {
			err = flag.ErrHelp
		}
		return err
	case args[0] != "init":
		return usagef("ca", "unknown command %q (ca init)", args[0])
	}
	fs := newFlagSet("ca init", caUsageText, stdout)
	dataDir := fs.String("data-dir", "", "data `directory` (default: the config's data_dir, else $SHAPERPROXY_DATA_DIR, else the user's state directory)")
	cfg := fs.String("config", "", "take data_dir from this configuration `file`, as serve does")
	if err := fs.parse(args[1:]); err != nil {
		return err
	}
	dir, err := dataDirFrom(*dataDir, *cfg)
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
  export NODE_EXTRA_CA_CERTS=%[1]s    # Node.js tools (opencode, qwen-code; plain Node fetch also needs NODE_USE_ENV_PROXY=1)
  export SSL_CERT_FILE=%[1]s          # Go, OpenSSL-based tools, Python httpx (the OpenAI Python SDK); replaces the system bundle: concatenate if needed
  export REQUESTS_CA_BUNDLE=%[1]s     # Python requests
Then list the hosts to decrypt in the config: intercept = ["api.deepseek.com"]
`, path)
	return nil
}
