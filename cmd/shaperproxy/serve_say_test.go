package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/shaperproxy/shaperproxy/internal/config"
)

// TestBanner: the banner names every route with its prefix, upstream and
// where its key comes from (never the key), the listeners, the
// intercepted and tunnelled hosts and the features.
func TestBanner(t *testing.T) {
	c := config.Default()
	c.DataDir = "/data"
	c.Intercept = []string{"api.deepseek.com"}
	c.Tunnel = []string{"*.example.com"}
	c.Review.Routes = []string{"deepseek"}
	c.Capture.Enabled = false
	c.Routes = []config.Route{
		{Name: "deepseek", Upstream: "https://api.deepseek.com", Default: true, APIKeyEnv: "BANNER_KEY"},
		{Name: "openrouter", Prefix: "/openrouter", Upstream: "https://openrouter.ai", APIKey: "sk-in-the-file-0123456789"},
		{Name: "local", Prefix: "/local", Upstream: "http://10.0.0.7:8000", APIKeyEnv: "BANNER_UNSET"},
		{Name: "azure", Prefix: "/azure", Upstream: "https://user:sk-in-the-url-0123@azure.example.com/openai?api-key=sk-in-the-query-0123"},
	}
	env := map[string]string{"BANNER_KEY": "sk-from-env-0123456789"}
	ln, admin := listenT(t), listenT(t)
	var out strings.Builder
	printBanner(&out, newBanner(c, listeners{ln, admin}, 2, func(k string) string { return env[k] }))
	got := out.String()
	if strings.Contains(got, "sk-") {
		t.Fatalf("the banner shows a key:\n%s", got)
	}
	for _, want := range []*regexp.Regexp{
		regexp.MustCompile(`^shaperproxy \S+ listening on http://` + regexp.QuoteMeta(ln.Addr().String()) + ` \(data in /data\)\n`),
		regexp.MustCompile(`OPENAI_BASE_URL=http://` + regexp.QuoteMeta(ln.Addr().String()) + `/v1\n`),
		regexp.MustCompile(`admin: +http://` + regexp.QuoteMeta(admin.Addr().String())),
		regexp.MustCompile(`deepseek +\(default\) +-> https://api\.deepseek\.com +adds \$BANNER_KEY\n`),
		regexp.MustCompile(`openrouter +/openrouter +-> https://openrouter\.ai +adds its api_key\n`),
		regexp.MustCompile(`local +/local +-> http://10\.0\.0\.7:8000 +\$BANNER_UNSET is not set: forwards the client's Authorization\n`),
		regexp.MustCompile(`intercepted: +api\.deepseek\.com\n`),
		regexp.MustCompile(`tunnelled: +\*\.example\.com\n`),
		regexp.MustCompile(`shaping: +on \(policy cache-aware`),
		regexp.MustCompile(`capture: +off\n`),
		regexp.MustCompile(`guard: +on \(stall: observe\)\n`),
		regexp.MustCompile(`review: +on for routes deepseek\n`),
		regexp.MustCompile(`deliberate: +off\n`),
		regexp.MustCompile(`client keys: +on \(2\)\n`),
		regexp.MustCompile(`stop: .*2m0s.*SIGHUP does not reload`),
	} {
		if !want.MatchString(got) {
			t.Errorf("banner lacks %s:\n%s", want, got)
		}
	}
}

func listenT(t *testing.T) net.Listener {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	return ln
}

