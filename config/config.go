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
	"path"
	"slices"
	"strings"
	"time"

	"github.com/BurntSushi/toml"
	"github.com/shaperproxy/shaperproxy/guard"
)

// Config is the whole configuration. Its zero value is not useful; start
// from Default.
type Config struct {
	// Listen is the address of the proxy listener (base-URL and
	// HTTPS_PROXY modes share it).
	Listen string `toml:"listen"`
	// AdminListen, when set, serves /healthz and /metrics on a separate
	// address instead of the main listener.
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
	// LogLevel is debug, info, warn or error.
	LogLevel string `toml:"log_level"`

	Timeouts  Timeouts     `toml:"timeouts"`
	Routes    []Route      `toml:"route"`
	Shaping   Shaping      `toml:"shaping"`
	Originals Originals    `toml:"originals"`
	Capture   Capture      `toml:"capture"`
	Review    Review       `toml:"review"`
	Guard     guard.Config `toml:"guard"`
}

// Timeouts bound each phase of an upstream call.
type Timeouts struct {
	Connect        Duration `toml:"connect"`
	ResponseHeader Duration `toml:"response_header"`
	StreamIdle     Duration `toml:"stream_idle"`
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
}

// Duration is a time.Duration written as a Go duration string ("30s").
type Duration struct{ time.Duration }

// UnmarshalText parses a Go duration string.
func (d *Duration) UnmarshalText(b []byte) error {
	v, err := time.ParseDuration(string(b))
	if err != nil {
		return err
	}
	d.Duration = v
	return nil
}

// MarshalText writes the duration as a Go duration string.
func (d Duration) MarshalText() ([]byte, error) { return []byte(d.String()), nil }

// DefaultUpstream is the upstream of the default route when none is
// configured.
const DefaultUpstream = "https://api.deepseek.com"

