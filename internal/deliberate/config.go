package deliberate

import (
	"errors"
	"time"

	"github.com/shaperproxy/shaperproxy/internal/review"
)

// Config is the [deliberate] section of the configuration. The tool is off
// until Routes names a route.
type Config struct {
	// Routes lists the routes whose chat requests get the tool ("*": every
	// route); empty is off.
	Routes review.Routes `toml:"routes"`
	// BranchTimeout bounds each branch (its own deadline).
	BranchTimeout time.Duration `toml:"branch_timeout"`
	// KeepAlive is the period of the SSE comments sent to the client while
	// the branches run.
	KeepAlive time.Duration `toml:"keepalive"`
	// StrongModel, when set, is the model of the branches the model asks to
	// run with "strong": true (the same route, another model).
	StrongModel string `toml:"strong_model"`
	// MaxSnapshotChars bounds the masked-review snapshot; a larger one fails
	// that branch (it is never truncated).
	MaxSnapshotChars int `toml:"max_snapshot_chars"`
}

// DefaultConfig is the tool off, with the values it runs with once a route
// is named.
func DefaultConfig() Config {
	return Config{BranchTimeout: 5 * time.Minute, KeepAlive: 10 * time.Second, MaxSnapshotChars: 65536}
}

// Validate checks every field; each error names its key (relative to the
// [deliberate] table). routes are the names of the configured routes.
func (c Config) Validate(routes []string) error {
	var errs []error
	if c.BranchTimeout <= 0 {
		errs = append(errs, errors.New("branch_timeout: must be positive"))
	}
	if c.KeepAlive <= 0 {
		errs = append(errs, errors.New("keepalive: must be positive"))
	}
	if c.MaxSnapshotChars <= 0 {
		errs = append(errs, errors.New("max_snapshot_chars: must be positive"))
	}
	errs = append(errs, c.Routes.Check(routes)...)
	return errors.Join(errs...)
}

// enabled reports whether the tool is served on route.
func (c Config) enabled(route string) bool { return c.Routes.Has(route) }
