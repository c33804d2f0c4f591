package main

import (
	"fmt"
	"io"
	"net/url"
	"strings"
	"text/tabwriter"

	"github.com/shaperproxy/shaperproxy/internal/config"
	"github.com/shaperproxy/shaperproxy/internal/redact"
)

// banner is what serve says it does when it starts: where it listens,
// every route, the hosts it relays, which features are on. It names no
// key, only where a route's key comes from.
type banner struct {
	version, dataDir    string
	listen, local       string // the listener's address, and the URL a local client uses
	admin               string // the admin listener's URL, "" without one
	routes              []bannerRoute
	intercept, tunnel   []string
	features            [][2]string // name, state
	logLevel, logFormat string
	grace               string
}

// bannerRoute is one route as the banner shows it.
type bannerRoute struct {
	name, prefix, upstream, key string
	isDefault                   bool
}

// newBanner describes what serve runs for c on lns; keys is the number of
// client keys.
func newBanner(c config.Config, lns listeners, keys int, getenv func(string) string) banner {
	b := banner{
		version: versionString(), dataDir: c.DataDir,
		listen: lns.main.Addr().String(), local: localURL(lns.main.Addr()),
		intercept: c.Intercept, tunnel: c.Tunnel,
		logLevel: c.LogLevel, logFormat: c.LogFormat, grace: c.ShutdownGrace.String(),
	}
	if lns.admin != nil {
		b.admin = localURL(lns.admin.Addr())
	}
	for _, r := range c.Routes {
		b.routes = append(b.routes, bannerRoute{name: r.Name, prefix: r.Prefix, upstream: redact.URL(r.Upstream), key: routeKey(r, getenv), isDefault: r.Default})
	}
	b.features = features(c, keys)
	return b
}

// routeKey says whether a route adds its own key, and from where; never
// the key.
func routeKey(r config.Route, getenv func(string) string) string {
	switch {
	case r.APIKey != "":
		return "adds its api_key"
	case r.APIKeyEnv != "" && getenv(r.APIKeyEnv) != "":
		return "adds $" + r.APIKeyEnv
	case r.APIKeyEnv != "":
		return "$" + r.APIKeyEnv + " is not set: forwards the client's Authorization"
	}
	return "forwards the client's Authorization"
}

// features says which features c turns on.
func features(c config.Config, keys int) [][2]string {
	onOff := func(on bool, detail string) string {
		if !on {
			return "off"
		}
		return strings.TrimSpace("on " + detail)
	}
	routes := func(rs []string) string {
		if len(rs) == 0 {
			return "off"
		}
		return "on for routes " + strings.Join(rs, ", ")
	}
	shaping := fmt.Sprintf("(policy %s, op %s, max_chars %d)", c.Shaping.Policy, c.Shaping.Op, c.Shaping.MaxChars)
	return [][2]string{
		{"shaping", onOff(c.Shaping.Enabled, shaping)},
		{"capture", onOff(c.Capture.Enabled, "("+c.DataDir+"/capture)")},
		{"guard", onOff(c.Guard.Enabled, "(stall: "+c.Guard.StallAction+")")},
		{"review", routes(c.Review.Routes)},
		{"deliberate", routes(c.Deliberate.Routes)},
		{"client keys", onOff(keys > 0, fmt.Sprintf("(%d)", keys))},
	}
}

// printBanner writes the banner. Its first line is "shaperproxy VERSION
// listening on URL (data in DIR)".
func printBanner(w io.Writer, b banner) {
	fmt.Fprintf(w, "shaperproxy %s listening on http://%s (data in %s)\n", b.version, b.listen, b.dataDir)
	fmt.Fprintf(w, "  base-URL mode:    OPENAI_BASE_URL=%s/v1\n", b.local)
	fmt.Fprintf(w, "  HTTPS_PROXY mode: HTTPS_PROXY=%s\n", b.local)
	if b.admin != "" {
		fmt.Fprintf(w, "  admin:            %s (/healthz, /metrics, /_shaperproxy/)\n", b.admin)
	}
	fmt.Fprintln(w, "  routes:")
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	for _, r := range b.routes {
		prefix := r.prefix
		switch {
		case r.isDefault && prefix == "":
			prefix = "(default)"
		case r.isDefault:
			prefix += " (default)"
		}
		fmt.Fprintf(tw, "    %s\t%s\t-> %s\t%s\n", r.name, prefix, r.upstream, r.key)
	}
	_ = tw.Flush()
	fmt.Fprintf(w, "  intercepted:      %s\n", listOr(b.intercept, "none"))
	fmt.Fprintf(w, "  tunnelled:        %s\n", listOr(b.tunnel, "none (other CONNECT and proxy-form targets are refused)"))
	for _, f := range b.features {
		fmt.Fprintf(w, "  %-17s %s\n", f[0]+":", f[1])
	}
	fmt.Fprintf(w, "  logs:             %s, %s\n", b.logFormat, b.logLevel)
	fmt.Fprintf(w, "  stop:             SIGTERM/SIGINT let calls finish for %s, a second cuts them; SIGHUP does not reload\n", b.grace)
}

func listOr(l []string, none string) string {
	if len(l) == 0 {
		return none
	}
	return strings.Join(l, ", ")
}

// warning is a setting that would otherwise fail silently; key names it.
type warning struct{ key, text string }

// startupWarnings finds the settings of c that fail silently: an upstream
// ending in /v1, --upstream ignored for the config's default route, an
// api_key_env or client_keys_env naming an unset variable.
func startupWarnings(c config.Config, upstreamFlag string, getenv func(string) string) []warning {
	var ws []warning
	for i, r := range c.Routes {
		key := fmt.Sprintf("route[%d]", i)
		if u, err := url.Parse(r.Upstream); err == nil && strings.HasSuffix(strings.TrimSuffix(u.Path, "/"), "/v1") {
			ws = append(ws, warning{key + ".upstream", fmt.Sprintf("route %q: upstream %s ends in /v1; clients whose base URL ends in /v1 (OPENAI_BASE_URL=http://…/v1) send /v1/… themselves, so requests go to …/v1/v1/… and 404: drop /v1 from the upstream", r.Name, redact.URL(r.Upstream))})
		}
		if r.APIKey == "" && r.APIKeyEnv != "" && getenv(r.APIKeyEnv) == "" {
			ws = append(ws, warning{key + ".api_key_env", fmt.Sprintf("route %q: api_key_env names $%s, which is not set (or empty): no key is added, the client's own Authorization goes upstream", r.Name, r.APIKeyEnv)})
		}
		if r.Default && upstreamFlag != "" && r.Upstream != upstreamFlag {
			ws = append(ws, warning{key + ".default", fmt.Sprintf("--upstream %s is ignored: the configuration's route %q is the default route (upstream %s)", redact.URL(upstreamFlag), r.Name, redact.URL(r.Upstream))})
		}
	}
	if c.ClientKeysEnv != "" && getenv(c.ClientKeysEnv) == "" {
		text := fmt.Sprintf("client_keys_env names $%s, which is not set (or empty): no client key comes from it", c.ClientKeysEnv)
		if len(c.ClientKeys) == 0 {
			text += "; clients are not asked for a key"
		}
		ws = append(ws, warning{"client_keys_env", text})
	}
	return ws
}
