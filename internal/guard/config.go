package guard

import (
	"errors"
	"fmt"
	"maps"
	"math"
	"net/url"
	"regexp"
	"sort"
	"strings"
)

// The values of Config.StallAction.
const (
	// StallObserve only reports a STALL (once per continuing stall) as an
	// Event; the request is not changed.
	StallObserve = "observe"
	// StallInterrupt puts a notice into the next request of the
	// conversation and starts the step-down window.
	StallInterrupt = "interrupt"
)

// Defaults of Config (see doc.go for why).
const (
	defaultEchoThreshold  = 3
	defaultStallStepChars = 12000
	defaultStallTurnChars = 40000
)

// Limits that Validate enforces.
const (
	maxCount     = 1000
	maxStallSize = 1 << 30
)

// Config is the [guard] section of the configuration. Every count is a
// float64 so that a TOML integer and a TOML float both decode into it and
// Validate can reject a fractional value by name (a TOML decoder would
// otherwise fail with a type error or truncate). Go code writes untyped
// constants (StepDownRequests: 2) as usual.
//
// The zero Config is a disabled guard. Start from DefaultConfig.
type Config struct {
	// Enabled turns the guard on. When false, nothing else is checked
	// and the Guard does nothing.
	Enabled bool `toml:"enabled"`
	// EchoThreshold is the number of consecutive failures of the same
	// call that triggers an ECHO notice (at least 2).
	EchoThreshold float64 `toml:"echo_threshold"`
	// StallAction is StallObserve (default) or StallInterrupt.
	StallAction string `toml:"stall_action"`
	// StepDownRequests is the number of requests, starting with the one
	// that carries a STALL interrupt notice, whose reasoning effort is
	// lowered; 0 never rewrites the effort.
	StepDownRequests float64 `toml:"step_down_requests"`
	// StallStepChars is the reasoning length (characters) of one step
	// that counts as a STALL; 0 turns the step measure off.
	StallStepChars float64 `toml:"stall_step_chars"`
	// StallTurnChars is the reasoning length (characters) across the
	// steps of the open turn that counts as a STALL; 0 turns the turn
	// measure off.
	StallTurnChars float64 `toml:"stall_turn_chars"`

	// FailurePrefixes: a tool result whose content starts with one of
	// these (after leading white space; case-sensitive) is a failure.
	FailurePrefixes []string `toml:"failure_prefixes"`
	// FailureLines are regular expressions (RE2) matched against whole
	// lines (trimmed of surrounding white space) among the first and last
	// LineWindow non-empty lines of a tool result. When the expression has
	// a capture group, the line is a failure only when the first group is
	// a non-zero integer (an exit code); otherwise any match is.
	FailureLines []string `toml:"failure_lines"`
	// ErrorFlags are keys of the tool message object: the JSON literal
	// true under one of them marks a failure ("is_error": true).
	ErrorFlags []string `toml:"error_flags"`
	// ErrorKeys: a tool result whose content is a JSON object with one of
	// these top-level keys holding anything but null, false or "" is a
	// failure ({"error": "..."}).
	ErrorKeys []string `toml:"error_keys"`

	// StepDownMap holds the effort lowering of each route, by route name.
	// A route without an entry uses DefaultLowering of its upstream.
	StepDownMap map[string]Lowering `toml:"step_down_map"`
}

// Lowering is how one route lowers the reasoning effort: the request key
// that holds the effort and the upstream's own values, each mapped to the
// value one step lower (a value with no entry is left as it is), and the
// keys of numeric reasoning budgets, each halved.
type Lowering struct {
	// Path is the gjson path of the effort string: "reasoning_effort"
	// (DeepSeek, OpenAI, vLLM) or "reasoning.effort" (OpenRouter). Empty
	// when the route lowers budgets only.
	Path string `toml:"path"`
	// Values maps an effort to the lower one, e.g. {"max": "high"}.
	Values map[string]string `toml:"values"`
	// Budgets are dotted paths of reasoning budgets in tokens; a budget
	// the request sets to a whole number above MinBudget is halved, never
	// below MinBudget. Nil means DefaultBudgets; an empty list lowers no
	// budget.
	Budgets []string `toml:"budgets"`
}

