package review

import (
	"errors"
	"fmt"
	"slices"
	"time"
)

// Config is the [review] section of the configuration. Start from
// DefaultConfig; the review is off until Routes names a route.
type Config struct {
	// Routes lists the routes reviewed ("*": every route); empty is off.
	Routes Routes `toml:"routes"`
	// Scope says which turns are reviewed.
	Scope Scope `toml:"scope"`
	// Mask says what the child does not see.
	Mask Mask `toml:"mask"`
	// Policy says what reaches the client.
	Policy Policy `toml:"policy"`
	// Timeout bounds the review (child and continuation).
	Timeout time.Duration `toml:"timeout"`
	// KeepAlive is the period of the SSE comments sent while a review runs.
	KeepAlive        time.Duration `toml:"keepalive"`
	MaxSnapshotChars int           `toml:"max_snapshot_chars"`
	MaxImages        int           `toml:"max_images"`
	// ResponseFormat is what the child asks the upstream for.
	ResponseFormat Format `toml:"response_format"`
	// Model, when set, is used for the review instead of the primary's.
	Model string `toml:"model"`
}

// Scope says which turns are reviewed.
type Scope string

// The scopes.
const (
	// ScopeToolTurns reviews only turns that made a tool call (the default).
	ScopeToolTurns Scope = "tool-bearing-turns"
	// ScopeAllTurns reviews every turn.
	ScopeAllTurns Scope = "all-turns"
)

// Policy says what of a review reaches the client.
type Policy string

// The policies.
const (
	// PolicyUpdatesOnly lets the model revise only when the packet says
	// update (the default).
	PolicyUpdatesOnly Policy = "updates-only"
	// PolicyAll lets the model revise after every valid packet.
	PolicyAll Policy = "all"
	// PolicyObserveOnly records the packet and never changes what the
	// client gets.
	PolicyObserveOnly Policy = "observe-only"
)

// Publishes reports whether a valid packet leads to a revision.
func (p Policy) Publishes(packet Packet) bool {
	switch p {
	case PolicyObserveOnly:
		return false
	case PolicyAll:
		return true
	default:
		return packet.Status == statusUpdate
	}
}

// DefaultConfig is the review off, with the values it runs with once a
// route is named.
func DefaultConfig() Config {
	return Config{
		Scope: ScopeToolTurns, Mask: MaskReasoningOnly, Policy: PolicyUpdatesOnly,
		Timeout: 300 * time.Second, KeepAlive: 10 * time.Second,
		MaxSnapshotChars: defaultMaxSnapshotChars, MaxImages: defaultMaxImages,
		ResponseFormat: FormatJSONObject,
	}
}

// Validate checks every field; each error names its key (relative to the
// [review] table). routes are the names of the configured routes.
func (c Config) Validate(routes []string) error {
	errs := []error{c.Scope.validate(), c.Mask.validate(), c.Policy.validate(), c.ResponseFormat.validate()}
	if c.Timeout <= 0 {
		errs = append(errs, errors.New("timeout: must be positive"))
	}
	if c.KeepAlive <= 0 {
		errs = append(errs, errors.New("keepalive: must be positive"))
	}
	if c.MaxSnapshotChars <= 0 || c.MaxImages < 0 {
		errs = append(errs, errors.New("max_snapshot_chars, max_images: must be positive"))
	}
	errs = append(errs, c.Routes.Check(routes)...)
	return errors.Join(errs...)
}

// Reviews reports whether the review is on for route.
func (c Config) Reviews(route string) bool { return c.Routes.Has(route) }

// Routes names the routes a feature is on: "*" is every route, empty is
// off. (The review and the deliberate tool are switched on this way.)
type Routes []string

// Has reports whether route is named, or "*" is.
func (r Routes) Has(route string) bool {
	return slices.Contains(r, route) || slices.Contains(r, "*")
}

// Check returns an error, keyed "routes[i]", for each name that is
// neither "*" nor one of the configured routes.
func (r Routes) Check(configured []string) []error {
	var errs []error
	for i, name := range r {
		if name != "*" && !slices.Contains(configured, name) {
			errs = append(errs, fmt.Errorf("routes[%d]: no route named %q", i, name))
		}
	}
	return errs
}

func oneOf[T ~string](key string, v T, allowed ...T) error {
	if slices.Contains(allowed, v) {
		return nil
	}
	return fmt.Errorf("%s: %q is not one of %v", key, v, allowed)
}

func (s Scope) validate() error { return oneOf("scope", s, ScopeToolTurns, ScopeAllTurns) }
func (m Mask) validate() error  { return oneOf("mask", m, MaskReasoningOnly, MaskActionOnly) }
func (p Policy) validate() error {
	return oneOf("policy", p, PolicyUpdatesOnly, PolicyAll, PolicyObserveOnly)
}
func (f Format) validate() error {
	return oneOf("response_format", f, FormatJSONObject, FormatJSONSchema, FormatNone)
}
