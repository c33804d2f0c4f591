package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/shaperproxy/shaperproxy/internal/config"
	"github.com/shaperproxy/shaperproxy/internal/heapwarm"
	"github.com/shaperproxy/shaperproxy/proxy"
)

// serveFlags are the flags of `serve` that override the config file.
type serveFlags struct {
	config, listen, upstream, dataDir string
}

const serveUsage = `usage: shaperproxy serve [flags]

Runs the proxy: base-URL mode (OPENAI_BASE_URL=http://ADDR/v1) and HTTPS_PROXY mode
on one listener, /healthz and /metrics beside them. It prints what it serves, warns
about settings that fail silently, and logs one line per call and per tunnel.
SIGTERM or SIGINT stops it cleanly (calls in flight get shutdown_grace, a second
signal cuts them); SIGHUP is logged and ignored: the configuration is not reloaded.`

func parseServeFlags(args []string, stdout io.Writer) (serveFlags, error) {
	var f serveFlags
	fs := newFlagSet("serve", serveUsage, stdout)
	fs.StringVar(&f.config, "config", "", "TOML configuration `file` (see config.example.toml)")
	fs.StringVar(&f.listen, "listen", "", "listen `address` (default 127.0.0.1:8787)")
	fs.StringVar(&f.upstream, "upstream", "", "upstream `URL` of the default route (default "+config.DefaultUpstream+"; ignored when the config has a default route)")
	fs.StringVar(&f.dataDir, "data-dir", "", "data `directory` (default $SHAPERPROXY_DATA_DIR or ~/.local/state/shaperproxy)")
	return f, fs.parse(args)
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
	f, err := parseServeFlags(args, stdout)
	if err != nil {
		return err
	}
	c, err := loadConfig(f)
	if err != nil {
		return err
	}
	logger := newLogger(stderr, c.LogLevel, c.LogFormat)
	// SIGHUP is caught from here on: it must not end the process.
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	for _, w := range startupWarnings(c, f.upstream, os.Getenv) {
		logger.Warn(w.text, "key", w.key)
	}
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
	defer heapwarm.FromEnv()() // the process's heap, not one proxy's: here, not in build
	st, err := build(c, logger)
	if err != nil {
		return err
	}
	defer st.Close()
	lns, err := listen(c, st.Proxy)
	if err != nil {
		return err
	}
	url := localURL(lns.main.Addr())
	if err := writeServeURL(c.DataDir, url); err != nil {
		logger.Warn("cannot record the listen address for the forensic commands", "err", err)
	}
	defer os.Remove(filepath.Join(c.DataDir, serveURLFile))
	printBanner(stdout, newBanner(c, lns, len(keys), os.Getenv))
	return serveUntilDone(ctx, st.Proxy, lns, c.ShutdownGrace, hup, logger)
}

// listeners are serve's listeners; admin is nil without admin_listen.
type listeners struct{ main, admin net.Listener }

// listen opens the listener and the admin listener, and tells the proxy
// about both (it never relays to them).
func listen(c config.Config, p *proxy.Proxy) (listeners, error) {
	var lns listeners
	var err error
	if lns.main, err = net.Listen("tcp", c.Listen); err != nil {
		return lns, fmt.Errorf("listen: %w", err)
	}
	p.AddListener(lns.main.Addr())
	if c.AdminListen == "" {
		return lns, nil
	}
	if lns.admin, err = net.Listen("tcp", c.AdminListen); err != nil {
		_ = lns.main.Close()
		return lns, fmt.Errorf("admin_listen: %w", err)
	}
	p.AddListener(lns.admin.Addr())
	return lns, nil
}

// localURL is the URL a process on this machine reaches a listener at:
// its address, with 127.0.0.1 for an unspecified one (0.0.0.0, [::]).
func localURL(a net.Addr) string {
	host, port, err := net.SplitHostPort(a.String())
	if err != nil {
		return "http://" + a.String()
	}
	if ip := net.ParseIP(host); ip == nil || ip.IsUnspecified() {
		host = "127.0.0.1"
	}
	return "http://" + net.JoinHostPort(host, port)
}