// TestStartupWarnings: each setting that fails silently gets its warning,
// naming its key; a correct configuration gets none.
func TestStartupWarnings(t *testing.T) {
	env := map[string]string{"SET_KEY": "sk-x", "SET_KEYS": "0123456789abcdef"}
	getenv := func(k string) string { return env[k] }
	route := func(mod func(*config.Route)) []config.Route {
		r := config.Route{Name: "r", Upstream: "https://api.deepseek.com", Default: true}
		if mod != nil {
			mod(&r)
		}
		return []config.Route{r}
	}
	for _, tc := range []struct {
		name     string
		routes   []config.Route
		keysEnv  string
		upstream string
		want     []string
	}{
		{"clean", route(func(r *config.Route) { r.APIKeyEnv = "SET_KEY" }), "SET_KEYS", "", nil},
		{"v1", route(func(r *config.Route) { r.Upstream = "https://api.deepseek.com/v1/" }), "", "", []string{"route[0].upstream"}},
		{"v1 under a path", route(func(r *config.Route) { r.Upstream = "https://openrouter.ai/api/v1" }), "", "", []string{"route[0].upstream"}},
		{"v1beta is not v1", route(func(r *config.Route) { r.Upstream = "https://host/v1beta" }), "", "", nil},
		{"unset api key", route(func(r *config.Route) { r.APIKeyEnv = "UNSET_KEY" }), "", "", []string{"route[0].api_key_env"}},
		{"key in the file wins", route(func(r *config.Route) { r.APIKey, r.APIKeyEnv = "k", "UNSET_KEY" }), "", "", nil},
		{"upstream ignored", route(nil), "", "https://other.example", []string{"route[0].default"}},
		{"upstream the same", route(nil), "", "https://api.deepseek.com", nil},
		{"unset client keys", route(nil), "UNSET_KEYS", "", []string{"client_keys_env"}},
	} {
		c := config.Default()
		c.Routes, c.ClientKeysEnv = tc.routes, tc.keysEnv
		var got []string
		for _, w := range startupWarnings(c, tc.upstream, getenv) {
			got = append(got, w.key)
		}
		if !slices.Equal(got, tc.want) {
			t.Errorf("%s: warnings %v, want %v", tc.name, got, tc.want)
		}
	}
}