// MinBudget is the lowest reasoning budget a step-down writes: Anthropic's
// minimum thinking.budget_tokens, and about one ordinary agent step of
// reasoning.
const MinBudget = 1024

// DefaultBudgets are the numeric budgets the proxy knows (PROTOCOLS.md,
// "Request controls"): OpenRouter's reasoning.max_tokens, the Anthropic
// style thinking.budget_tokens (Claude-compatible gateways, vLLM), and
// Qwen's thinking_budget (DashScope, vLLM's Qwen3 templates).
func DefaultBudgets() []string {
	return []string{"reasoning.max_tokens", "thinking.budget_tokens", "thinking_budget"}
}

// budgets returns the budget paths the lowering applies.
func (l Lowering) budgets() []string {
	if l.Budgets == nil {
		return DefaultBudgets()
	}
	return l.Budgets
}

// lineWindow is the number of non-empty lines at the start and at the end
// of a tool result that FailureLines are tried on. Exit-code lines are
// printed first (Codex: "Exit code: 1") or last (shells, Go's "exit status
// 1"); a matching line in the middle of a long output is more likely the
// content of a file or a log than the tool's own verdict.
const lineWindow = 5

// maxLineLen is the longest line FailureLines are tried on.
const maxLineLen = 256

// DefaultConfig returns the guard's defaults: enabled, ECHO at 3, STALL
// observed only, no step-down.
func DefaultConfig() Config {
	return Config{
		Enabled:          true,
		EchoThreshold:    defaultEchoThreshold,
		StallAction:      StallObserve,
		StepDownRequests: 0,
		StallStepChars:   defaultStallStepChars,
		StallTurnChars:   defaultStallTurnChars,
		FailurePrefixes:  []string{"Error:", "ERROR:", "error:", "<tool_use_error>"},
		FailureLines: []string{
			`(?i)exit[ _]?(?:code|status)\s*[:=]?\s*(-?\d+)`,
			`(?i)(?:process |command )?exited with (?:exit )?code\s*[:=]?\s*(-?\d+)`,
		},
		ErrorFlags: []string{"is_error"},
		ErrorKeys:  []string{"error"},
	}
}

// Effort lowerings of the upstreams the proxy knows (PROTOCOLS.md,
// "Request controls"). DefaultLowering hands out copies.
var (
	// DeepSeek accepts high and max (low and medium are read as high), so
	// max is the only value that can go down.
	deepSeekLowering = Lowering{Path: "reasoning_effort", Values: map[string]string{"max": "high"}}
	// OpenAI stops at low: minimal and none are not accepted by every
	// model, and none turns reasoning off rather than lowering it.
	openAILowering = Lowering{Path: "reasoning_effort", Values: map[string]string{
		"xhigh": "high", "high": "medium", "medium": "low",
	}}
	// OpenRouter takes the OpenAI values on reasoning.effort.
	openRouterLowering = Lowering{Path: "reasoning.effort", Values: map[string]string{
		"xhigh": "high", "high": "medium", "medium": "low",
	}}
)

// defaultLowering returns the lowering for an upstream base URL:
//
//   - api.deepseek.com: reasoning_effort max→high (DeepSeek knows only
//     high and max);
//   - openrouter.ai: reasoning.effort xhigh→high, high→medium,
//     medium→low;
//   - anything else (OpenAI, vLLM): reasoning_effort, the same values;
//   - for every upstream, the DefaultBudgets halved (not below MinBudget).
//
// The lowering stops at low: minimal and none are not accepted by every
// model, and none turns reasoning off rather than lowering it.
func defaultLowering(upstream string) Lowering {
	host := upstream
	if u, err := url.Parse(upstream); err == nil && u.Host != "" {
		host = u.Hostname()
	}
	l := openAILowering
	switch {
	case host == "api.deepseek.com" || strings.HasSuffix(host, ".deepseek.com"):
		l = deepSeekLowering
	case host == "openrouter.ai" || strings.HasSuffix(host, ".openrouter.ai"):
		l = openRouterLowering
	}
	return Lowering{Path: l.Path, Values: maps.Clone(l.Values), Budgets: DefaultBudgets()}
}

