// Package config reads shaperproxy's TOML configuration.
//
// Use Default to get every default, Load to parse a file onto it, and
// Validate to check the result; every error names the key it is about.
// Keys not known to this package are an error, so a misspelt key is never
// silently ignored.
package config

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/BurntSushi/toml"
	"github.com/shaperproxy/shaperproxy/capture"
	"github.com/shaperproxy/shaperproxy/internal/deliberate"
	"github.com/shaperproxy/shaperproxy/internal/guard"
	"github.com/shaperproxy/shaperproxy/internal/profile"
	"github.com/shaperproxy/shaperproxy/internal/reqshape"
	"github.com/shaperproxy/shaperproxy/internal/review"
	"github.com/shaperproxy/shaperproxy/originals"
)

// Config is the whole configuration. Its zero value is not useful; start
// from Default.
type Config struct {
	// Listen is the address of the proxy listener (base-URL and
	// HTTPS_PROXY modes share it).
	Listen string `toml:"listen"`
	// AdminListen, when set, also serves /healthz, /metrics and the
	// admin endpoints on a separate address (the main listener keeps
	// serving them).
	AdminListen string `toml:"admin_listen"`
	// DataDir holds the CA, the originals table and the capture logs.
	// Empty means $SHAPERPROXY_DATA_DIR or the user's state directory.
	DataDir string `toml:"data_dir"`
	// MaxBodyBytes: request bodies larger than this are streamed through
	// without being parsed.
	MaxBodyBytes int64 `toml:"max_body_bytes"`
	// Intercept lists the hosts whose CONNECT tunnels are decrypted (with
	// the local CA) and sent through the pipeline. Other hosts are
	// tunnelled without decryption.
	Intercept []string `toml:"intercept"`
	// Tunnel lists the other hosts CONNECT and proxy-form requests may
	// reach, without decryption ("host", "host:port", "*.domain", "*";
	// wildcards reach public addresses only). Empty: intercepted hosts only.
	Tunnel []string `toml:"tunnel"`
	// AllowedHosts are Host names base-URL requests may carry besides IP
	// addresses, localhost and *.localhost.
	AllowedHosts []string `toml:"allowed_hosts"`
	// AllowedOrigins are the browser origins whose requests are served
	// (requests from other origins are refused; "*" allows all).
	AllowedOrigins []string `toml:"allowed_origins"`
	// ClientKeys and ClientKeysEnv (an environment variable holding
	// comma-separated keys) are the keys clients must present; see
	// proxy.Options.ClientKeys.
	ClientKeys    []string `toml:"client_keys"`
	ClientKeysEnv string   `toml:"client_keys_env"`
	// AllowUnauthenticated lets serve listen on a non-loopback address
	// without client keys.
	AllowUnauthenticated bool `toml:"allow_unauthenticated"`
	// LogLevel is debug, info, warn or error.
	LogLevel string `toml:"log_level"`
	// LogFormat is text (key=value) or json (one object per line).
	LogFormat string `toml:"log_format"`
	// ShutdownGrace is how long a stop (SIGTERM, SIGINT) lets the calls in
	// flight finish before it cuts them.
	ShutdownGrace time.Duration `toml:"shutdown_grace"`

	Timeouts Timeouts `toml:"timeouts"`
	Routes   []Route  `toml:"route"`

	// The features' sections: each type, its defaults and its checks
	// belong to the feature's package.
	Shaping    reqshape.Config   `toml:"shaping"`
	Originals  originals.Config  `toml:"originals"`
	Capture    capture.Config    `toml:"capture"`
	Review     review.Config     `toml:"review"`
	Deliberate deliberate.Config `toml:"deliberate"`
	Guard      guard.Config      `toml:"guard"`

	// Profiles change the built-in rendering profiles or add profiles
	// (what each upstream renders and what its prompt cache costs).
	Profiles profile.Config `toml:"profile"`
}

// Timeouts bound each phase of an upstream call.
type Timeouts struct {
	Connect        time.Duration `toml:"connect"`
	ResponseHeader time.Duration `toml:"response_header"`
	StreamIdle     time.Duration `toml:"stream_idle"`
	// ClientIdle bounds each read of a request body and each write to a
	// client; RequestBody the whole read of a body the proxy parses.
	ClientIdle  time.Duration `toml:"client_idle"`
	RequestBody time.Duration `toml:"request_body"`
}