// TestServeWarnsAtStart runs serve with every silent misconfiguration at
// once: each is logged as a warning at start, and the address recorded
// for the forensic commands is 127.0.0.1 for a listener on every address.
func TestServeWarnsAtStart(t *testing.T) {
	cfg := filepath.Join(t.TempDir(), "c.toml")
	text := `listen = "0.0.0.0:0"
allow_unauthenticated = true
client_keys_env = "SHAPERPROXY_TEST_UNSET_KEYS"
[[route]]
name = "ds"
default = true
upstream = "http://127.0.0.1:1/v1"
api_key_env = "SHAPERPROXY_TEST_UNSET_KEY"
`
	if err := os.WriteFile(cfg, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	s := runServeT(t, "--config", cfg, "--upstream", "https://ignored.example", "--data-dir", dir)
	log := s.stderr.String()
	for _, want := range []string{"key=route[0].upstream", "key=route[0].api_key_env", "key=route[0].default", "key=client_keys_env", "allow_unauthenticated = true"} {
		if !strings.Contains(log, want) || !strings.Contains(log, "level=WARN") {
			t.Errorf("no warning with %q:\n%s", want, log)
		}
	}
	if u := servedURL(dir); !strings.HasPrefix(u, "http://127.0.0.1:") {
		t.Fatalf("serve.url = %q, want 127.0.0.1 for a 0.0.0.0 listener", u)
	}
}

// TestLocalURL: an unspecified listen address is reached on 127.0.0.1.
func TestLocalURL(t *testing.T) {
	for addr, want := range map[string]string{
		"0.0.0.0:8787": "http://127.0.0.1:8787", "[::]:8787": "http://127.0.0.1:8787",
		"127.0.0.1:9": "http://127.0.0.1:9", "[::1]:9": "http://[::1]:9", "10.1.2.3:80": "http://10.1.2.3:80",
	} {
		a, err := net.ResolveTCPAddr("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		if got := localURL(a); got != want {
			t.Errorf("localURL(%s) = %s, want %s", addr, got, want)
		}
	}
}

// logRig builds the whole stack with serve's logger in format at level,
// in front of an upstream answering one SSE stream, and sends one chat
// request whose query holds a key.
func logRig(t *testing.T, format, level string) string {
	t.Helper()
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		fmt.Fprint(w, "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"hi\"}}]}\n\ndata: [DONE]\n\n")
	}))
	t.Cleanup(up.Close)
	c := config.Default()
	c.DataDir, c.LogFormat, c.LogLevel = t.TempDir(), format, level
	c.Routes = c.WithDefaultRoute(up.URL)
	out := &outBuffer{}
	st, err := build(c, newLogger(out, c.LogLevel, c.LogFormat))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	srv := httptest.NewServer(st)
	t.Cleanup(srv.Close)
	resp, err := http.Post(srv.URL+"/v1/chat/completions?api_key=sk-query-secret-0123", "application/json",
		strings.NewReader(`{"model":"deepseek-reasoner","stream":true,"messages":[{"role":"user","content":"hi"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	waitFor(t, out, "call")
	if strings.Contains(out.String(), "sk-query-secret") {
		t.Fatalf("a key reached the log:\n%s", out)
	}
	return out.String()
}

// TestLogFormats: log_format = "json" gives one JSON object per line, with
// the call line's fields, times in UTC and no err on success; "text" gives
// key=value lines with the same fields, again no err= on success.
func TestLogFormats(t *testing.T) {
	var call map[string]any
	for _, line := range strings.Split(strings.TrimSpace(logRig(t, "json", "info")), "\n") {
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatalf("not JSON: %q", line)
		}
		if m["msg"] == "call" {
			call = m
		}
	}
	for _, k := range []string{"time", "level", "call", "route", "model", "method", "path", "stream", "status", "outcome", "duration_ms", "bytes", "events", "first_token_ms"} {
		if _, ok := call[k]; !ok {
			t.Errorf("JSON call line lacks %q: %v", k, call)
		}
	}
	if _, ok := call["err"]; ok || !strings.HasSuffix(call["time"].(string), "Z") || call["model"] != "deepseek-reasoner" || call["outcome"] != "complete" {
		t.Errorf("JSON call line: %v", call)
	}
	text := logRig(t, "text", "info")
	line := regexp.MustCompile(`(?m)^time=\S+Z level=INFO msg=call call=[0-9a-f]{16} route=default model=deepseek-reasoner method=POST path=\S+ stream=true status=200 outcome=complete duration_ms=\S+ bytes=\d+ events=2 first_token_ms=\S+$`)
	if !line.MatchString(text) || strings.Contains(text, "err=") {
		t.Errorf("text call line:\n%s", text)
	}
	if strings.Contains(text, "msg=request") {
		t.Errorf("per-request detail at info:\n%s", text)
	}
}

// TestDebugLog: log_level = "debug" adds a line per request (what the
// proxy understood of it) and per upstream response header.
func TestDebugLog(t *testing.T) {
	text := logRig(t, "text", "debug")
	for _, want := range []*regexp.Regexp{
		regexp.MustCompile(`level=DEBUG msg=request call=[0-9a-f]{16} route=default method=POST path=\S+ model=deepseek-reasoner chat=true stream=true conversation=\S+ client_body_bytes=\d+`),
		regexp.MustCompile(`level=DEBUG msg=response call=[0-9a-f]{16} status=200 content_type=text/event-stream`),
	} {
		if !want.MatchString(text) {
			t.Errorf("debug log lacks %s:\n%s", want, text)
		}
	}
}

// TestServeBenchProfilesUsage: serve, bench and profiles print a usage
// error once and exit 2.
func TestServeBenchProfilesUsage(t *testing.T) {
	for _, args := range [][]string{
		{"serve", "--bogus"}, {"serve", "extra"}, {"bench", "--bogus"}, {"bench", "extra"},
		{"profiles", "--bogus"}, {"profiles", "extra"}, {"serve", "--listen"},
	} {
		code, stdout, stderr := runMain(t, args...)
		if code != 2 || stdout != "" || strings.Count(stderr, "shaperproxy: "+args[0]+": ") != 1 || !strings.Contains(stderr, "Run 'shaperproxy help "+args[0]+"'") {
			t.Errorf("%v: exit %d, stdout %q, stderr %q", args, code, stdout, stderr)
		}
	}
}

// TestServeHelp: serve --help prints its usage and flags on stdout.
func TestServeHelp(t *testing.T) {
	code, stdout, stderr := runMain(t, "serve", "--help")
	if code != 0 || stderr != "" || !strings.Contains(stdout, "usage: shaperproxy serve") || !strings.Contains(stdout, "-upstream") {
		t.Fatalf("exit %d, stdout %q, stderr %q", code, stdout, stderr)
	}
}

// TestLogTimes: serve's log lines carry their time in UTC to the
// millisecond, text and JSON alike, as the README says every command
// prints times.
func TestLogTimes(t *testing.T) {
	re := regexp.MustCompile(`^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$`)
	for _, format := range []string{"text", "json"} {
		var buf bytes.Buffer
		newLogger(&buf, "info", format).Info("hello", "k", 1)
		line := strings.TrimSpace(buf.String())
		var got string
		if format == "json" {
			var m map[string]any
			if err := json.Unmarshal([]byte(line), &m); err != nil {
				t.Fatalf("json line %q: %v", line, err)
			}
			got, _ = m["time"].(string)
		} else if _, rest, ok := strings.Cut(line, "time="); ok {
			got, _, _ = strings.Cut(rest, " ")
		}
		if !re.MatchString(got) {
			t.Errorf("%s: time %q in %q, want 2025-03-01T12:00:00.000Z", format, got, line)
		}
	}
}