// Validate checks c and returns every problem, each naming its key
// ("guard.stall_action", ...). A disabled Config is always valid: the
// other keys are only checked when the guard is turned on, so that a
// broken setting can be switched off.
func (c Config) Validate() error {
	if !c.Enabled {
		return nil
	}
	var errs []error
	add := func(err error) {
		if err != nil {
			errs = append(errs, err)
		}
	}
	add(checkCount("guard.echo_threshold", c.EchoThreshold, 2, maxCount))
	add(checkCount("guard.step_down_requests", c.StepDownRequests, 0, maxCount))
	add(checkCount("guard.stall_step_chars", c.StallStepChars, 0, maxStallSize))
	add(checkCount("guard.stall_turn_chars", c.StallTurnChars, 0, maxStallSize))
	switch c.StallAction {
	case StallObserve, StallInterrupt:
	default:
		add(fmt.Errorf("guard.stall_action: %q is not %q or %q", c.StallAction, StallObserve, StallInterrupt))
	}
	for i, p := range c.FailurePrefixes {
		if strings.TrimSpace(p) == "" {
			add(fmt.Errorf("guard.failure_prefixes[%d]: must not be empty", i))
		}
	}
	for i, p := range c.FailureLines {
		if _, err := compileLine(p); err != nil {
			add(fmt.Errorf("guard.failure_lines[%d]: %w", i, err))
		}
	}
	add(checkKeys("guard.error_flags", c.ErrorFlags))
	add(checkKeys("guard.error_keys", c.ErrorKeys))
	for _, route := range sortedKeys(c.StepDownMap) {
		add(c.StepDownMap[route].validate("guard.step_down_map." + route))
	}
	return errors.Join(errs...)
}

// checkCount reports a value that is not a whole number in [lo, hi].
func checkCount(key string, v float64, lo, hi float64) error {
	switch {
	case math.IsNaN(v) || math.IsInf(v, 0):
		return fmt.Errorf("%s: %v is not a number", key, v)
	case v != math.Trunc(v):
		return fmt.Errorf("%s: %v is not a whole number", key, v)
	case v < lo:
		return fmt.Errorf("%s: %v is less than %v", key, v, lo)
	case v > hi:
		return fmt.Errorf("%s: %v is more than %v", key, v, hi)
	}
	return nil
}

// keyName is what an error flag or key may be: a plain JSON key, so that
// it can never be read as a gjson path.
var keyName = regexp.MustCompile(`^[A-Za-z0-9_-]+$`)

func checkKeys(key string, names []string) error {
	for i, n := range names {
		if !keyName.MatchString(n) {
			return fmt.Errorf("%s[%d]: %q is not a plain key (letters, digits, _ and -)", key, i, n)
		}
	}
	return nil
}

// pathName is a dotted path of plain keys.
var pathName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$`)

// validate checks a lowering under the config key prefix: an effort path
// with its values, or budgets only.
func (l Lowering) validate(key string) error {
	for i, b := range l.Budgets {
		if !pathName.MatchString(b) {
			return fmt.Errorf("%s.budgets[%d]: %q is not a dotted path of plain keys", key, i, b)
		}
	}
	if l.Path == "" && len(l.Values) == 0 && len(l.Budgets) > 0 {
		return nil
	}
	if !pathName.MatchString(l.Path) {
		return fmt.Errorf("%s.path: %q is not a dotted path of plain keys", key, l.Path)
	}
	if len(l.Values) == 0 {
		return fmt.Errorf("%s.values: must map at least one effort", key)
	}
	for _, from := range sortedKeys(l.Values) {
		if from == "" || l.Values[from] == "" {
			return fmt.Errorf("%s.values: %q = %q: efforts must not be empty", key, from, l.Values[from])
		}
	}
	return nil
}

// compileLine compiles a FailureLines expression anchored to the whole
// line.
func compileLine(p string) (*regexp.Regexp, error) {
	if p == "" {
		return nil, errors.New("must not be empty")
	}
	return regexp.Compile(`^(?:` + p + `)$`)
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