// Route sends requests whose path starts with Prefix to Upstream.
type Route struct {
	Name     string `toml:"name"`
	Prefix   string `toml:"prefix"`
	Upstream string `toml:"upstream"`
	// Default marks the route used when no prefix matches.
	Default bool `toml:"default"`
	// APIKey or APIKeyEnv (the name of an environment variable) give a key
	// that replaces the client's Authorization header. Empty: the client's
	// own header is forwarded.
	APIKey    string `toml:"api_key"`
	APIKeyEnv string `toml:"api_key_env"`
	// CAFile is a PEM file of certificate authorities trusted for this
	// route's upstream, besides the system's.
	CAFile string `toml:"ca_file"`
}

// DefaultUpstream is the upstream of the default route when none is
// configured.
const DefaultUpstream = "https://api.deepseek.com"

// Default returns the configuration with every default set.
func Default() Config {
	return Config{
		Listen:       "127.0.0.1:8787",
		MaxBodyBytes: 64 << 20,
		LogLevel:     "info",
		LogFormat:    "text",
		// Long enough for a reasoning stream to end.
		ShutdownGrace: 2 * time.Minute,
		Timeouts: Timeouts{
			Connect:        10 * time.Second,
			ResponseHeader: 10 * time.Minute,
			StreamIdle:     5 * time.Minute,
			ClientIdle:     time.Minute,
			RequestBody:    5 * time.Minute,
		},
		Shaping:    reqshape.DefaultConfig(),
		Originals:  originals.DefaultConfig(),
		Capture:    capture.DefaultConfig(),
		Review:     review.DefaultConfig(),
		Deliberate: deliberate.DefaultConfig(),
		Guard:      guard.DefaultConfig(),
	}
}

// Load parses the TOML file at path onto Default and validates it.
func Load(path string) (Config, error) {
	c := Default()
	b, err := os.ReadFile(path)
	if err != nil {
		return c, fmt.Errorf("config: %w", err)
	}
	if err := c.Parse(string(b)); err != nil {
		return c, fmt.Errorf("config %s: %w", path, err)
	}
	return c, nil
}

// Parse decodes TOML text onto c and validates the result.
func (c *Config) Parse(text string) error {
	md, err := toml.Decode(text, c)
	if err != nil {
		return err
	}
	if un := md.Undecoded(); len(un) > 0 {
		keys := make([]string, len(un))
		for i, k := range un {
			keys[i] = k.String()
		}
		return fmt.Errorf("unknown key %s", strings.Join(keys, ", "))
	}
	return c.Validate()
}

// Validate checks every field and returns an error naming the first
// invalid key.
func (c *Config) Validate() error {
	var errs []error
	if _, _, err := net.SplitHostPort(c.Listen); err != nil {
		errs = append(errs, fmt.Errorf("listen: %w", err))
	}
	if c.AdminListen != "" {
		if _, _, err := net.SplitHostPort(c.AdminListen); err != nil {
			errs = append(errs, fmt.Errorf("admin_listen: %w", err))
		}
	}
	if c.MaxBodyBytes <= 0 {
		errs = append(errs, errors.New("max_body_bytes: must be positive"))
	}
	switch c.LogLevel {
	case "debug", "info", "warn", "error":
	default:
		errs = append(errs, fmt.Errorf("log_level: %q is not debug, info, warn or error", c.LogLevel))
	}
	if c.LogFormat != "text" && c.LogFormat != "json" {
		errs = append(errs, fmt.Errorf("log_format: %q is not text or json", c.LogFormat))
	}
	if c.ShutdownGrace < 0 {
		errs = append(errs, errors.New("shutdown_grace: must not be negative"))
	}
	for _, d := range []struct {
		key string
		d   time.Duration
	}{{"timeouts.connect", c.Timeouts.Connect}, {"timeouts.response_header", c.Timeouts.ResponseHeader}, {"timeouts.stream_idle", c.Timeouts.StreamIdle},
		{"timeouts.client_idle", c.Timeouts.ClientIdle}, {"timeouts.request_body", c.Timeouts.RequestBody}} {
		if d.d < 0 {
			errs = append(errs, fmt.Errorf("%s: must not be negative", d.key))
		}
	}
	errs = append(errs, c.validateRoutes()...)
	errs = append(errs, c.validateAccess()...)
	var names []string
	for _, r := range c.WithDefaultRoute("") {
		names = append(names, r.Name)
	}
	errs = append(errs,
		under("shaping", c.Shaping.Validate()),
		under("originals", c.Originals.Validate()),
		under("capture", c.Capture.Validate()),
		under("review", c.Review.Validate(names)),
		under("deliberate", c.Deliberate.Validate(names)),
		c.Guard.Validate(),
		c.Profiles.Validate(),
	)
	return errors.Join(errs...)
}

