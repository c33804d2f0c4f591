package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/shaperproxy/shaperproxy/internal/config"
	"github.com/shaperproxy/shaperproxy/proxy"
)

// serveFlags are the flags of `serve` that override the config file.
type serveFlags struct {
	config, listen, upstream, dataDir string
}

func parseServeFlags(args []string, stderr io.Writer) (serveFlags, error) {
	var f serveFlags
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&f.config, "config", "", "TOML configuration `file` (see config.example.toml)")
	fs.StringVar(&f.listen, "listen", "", "listen `address` (default 127.0.0.1:8787)")
	fs.StringVar(&f.upstream, "upstream", "", "upstream `URL` of the default route (default "+config.DefaultUpstream+")")
	fs.StringVar(&f.dataDir, "data-dir", "", "data `directory` (default $SHAPERPROXY_DATA_DIR or ~/.local/state/shaperproxy)")
	return f, fs.Parse(args)
}

// loadConfig reads the config file (if any) and applies the flags.
func loadConfig(f serveFlags) (config.Config, error) {
	c := config.Default()
	if f.config != "" {
		var err error
		if c, err = config.Load(f.config); err != nil {
			return c, err
		}
	}
	if f.listen != "" {
		c.Listen = f.listen
	}
	dir, err := resolveDataDir(firstNonEmpty(f.dataDir, c.DataDir))
	if err != nil {
		return c, err
	}
	c.DataDir = dir
	c.Routes = c.WithDefaultRoute(f.upstream)
	return c, c.Validate()
}

func firstNonEmpty(s ...string) string {
	for _, v := range s {
		if v != "" {
			return v
		}
	}
	return ""
}

func runServe(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	f, err := parseServeFlags(args, stderr)
	if err != nil {
		return err
	}
	c, err := loadConfig(f)
	if err != nil {
		return err
	}
	logger := newLogger(stderr, c.LogLevel)
	keys, err := clientKeys(c, os.Getenv)
	if err != nil {
		return err
	}
	open, err := checkExposure(c, keys)
	if err != nil {
		return err
	}
	for _, addr := range open {
		logger.Warn("serving a non-loopback address without client keys (allow_unauthenticated = true): anyone who can reach it can use the routes' api keys", "addr", addr)
	}
	st, err := build(c, logger)
	if err != nil {
		return err
	}
	defer st.Close()
	ln, err := net.Listen("tcp", c.Listen)
	if err != nil {
		return fmt.Errorf("listen: %w", err)
	}
	st.AddListener(ln.Addr())
	url := "http://" + ln.Addr().String()
	if err := writeServeURL(c.DataDir, url); err != nil {
		logger.Warn("cannot record the listen address for the forensic commands", "err", err)
	}
	defer os.Remove(filepath.Join(c.DataDir, serveURLFile))
	fmt.Fprintf(stdout, "shaperproxy %s listening on %s (data in %s)\n", versionString(), url, c.DataDir)
	fmt.Fprintf(stdout, "  base-URL mode:    OPENAI_BASE_URL=http://%s/v1\n", ln.Addr())
	fmt.Fprintf(stdout, "  HTTPS_PROXY mode: HTTPS_PROXY=http://%s (intercepting %v)\n", ln.Addr(), c.Intercept)
	return serveUntilDone(ctx, st.Proxy, ln, c.AdminListen, logger)
}

// serveUntilDone serves until ctx is cancelled, then shuts down
// gracefully (in-flight streams get 10 seconds). A request header must
// arrive within 30 s and an idle keep-alive connection is closed after 5
// minutes; request bodies and response writes are bounded by the proxy's
// own idle deadlines (timeouts.client_idle), never a whole-response
// timeout that would cut a long stream.
func serveUntilDone(ctx context.Context, p *proxy.Proxy, ln net.Listener, admin string, logger *slog.Logger) error {
	srv := &http.Server{Handler: p, ReadHeaderTimeout: 30 * time.Second, IdleTimeout: 5 * time.Minute, ErrorLog: slog.NewLogLogger(logger.Handler(), slog.LevelDebug)}
	errc := make(chan error, 2)
	go func() { errc <- srv.Serve(ln) }()
	var adminSrv *http.Server
	if admin != "" {
		aln, err := net.Listen("tcp", admin)
		if err != nil {
			_ = srv.Close()
			return fmt.Errorf("admin_listen: %w", err)
		}
		p.AddListener(aln.Addr()) // never relayed to
		adminSrv = &http.Server{Handler: p.AdminHandler(), ReadHeaderTimeout: 10 * time.Second, IdleTimeout: time.Minute}
		go func() { errc <- adminSrv.Serve(aln) }()
	}
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if adminSrv != nil {
		_ = adminSrv.Shutdown(sctx)
	}
	return srv.Shutdown(sctx)
}

func newLogger(w io.Writer, level string) *slog.Logger {
	var l slog.Level
	_ = l.UnmarshalText([]byte(level))
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: l}))
}

// serveURLFile, in the data directory, holds the URL of the running proxy
// so that the forensic commands can ask it (it holds the originals table).
const serveURLFile = "serve.url"

func writeServeURL(dir, url string) error {
	if err := ensureDataDir(dir); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, serveURLFile), []byte(url+"\n"), 0o600)
}

// servedURL returns the URL a running proxy recorded in dir, or "".
func servedURL(dir string) string {
	b, err := os.ReadFile(filepath.Join(dir, serveURLFile))
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}
