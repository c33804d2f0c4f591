package main

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/shaperproxy/shaperproxy/internal/config"
)

// TestContribFiles keeps contrib/ consistent with the program: the
// container's configuration loads, listens on every interface with client
// keys, and is where the Dockerfile runs serve from; the Dockerfile builds
// a static binary, runs it as a non-root user and makes the data
// directory a volume; the systemd unit runs serve with a config.
func TestContribFiles(t *testing.T) {
	contrib := filepath.Join("..", "..", "contrib")
	c, err := config.Load(filepath.Join(contrib, "container.toml"))
	if err != nil {
		t.Fatalf("contrib/container.toml: %v", err)
	}
	if c.Listen != "0.0.0.0:8787" || c.DataDir != "/data" || c.ClientKeysEnv == "" || c.AllowUnauthenticated {
		t.Errorf("container.toml: listen %q, data_dir %q, client_keys_env %q, allow_unauthenticated %v",
			c.Listen, c.DataDir, c.ClientKeysEnv, c.AllowUnauthenticated)
	}
	docker := readFileT(t, filepath.Join(contrib, "Dockerfile"))
	for _, want := range []string{
		"CGO_ENABLED=0 go build",
		"COPY contrib/container.toml /etc/shaperproxy/config.toml",
		`CMD ["serve", "--config", "/etc/shaperproxy/config.toml"]`,
		`VOLUME ["/data"]`,
		"ENV SHAPERPROXY_DATA_DIR=/data",
		"USER 65532:65532",
		"ARG GO_VERSION=" + goModVersion(t),
	} {
		if !strings.Contains(docker, want) {
			t.Errorf("Dockerfile lacks %q", want)
		}
	}
	if readme := readFileT(t, filepath.Join("..", "..", "README.md")); !strings.Contains(readme, "Go "+goModVersion(t)+" or later") {
		t.Errorf("the README does not state go.mod's Go version %s", goModVersion(t))
	}
	unit := readFileT(t, filepath.Join(contrib, "shaperproxy.service"))
	for _, want := range []string{"ExecStart=/usr/local/bin/shaperproxy serve --config /etc/shaperproxy/config.toml",
		"DynamicUser=yes", "StateDirectory=shaperproxy", "NoNewPrivileges=yes", "ProtectSystem=strict"} {
		if !strings.Contains(unit, want) {
			t.Errorf("shaperproxy.service lacks %q", want)
		}
	}
}

// goModVersion is the go line of go.mod.
func goModVersion(t *testing.T) string {
	t.Helper()
	m := regexp.MustCompile(`(?m)^go (\S+)$`).FindStringSubmatch(readFileT(t, filepath.Join("..", "..", "go.mod")))
	if m == nil {
		t.Fatal("go.mod has no go line")
	}
	return m[1]
}

func readFileT(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
