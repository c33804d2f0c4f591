package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const profilesConfig = `
[[route]]
name = "ds"
prefix = "/ds"
upstream = "https://api.deepseek.com"

[[route]]
name = "ali"
prefix = "/ali"
upstream = "https://dashscope-intl.aliyuncs.com/compatible-mode"

[[route]]
name = "box"
prefix = "/box"
upstream = "http://10.0.0.7:8000"

[[profile]]
name = "gpu-box"
base = "qwen3"
upstream = "10.0.0.7"
ratio = 0.05

[[profile]]
name = "deepseek-v4"
hit_per_m = 0.006
miss_per_m = 0.30
`

// TestProfilesCommand: `profiles` lists the built-in and configured
// profiles and resolves every configured route (the default one
// included), for a given model; --json carries the same.
func TestProfilesCommand(t *testing.T) {
	cfg := filepath.Join(t.TempDir(), "c.toml")
	if err := os.WriteFile(cfg, []byte(profilesConfig), 0o600); err != nil {
		t.Fatal(err)
	}
	var out, errOut bytes.Buffer
	if err := run(context.Background(), []string{"profiles", "--config", cfg, "--model", "Qwen/Qwen3-32B"}, &out, &errOut); err != nil {
		t.Fatalf("%v: %s", err, errOut.String())
	}
	text := out.String()
	for _, want := range []string{
		"ds (https://api.deepseek.com) → deepseek-v4",
		"ali (https://dashscope-intl.aliyuncs.com/compatible-mode) → dashscope",
		"box (http://10.0.0.7:8000) → gpu-box",
		"default (https://api.deepseek.com) → deepseek-v4",
		"0.006/0.3", // the configured DeepSeek prices
		"kimi-k2-thinking", "unknown",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("output lacks %q:\n%s", want, text)
		}
	}
	out.Reset()
	if err := run(context.Background(), []string{"profiles", "--config", cfg, "--model", "MiniMaxAI/MiniMax-M2", "--upstream", "http://127.0.0.1:9", "--json"}, &out, &errOut); err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(out.String(), "\n"); n != 1 {
		t.Errorf("--json printed %d lines, want one object on one line", n)
	}
	var rep profilesReport
	if err := json.Unmarshal(out.Bytes(), &rep); err != nil {
		t.Fatalf("%v: %s", err, out.String())
	}
	got := map[string]string{}
	for _, r := range rep.Routes {
		got[r.Route] = r.Profile
	}
	// The model decides on the loopback default route; hosts decide elsewhere.
	if got["default"] != "minimax-m2" || got["box"] != "gpu-box" || got["ds"] != "deepseek-v4" || got["ali"] != "dashscope" {
		t.Errorf("routes resolve to %v", got)
	}
	if rep.Policy != "cache-aware" || len(rep.Profiles) < 17 || rep.Profiles[0].Name != "gpu-box" || rep.Profiles[0].Ratio != 0.05 {
		t.Errorf("report: policy %q, %d profiles, first %+v", rep.Policy, len(rep.Profiles), rep.Profiles[0])
	}
	for _, p := range rep.Profiles {
		if p.Source == "" {
			t.Errorf("%s has no source", p.Name)
		}
	}
	// An upstream URL with a key in it is printed redacted, as in serve's banner.
	out.Reset()
	if err := run(context.Background(), []string{"profiles", "--config", cfg, "--upstream", "https://user:sk-live-0123456789abcdef@example.com/v1"}, &out, &errOut); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(out.String(), "sk-live-0123456789abcdef") {
		t.Errorf("profiles printed the key of an upstream URL:\n%s", out.String())
	}
}
