package guard

import (
	"math"
	"strings"
	"testing"

	"github.com/BurntSushi/toml"
)

func TestDefaultConfigValid(t *testing.T) {
	c := DefaultConfig()
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	if !c.Enabled || c.StallAction != StallObserve || c.StepDownRequests != 0 || c.EchoThreshold != 3 {
		t.Fatalf("defaults %+v", c)
	}
	if (Config{}).Validate() != nil {
		t.Fatal("the zero (disabled) Config must be valid")
	}
}

func TestValidateNamesKey(t *testing.T) {
	for _, tc := range []struct {
		mod  func(*Config)
		want string
	}{
		{func(c *Config) { c.StallAction = "kill" }, "guard.stall_action"},
		{func(c *Config) { c.StallAction = "" }, "guard.stall_action"},
		{func(c *Config) { c.StepDownRequests = -1 }, "guard.step_down_requests: -1 is less than 0"},
		{func(c *Config) { c.StepDownRequests = 1.5 }, "guard.step_down_requests: 1.5 is not a whole number"},
		{func(c *Config) { c.StepDownRequests = math.NaN() }, "guard.step_down_requests"},
		{func(c *Config) { c.StepDownRequests = math.Inf(1) }, "guard.step_down_requests"},
		{func(c *Config) { c.StepDownRequests = 1e9 }, "guard.step_down_requests"},
		{func(c *Config) { c.EchoThreshold = 1 }, "guard.echo_threshold"},
		{func(c *Config) { c.EchoThreshold = 2.5 }, "guard.echo_threshold"},
		{func(c *Config) { c.StallStepChars = -5 }, "guard.stall_step_chars"},
		{func(c *Config) { c.StallTurnChars = 0.5 }, "guard.stall_turn_chars"},
		{func(c *Config) { c.FailureLines = []string{"ok", "(unclosed"} }, "guard.failure_lines[1]"},
		{func(c *Config) { c.FailurePrefixes = []string{" "} }, "guard.failure_prefixes[0]"},
		{func(c *Config) { c.ErrorFlags = []string{"a.b"} }, "guard.error_flags[0]"},
		{func(c *Config) { c.ErrorKeys = []string{"*"} }, "guard.error_keys[0]"},
		{func(c *Config) {
			c.StepDownMap = map[string]Lowering{"ds": {Path: "reasoning_effort#", Values: map[string]string{"a": "b"}}}
		}, "guard.step_down_map.ds.path"},
		{func(c *Config) { c.StepDownMap = map[string]Lowering{"or": {Path: "reasoning.effort"}} }, "guard.step_down_map.or.values"},
		{func(c *Config) { c.StepDownMap = map[string]Lowering{"b": {Budgets: []string{"thinking..x"}}} }, "guard.step_down_map.b.budgets[0]"},
		{func(c *Config) { c.StepDownMap = map[string]Lowering{"b": {Budgets: []string{}}} }, "guard.step_down_map.b.path"},
		{func(c *Config) {
			c.StepDownMap = map[string]Lowering{"x": {Path: "reasoning_effort", Values: map[string]string{"max": ""}}}
		}, "guard.step_down_map.x.values"},
	} {
		c := DefaultConfig()
		tc.mod(&c)
		err := c.Validate()
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("want an error naming %q, got %v", tc.want, err)
		}
		if _, nerr := New(c); nerr == nil {
			t.Errorf("New accepted an invalid config (%s)", tc.want)
		}
		c.Enabled = false
		if err := c.Validate(); err != nil {
			t.Errorf("a disabled config is checked: %v", err)
		}
	}
}

// TestTOML: the keys decode from TOML as the config package will read
// them, an integer into the float64 counts included, and a fractional
// count reaches Validate instead of failing the decoder.
func TestTOML(t *testing.T) {
	var file struct {
		Guard Config `toml:"guard"`
	}
	file.Guard = DefaultConfig()
	md, err := toml.Decode(`
[guard]
enabled = true
stall_action = "interrupt"
step_down_requests = 2
echo_threshold = 4
stall_step_chars = 15000
failure_prefixes = ["FATAL:"]

[guard.step_down_map.deepseek]
path = "reasoning_effort"
values = { max = "high" }
`, &file)
	if err != nil || len(md.Undecoded()) != 0 {
		t.Fatalf("decode: %v, undecoded %v", err, md.Undecoded())
	}
	g := file.Guard
	if err := g.Validate(); err != nil {
		t.Fatal(err)
	}
	if g.StallAction != StallInterrupt || g.StepDownRequests != 2 || g.EchoThreshold != 4 || g.StallTurnChars != defaultStallTurnChars ||
		g.FailurePrefixes[0] != "FATAL:" || g.StepDownMap["deepseek"].Values["max"] != "high" {
		t.Fatalf("decoded %+v", g)
	}
	file.Guard = DefaultConfig()
	if _, err := toml.Decode("[guard]\nstep_down_requests = 1.5\n", &file); err != nil {
		t.Fatal(err)
	}
	if err := file.Guard.Validate(); err == nil || !strings.Contains(err.Error(), "guard.step_down_requests") {
		t.Fatalf("fractional step-down: %v", err)
	}
}