// serveUntilDone serves until ctx is cancelled, then stops cleanly (see
// stopServing). A request header must arrive within 30 s and an idle
// keep-alive connection is closed after 5 minutes; request bodies and
// response writes are bounded by the proxy's own idle deadlines
// (timeouts.client_idle), never a whole-response timeout that would cut a
// long stream. A signal on hup (SIGHUP) is logged: the configuration is
// not reloaded.
func serveUntilDone(ctx context.Context, p *proxy.Proxy, lns listeners, grace time.Duration, hup <-chan os.Signal, logger *slog.Logger) error {
	// The main listener's usual requests are served by proxy.Server, the
	// rest (CONNECT, /metrics…) by net/http's server behind it.
	main := proxy.NewServer(&http.Server{Handler: p, ConnContext: p.ConnContext, ReadHeaderTimeout: 30 * time.Second, IdleTimeout: 5 * time.Minute, ErrorLog: slog.NewLogLogger(logger.Handler(), slog.LevelDebug)})
	servers := []server{main}
	errc := make(chan error, 2)
	go func() { errc <- main.Serve(lns.main) }()
	if lns.admin != nil {
		admin := &http.Server{Handler: p.AdminHandler(), ReadHeaderTimeout: 10 * time.Second, IdleTimeout: time.Minute}
		servers = append(servers, admin)
		go func() { errc <- admin.Serve(lns.admin) }()
	}
	for {
		select {
		case err := <-errc:
			for _, s := range servers {
				_ = s.Close()
			}
			return err
		case <-hup:
			logger.Warn("SIGHUP: reloading the configuration is not supported; restart shaperproxy to apply a change (SIGTERM lets the calls in flight finish within shutdown_grace)")
		case <-ctx.Done():
			return stopServing(p, servers, grace, cutOf(ctx), logger)
		}
	}
}

// server is what serve stops: *http.Server and *proxy.Server.
type server interface {
	Shutdown(context.Context) error
	Close() error
}

// cutWait bounds the wait for the calls cut at the end of a stop to
// record their ends.
const cutWait = 5 * time.Second

// stopServing stops cleanly: the listeners close, the calls in flight
// (base-URL and intercepted alike) get grace to finish, and what is still
// running then, or when cut is closed (a second signal), is cut, each
// call logged. Tunnels that are not intercepted are closed at the end. It
// returns nil when every call finished, an error saying how many were cut
// otherwise.
func stopServing(p *proxy.Proxy, servers []server, grace time.Duration, cut <-chan struct{}, logger *slog.Logger) error {
	logger.Info("stopping: no new connections; waiting for the calls in flight (a second signal cuts them)",
		"in_flight", p.InFlight(), "shutdown_grace", grace.String())
	gctx, cancel := context.WithTimeout(context.Background(), grace)
	defer cancel()
	cutByHand := make(chan bool, 1)
	go func() {
		select {
		case <-cut:
			cutByHand <- true
			cancel()
		case <-gctx.Done():
		}
	}()
	shut := make(chan error, len(servers))
	for _, s := range servers {
		go func() { shut <- s.Shutdown(gctx) }()
	}
	err := p.Drain(gctx)
	for range servers {
		err = errors.Join(err, <-shut)
	}
	n := 0
	if err != nil {
		n = p.Cut()
		for _, s := range servers {
			_ = s.Close()
		}
		wctx, wcancel := context.WithTimeout(context.Background(), cutWait)
		_ = p.Drain(wctx)
		wcancel()
	}
	p.CloseTunnels()
	if n == 0 {
		logger.Info("stopped: every call finished")
		return nil
	}
	why := "shutdown_grace " + grace.String() + " over"
	if len(cutByHand) > 0 {
		why = "a second signal"
	}
	return fmt.Errorf("stopped with %d call(s) cut by %s", n, why)
}

// newLogger returns serve's logger: text (key=value) or JSON lines, times
// in UTC.
func newLogger(w io.Writer, level, format string) *slog.Logger {
	var l slog.Level
	_ = l.UnmarshalText([]byte(level))
	opts := &slog.HandlerOptions{Level: l, ReplaceAttr: utcTime}
	if format == "json" {
		return slog.New(slog.NewJSONHandler(w, opts))
	}
	return slog.New(slog.NewTextHandler(w, opts))
}

// utcTime writes a record's time in UTC to the millisecond, as every
// command prints times, in text and JSON alike (the JSON handler's own
// format has nanoseconds).
func utcTime(groups []string, a slog.Attr) slog.Attr {
	if a.Key == slog.TimeKey && len(groups) == 0 && a.Value.Kind() == slog.KindTime {
		a.Value = slog.StringValue(fmtTime(a.Value.Time()))
	}
	return a
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