// under puts a section's name in front of each of its errors' keys.
func under(section string, err error) error {
	if err == nil {
		return nil
	}
	var errs []error
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		errs = j.Unwrap()
	} else {
		errs = []error{err}
	}
	for i, e := range errs {
		errs[i] = fmt.Errorf("%s.%w", section, e)
	}
	return errors.Join(errs...)
}

func (c *Config) validateRoutes() []error {
	var errs []error
	defaults := 0
	names := map[string]bool{}
	for i, r := range c.Routes {
		key := fmt.Sprintf("route[%d]", i)
		if r.Name == "" {
			errs = append(errs, fmt.Errorf("%s.name: must be set", key))
		} else if names[r.Name] {
			errs = append(errs, fmt.Errorf("%s.name: %q is used twice", key, r.Name))
		}
		names[r.Name] = true
		if err := checkUpstream(r.Upstream); err != nil {
			errs = append(errs, fmt.Errorf("%s.upstream: %w", key, err))
		}
		if r.Prefix != "" && (!strings.HasPrefix(r.Prefix, "/") || strings.HasSuffix(r.Prefix, "/")) {
			errs = append(errs, fmt.Errorf("%s.prefix: %q must start with / and not end with /", key, r.Prefix))
		}
		if r.Prefix == "" && !r.Default {
			errs = append(errs, fmt.Errorf("%s.prefix: must be set unless default = true", key))
		}
		if r.Default {
			defaults++
		}
	}
	if defaults > 1 {
		errs = append(errs, errors.New("route.default: only one route may be the default"))
	}
	return errs
}

// checkUpstream says what is wrong with an upstream URL without quoting
// it: a key in its user info goes no further than the file, whatever is
// wrong with the URL (a password holding "/" or "#" confuses any parser
// that would find it to redact it).
func checkUpstream(s string) error {
	u, err := url.Parse(s)
	switch {
	case err != nil:
		return errors.New("not a valid URL")
	case u.Scheme != "http" && u.Scheme != "https":
		return errors.New("must be an http or https URL")
	case u.Host == "":
		return errors.New("has no host")
	}
	return nil
}

// MinClientKeyLen is the shortest client key accepted.
const MinClientKeyLen = 16

func (c *Config) validateAccess() []error {
	var errs []error
	for i, k := range c.ClientKeys {
		if len(k) < MinClientKeyLen {
			errs = append(errs, fmt.Errorf("client_keys[%d]: shorter than %d characters", i, MinClientKeyLen))
		}
	}
	for i, o := range c.AllowedOrigins {
		if u, err := url.Parse(o); o != "*" && (err != nil || u.Scheme == "" || u.Host == "" || strings.Trim(u.Path, "/") != "") {
			errs = append(errs, fmt.Errorf("allowed_origins[%d]: %q is not an origin such as http://localhost:3000", i, o))
		}
	}
	for i, h := range c.Tunnel {
		if h = strings.TrimSpace(h); h == "" || strings.Contains(strings.TrimPrefix(h, "*."), "*") && h != "*" {
			errs = append(errs, fmt.Errorf("tunnel[%d]: %q is not host, host:port, *.domain or *", i, h))
		}
	}
	return errs
}

// ClientKeyList returns the client keys: ClientKeys, then the
// comma-separated keys of the environment variable ClientKeysEnv.
func (c *Config) ClientKeyList(getenv func(string) string) []string {
	keys := append([]string(nil), c.ClientKeys...)
	if c.ClientKeysEnv == "" {
		return keys
	}
	for _, k := range strings.Split(getenv(c.ClientKeysEnv), ",") {
		if k = strings.TrimSpace(k); k != "" {
			keys = append(keys, k)
		}
	}
	return keys
}

// Key returns the route's API key from APIKey or the environment
// variable APIKeyEnv; "" when neither is set.
func (r Route) Key(getenv func(string) string) string {
	if r.APIKey != "" {
		return r.APIKey
	}
	if r.APIKeyEnv != "" {
		return getenv(r.APIKeyEnv)
	}
	return ""
}

// WithDefaultRoute returns the routes with a default route to upstream
// added when none of them is the default.
func (c *Config) WithDefaultRoute(upstream string) []Route {
	for _, r := range c.Routes {
		if r.Default {
			return c.Routes
		}
	}
	if upstream == "" {
		upstream = DefaultUpstream
	}
	return append(append([]Route(nil), c.Routes...), Route{Name: "default", Upstream: upstream, Default: true})
}