// Default returns the configuration with every default set.
func Default() Config {
	return Config{
		Listen:       "127.0.0.1:8787",
		MaxBodyBytes: 64 << 20,
		LogLevel:     "info",
		Timeouts: Timeouts{
			Connect:        Duration{10 * time.Second},
			ResponseHeader: Duration{10 * time.Minute},
			StreamIdle:     Duration{5 * time.Minute},
		},
		Shaping:   defaultShaping(),
		Originals: defaultOriginals(),
		Capture:   defaultCapture(),
		Review:    defaultReview(),
		Guard:     guard.DefaultConfig(),
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
	for _, d := range []struct {
		key string
		d   Duration
	}{{"timeouts.connect", c.Timeouts.Connect}, {"timeouts.response_header", c.Timeouts.ResponseHeader}, {"timeouts.stream_idle", c.Timeouts.StreamIdle}} {
		if d.d.Duration < 0 {
			errs = append(errs, fmt.Errorf("%s: must not be negative", d.key))
		}
	}
	errs = append(errs, c.validateRoutes()...)
	errs = append(errs, c.Shaping.validate()...)
	errs = append(errs, c.Originals.validate()...)
	errs = append(errs, c.Capture.validate()...)
	errs = append(errs, c.Review.validate(c.WithDefaultRoute(""))...)
	if err := c.Guard.Validate(); err != nil {
		errs = append(errs, err)
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

func checkUpstream(s string) error {
	u, err := url.Parse(s)
	if err != nil {
		return err
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return fmt.Errorf("%q must be an http or https URL", s)
	}
	if u.Host == "" {
		return fmt.Errorf("%q has no host", s)
	}
	return nil
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

// Shaping configures reasoning shaping of outgoing history.
type Shaping struct {
	// Enabled turns shaping on. Originals are still cleared per turn when
	// it is off.
	Enabled bool `toml:"enabled"`
	// The default rule, used when no [[shaping.rule]] matches.
	ShapeRule
	// Rules are tried in order before the default rule.
	Rules []ShapeRule `toml:"rule"`
	// Breaker: when the upstream rejects a shaped request, it is retried
	// once unshaped and shaping pauses on that route for Cooldown.
	Breaker Breaker `toml:"breaker"`
}

// ShapeRule chooses the shaping of a route and model.
type ShapeRule struct {
	Route      string `toml:"route"`       // glob; "" = every route
	Model      string `toml:"model"`       // glob; "" = every model
	Op         string `toml:"op"`          // extract, keep or drop
	MaxChars   int    `toml:"max_chars"`   // characters kept by extract
	Marker     bool   `toml:"marker"`      // add "[reasoning extract: N chars omitted]" (pollutes; see README)
	KeepRecent int    `toml:"keep_recent"` // latest assistant steps left as they are; -1 = none
	ThinkTags  bool   `toml:"think_tags"`  // also shape an inline <think> block in content
}

// Breaker configures the shaping circuit breaker.
type Breaker struct {
	// AnyStatus400 also retries a 400 whose body does not mention
	// reasoning.
	AnyStatus400 bool     `toml:"any_400"`
	Cooldown     Duration `toml:"cooldown"`
}

// Originals configures the side table of original reasoning.
type Originals struct {
	TTL      Duration `toml:"ttl"`       // conversations idle this long are purged
	MaxBytes int64    `toml:"max_bytes"` // compact the file above this size
	Queue    int      `toml:"queue"`     // pending writes before new ones are dropped (and counted)
}

func defaultShaping() Shaping {
	return Shaping{
		Enabled:   true,
		ShapeRule: ShapeRule{Op: "extract", MaxChars: 240, KeepRecent: 1},
		Breaker:   Breaker{Cooldown: Duration{10 * time.Minute}},
	}
}

func defaultOriginals() Originals {
	return Originals{TTL: Duration{24 * time.Hour}, MaxBytes: 64 << 20, Queue: 1024}
}

func (s *Shaping) validate() []error {
	var errs []error
	check := func(key string, r ShapeRule) {
		switch r.Op {
		case "extract", "keep", "drop":
		default:
			errs = append(errs, fmt.Errorf("%s.op: %q is not extract, keep or drop", key, r.Op))
		}
		if r.MaxChars < 16 {
			errs = append(errs, fmt.Errorf("%s.max_chars: %d is below 16", key, r.MaxChars))
		}
		if r.KeepRecent < -1 {
			errs = append(errs, fmt.Errorf("%s.keep_recent: %d (use -1 for none, or a count)", key, r.KeepRecent))
		}
		for _, g := range []struct{ k, v string }{{"route", r.Route}, {"model", r.Model}} {
			if _, err := path.Match(g.v, ""); err != nil {
				errs = append(errs, fmt.Errorf("%s.%s: %w", key, g.k, err))
			}
		}
	}
	check("shaping", s.ShapeRule)
	for i, r := range s.Effective()[:len(s.Rules)] {
		check(fmt.Sprintf("shaping.rule[%d]", i), r)
	}
	if s.Breaker.Cooldown.Duration < 0 {
		errs = append(errs, errors.New("shaping.breaker.cooldown: must not be negative"))
	}
	return errs
}

// Effective returns the rules in the order they are tried, the default
// rule last. A rule's op, max_chars and keep_recent default to the
// default rule's.
func (s Shaping) Effective() []ShapeRule {
	out := make([]ShapeRule, 0, len(s.Rules)+1)
	for _, r := range s.Rules {
		if r.Op == "" {
			r.Op = s.Op
		}
		if r.MaxChars == 0 {
			r.MaxChars = s.MaxChars
		}
		if r.KeepRecent == 0 {
			r.KeepRecent = s.KeepRecent
		}
		out = append(out, r)
	}
	return append(out, s.ShapeRule)
}

func (o *Originals) validate() []error {
	var errs []error
	if o.TTL.Duration <= 0 {
		errs = append(errs, errors.New("originals.ttl: must be positive"))
	}
	if o.Queue <= 0 {
		errs = append(errs, errors.New("originals.queue: must be positive"))
	}
	return errs
}

// Capture configures the wire capture logs.
type Capture struct {
	// Enabled records every upstream request and every response event.
	Enabled bool `toml:"enabled"`
	// ClientRequests also records each request as the client sent it,
	// before any transform.
	ClientRequests bool `toml:"client_requests"`
	// Queue is the number of records waiting for the disk; beyond it new
	// records are dropped and counted (traffic is never held up).
	Queue int `toml:"queue"`
	// QueueBytes bounds the bytes of the records waiting: the capture's
	// memory. Beyond it records are dropped and counted.
	QueueBytes   int64    `toml:"queue_bytes"`
	SegmentBytes int64    `toml:"segment_bytes"` // rotate segments at this size
	RetainBytes  int64    `toml:"retain_bytes"`  // remove the oldest segments beyond this total
	RetainAge    Duration `toml:"retain_age"`    // remove segments older than this
}

func defaultCapture() Capture {
	return Capture{Enabled: true, Queue: 4096, QueueBytes: 64 << 20, SegmentBytes: 64 << 20, RetainBytes: 10 << 30, RetainAge: Duration{14 * 24 * time.Hour}}
}

func (c *Capture) validate() []error {
	var errs []error
	if c.Queue <= 0 {
		errs = append(errs, errors.New("capture.queue: must be positive"))
	}
	if c.QueueBytes < 1<<20 {
		errs = append(errs, errors.New("capture.queue_bytes: must be at least 1 MiB"))
	}
	if c.SegmentBytes < 1<<20 {
		errs = append(errs, errors.New("capture.segment_bytes: must be at least 1 MiB"))
	}
	if c.RetainBytes < c.SegmentBytes {
		errs = append(errs, errors.New("capture.retain_bytes: must be at least segment_bytes"))
	}
	if c.RetainAge.Duration <= 0 {
		errs = append(errs, errors.New("capture.retain_age: must be positive"))
	}
	return errs
}

// Review configures the masked review at the end of a turn.
type Review struct {
	// Routes lists the routes reviewed; empty (the default) is off.
	Routes []string `toml:"routes"`
	// Scope is "tool-bearing-turns" (only turns with a tool call) or
	// "all-turns".
	Scope string `toml:"scope"`
	// Mask is "reasoning-only" or "action-only" (also hides the
	// assistant's visible text; for evaluation).
	Mask string `toml:"mask"`
	// Policy is "updates-only" (publish only an update), "all" or
	// "observe-only" (record, never change what the client gets).
	Policy string `toml:"policy"`
	// Timeout bounds the review (child and continuation).
	Timeout Duration `toml:"timeout"`
	// KeepAlive is the period of the SSE comments sent while a review runs.
	KeepAlive        Duration `toml:"keepalive"`
	MaxSnapshotChars int      `toml:"max_snapshot_chars"`
	MaxImages        int      `toml:"max_images"`
	// ResponseFormat is "json_object" (DeepSeek), "json_schema" or "none".
	ResponseFormat string `toml:"response_format"`
	// Model, when set, is used for the review instead of the primary's.
	Model string `toml:"model"`
}

func defaultReview() Review {
	return Review{
		Scope: "tool-bearing-turns", Mask: "reasoning-only", Policy: "updates-only",
		Timeout: Duration{300 * time.Second}, KeepAlive: Duration{10 * time.Second},
		MaxSnapshotChars: 65536, MaxImages: 20, ResponseFormat: "json_object",
	}
}

func (r *Review) validate(routes []Route) []error {
	var errs []error
	oneOf := func(key, v string, allowed ...string) {
		for _, a := range allowed {
			if v == a {
				return
			}
		}
		errs = append(errs, fmt.Errorf("review.%s: %q is not one of %s", key, v, strings.Join(allowed, ", ")))
	}
	oneOf("scope", r.Scope, "tool-bearing-turns", "all-turns")
	oneOf("mask", r.Mask, "reasoning-only", "action-only")
	oneOf("policy", r.Policy, "updates-only", "all", "observe-only")
	oneOf("response_format", r.ResponseFormat, "json_object", "json_schema", "none")
	if r.Timeout.Duration <= 0 {
		errs = append(errs, errors.New("review.timeout: must be positive"))
	}
	if r.KeepAlive.Duration <= 0 {
		errs = append(errs, errors.New("review.keepalive: must be positive"))
	}
	if r.MaxSnapshotChars <= 0 || r.MaxImages < 0 {
		errs = append(errs, errors.New("review.max_snapshot_chars, review.max_images: must be positive"))
	}
	for i, name := range r.Routes {
		if name != "*" && !slices.ContainsFunc(routes, func(rt Route) bool { return rt.Name == name }) {
			errs = append(errs, fmt.Errorf("review.routes[%d]: no route named %q", i, name))
		}
	}
	return errs
}

// Reviews reports whether the review is on for route.
func (r *Review) Reviews(route string) bool {
	return slices.Contains(r.Routes, route) || slices.Contains(r.Routes, "*")
}
