package reqshape

import (
	"errors"
	"fmt"
	"path"
	"time"

	"github.com/shaperproxy/shaperproxy/shaping"
)

// Config is the [shaping] section of the configuration: the default rule,
// the rules tried before it, and the breaker. Start from DefaultConfig.
type Config struct {
	// Enabled turns shaping on. Originals are still cleared per turn when
	// it is off.
	Enabled bool `toml:"enabled"`
	// The default rule, used when no [[shaping.rule]] matches.
	RuleConfig
	// Rules are tried in order before the default rule.
	Rules []RuleConfig `toml:"rule"`
	// Breaker: when the upstream rejects a shaped request, it is retried
	// once unshaped and shaping pauses on that route for Cooldown.
	Breaker BreakerConfig `toml:"breaker"`
}

// RuleConfig is one rule as the configuration writes it. In
// [[shaping.rule]], op, max_chars, policy and keep_recent default to the
// default rule's.
type RuleConfig struct {
	Route      string     `toml:"route"`       // glob; "" = every route
	Model      string     `toml:"model"`       // glob; "" = every model
	Op         shaping.Op `toml:"op"`          // extract, keep or drop
	MaxChars   int        `toml:"max_chars"`   // characters kept by extract
	Marker     bool       `toml:"marker"`      // add "[reasoning extract: N chars omitted]" (pollutes; see README)
	Policy     Policy     `toml:"policy"`      // cache-aware, free-only or keep-recent
	KeepRecent int        `toml:"keep_recent"` // keep-recent policy: latest assistant steps left as they are; -1 = none
	ThinkTags  bool       `toml:"think_tags"`  // also shape an inline <think> block in content
}

// BreakerConfig configures the shaping circuit breaker.
type BreakerConfig struct {
	// AnyStatus400 also retries a 400 whose body does not mention
	// reasoning.
	AnyStatus400 bool          `toml:"any_400"`
	Cooldown     time.Duration `toml:"cooldown"`
}

// DefaultConfig is shaping on: extract to shaping.DefaultMaxChars under
// the cache-aware policy (keep_recent 1 for the keep-recent policy), a
// ten-minute breaker cool-down.
func DefaultConfig() Config {
	return Config{
		Enabled:    true,
		RuleConfig: RuleConfig{Op: shaping.OpExtract, MaxChars: shaping.DefaultMaxChars, Policy: PolicyCacheAware, KeepRecent: 1},
		Breaker:    BreakerConfig{Cooldown: 10 * time.Minute},
	}
}

// Validate checks every rule; each error names its key (relative to the
// [shaping] table).
func (c Config) Validate() error {
	var errs []error
	check := func(key string, r RuleConfig) {
		if r.MaxChars < 16 {
			errs = append(errs, fmt.Errorf("%smax_chars: %d is below 16", key, r.MaxChars))
		}
		if err := r.rule().Shaping.Validate(); err != nil {
			errs = append(errs, fmt.Errorf("%sop: %w", key, err))
		}
		if err := r.Policy.validate(); err != nil {
			errs = append(errs, fmt.Errorf("%spolicy: %w", key, err))
		}
		if r.KeepRecent < -1 {
			errs = append(errs, fmt.Errorf("%skeep_recent: %d (use -1 for none, or a count)", key, r.KeepRecent))
		}
		for _, g := range []struct{ k, v string }{{"route", r.Route}, {"model", r.Model}} {
			if _, err := path.Match(g.v, ""); err != nil {
				errs = append(errs, fmt.Errorf("%s%s: %w", key, g.k, err))
			}
		}
	}
	check("", c.RuleConfig)
	for i, r := range c.effective()[:len(c.Rules)] {
		check(fmt.Sprintf("rule[%d].", i), r)
	}
	if c.Breaker.Cooldown < 0 {
		errs = append(errs, errors.New("breaker.cooldown: must not be negative"))
	}
	return errors.Join(errs...)
}

// effective returns the rules in the order they are tried, the default
// rule last, with the default rule's values in the fields a rule leaves
// empty.
func (c Config) effective() []RuleConfig {
	out := make([]RuleConfig, 0, len(c.Rules)+1)
	for _, r := range c.Rules {
		if r.Op == "" {
			r.Op = c.Op
		}
		if r.MaxChars == 0 {
			r.MaxChars = c.MaxChars
		}
		if r.KeepRecent == 0 {
			r.KeepRecent = c.KeepRecent
		}
		if r.Policy == "" {
			r.Policy = c.Policy
		}
		out = append(out, r)
	}
	return append(out, c.RuleConfig)
}

// RuleSet returns the rules Apply matches, in order, the default last.
func (c Config) RuleSet() rules {
	var rs rules
	for _, r := range c.effective() {
		rs = append(rs, r.rule())
	}
	return rs
}

func (r RuleConfig) rule() shapeRule {
	return shapeRule{
		Route: r.Route, Model: r.Model, KeepRecent: r.KeepRecent, ThinkTags: r.ThinkTags, Policy: r.Policy,
		Shaping: shaping.Options{Op: r.Op, MaxChars: r.MaxChars, Marker: r.Marker},
	}
}
