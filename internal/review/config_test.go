package review

import (
	"strings"
	"testing"
)

// TestPolicyPublishes: the publication policy is a unit decision of this
// package (a new policy is a new case here, not a socket test).
func TestPolicyPublishes(t *testing.T) {
	update := Packet{Role: packetRole, Status: statusUpdate, Items: []Item{{Kind: "possible_error", Certainty: "likely", Content: "x"}}}
	nothing := Packet{Role: packetRole, Status: statusNoUpdate}
	tests := []struct {
		policy          Policy
		update, nothing bool
	}{
		{PolicyUpdatesOnly, true, false},
		{PolicyAll, true, true},
		{PolicyObserveOnly, false, false},
	}
	for _, tt := range tests {
		if got := tt.policy.Publishes(update); got != tt.update {
			t.Errorf("%s publishes an update: %v", tt.policy, got)
		}
		if got := tt.policy.Publishes(nothing); got != tt.nothing {
			t.Errorf("%s publishes no_update: %v", tt.policy, got)
		}
	}
}

func TestConfigValidate(t *testing.T) {
	if err := DefaultConfig().Validate(nil); err != nil {
		t.Fatalf("defaults: %v", err)
	}
	tests := []struct {
		mod func(*Config)
		key string
	}{
		{func(c *Config) { c.Policy = "sometimes" }, "policy"},
		{func(c *Config) { c.Scope = "every-step" }, "scope"},
		{func(c *Config) { c.Mask = "all" }, "mask"},
		{func(c *Config) { c.ResponseFormat = "xml" }, "response_format"},
		{func(c *Config) { c.Timeout = 0 }, "timeout"},
		{func(c *Config) { c.Routes = []string{"nope"} }, "routes[0]"},
	}
	for _, tt := range tests {
		c := DefaultConfig()
		tt.mod(&c)
		if err := c.Validate([]string{"default"}); err == nil || !strings.HasPrefix(err.Error(), tt.key) {
			t.Errorf("want an error naming %s, got %v", tt.key, err)
		}
	}
}
