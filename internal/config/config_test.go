package config

import (
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"
)

// TestExampleIsDefault: config.example.toml parses and, with its routes
// commented out, equals Default, so the documented defaults are true.
func TestExampleIsDefault(t *testing.T) {
	c, err := Load(filepath.Join("..", "..", "config.example.toml"))
	if err != nil {
		t.Fatal(err)
	}
	d := Default()
	for _, cfg := range []*Config{&c, &d} { // an empty list and no list are the same setting
		if len(cfg.Intercept) == 0 {
			cfg.Intercept = nil
		}
		if len(cfg.Routes) == 0 {
			cfg.Routes = nil
		}
		if len(cfg.Review.Routes) == 0 {
			cfg.Review.Routes = nil
		}
		for _, l := range []*[]string{&cfg.Tunnel, &cfg.AllowedHosts, &cfg.AllowedOrigins, &cfg.ClientKeys} {
			if len(*l) == 0 {
				*l = nil
			}
		}
		if len(cfg.Deliberate.Routes) == 0 {
			cfg.Deliberate.Routes = nil
		}
	}
	if !reflect.DeepEqual(c, d) {
		t.Fatalf("example differs from the defaults:\n%+v\n%+v", c, d)
	}
}

func TestErrorsNameTheKey(t *testing.T) {
	tests := []struct{ text, key string }{
		{`listen = "nonsense"`, "listen"},
		{`max_body_bytes = 0`, "max_body_bytes"},
		{`log_level = "loud"`, "log_level"},
		{`log_format = "xml"`, "log_format"},
		{`shutdown_grace = "-1s"`, "shutdown_grace"},
		{"[timeouts]\nconnect = \"-1s\"", "timeouts.connect"},
		{"[timeouts]\nstream_idle = \"soon\"", "stream_idle"},
		{`lisen = "127.0.0.1:1"`, "lisen"},
		{"[[route]]\nname = \"a\"\nupstream = \"ftp://x\"\nprefix = \"/a\"", "route[0].upstream"},
		{"[[route]]\nname = \"a\"\nupstream = \"https://x\"", "route[0].prefix"},
		{"[review]\nroutes = [\"nope\"]", "review.routes[0]"},
		{"[guard]\nstep_down_requests = 1.5", "guard.step_down_requests"},
		{"[guard]\nstep_down_requests = -1", "guard.step_down_requests"},
		{"[guard]\nstall_action = \"shout\"", "guard.stall_action"},
		{"[review]\npolicy = \"sometimes\"", "review.policy"},
		{`client_keys = ["short"]`, "client_keys[0]"},
		{`allowed_origins = ["localhost:3000"]`, "allowed_origins[0]"},
		{`tunnel = ["a*b"]`, "tunnel[0]"},
		{"[timeouts]\nclient_idle = \"-1s\"", "timeouts.client_idle"},
		{"[[route]]\nname = \"a\"\nupstream = \"https://x\"\ndefault = true\n[[route]]\nname = \"a\"\nupstream = \"https://y\"\nprefix = \"/y\"", "route[1].name"},
	}
	for _, tt := range tests {
		c := Default()
		err := c.Parse(tt.text)
		if err == nil || !strings.Contains(err.Error(), tt.key) {
			t.Errorf("%q: err = %v, want one naming %s", tt.text, err, tt.key)
		}
	}
}

func TestRoutesAndKeys(t *testing.T) {
	c := Default()
	err := c.Parse(`
[timeouts]
connect = "3s"
[[route]]
name = "or"
prefix = "/openrouter"
upstream = "https://openrouter.ai"
api_key_env = "OR_KEY"
`)
	if err != nil {
		t.Fatal(err)
	}
	if c.Timeouts.Connect != 3*time.Second {
		t.Errorf("connect = %v", c.Timeouts.Connect)
	}
	routes := c.WithDefaultRoute("")
	if len(routes) != 2 || !routes[1].Default || routes[1].Upstream != DefaultUpstream {
		t.Fatalf("routes = %+v", routes)
	}
	if k := routes[0].Key(func(s string) string { return map[string]string{"OR_KEY": "k1"}[s] }); k != "k1" {
		t.Errorf("key = %q", k)
	}
}

func TestClientKeyList(t *testing.T) {
	c := Default()
	if err := c.Parse(`client_keys = ["0123456789abcdef"]` + "\nclient_keys_env = \"K\""); err != nil {
		t.Fatal(err)
	}
	got := c.ClientKeyList(func(string) string { return " k1 ,, k2" })
	if want := []string{"0123456789abcdef", "k1", "k2"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("keys = %q, want %q", got, want)
	}
}

// TestUpstreamErrorsHideKeys: an upstream URL that is wrong is quoted in
// the error with the key in its user info redacted, whatever is wrong
// with it.
func TestUpstreamErrorsHideKeys(t *testing.T) {
	for _, up := range []string{
		"htps://user:CFGSECRET14@api.example.com",
		"https://sk-proj-CFGSECRET15abc@/v1",
		"https://user:CFGSECRET16@api.example.com/%zz",
		"https//user:CFGSECRET17@api.example.com",
		"https://user:wJalr/CFGSECRET18#x@api.example.com",
	} {
		c := Default()
		err := c.Parse("[[route]]\nname = \"a\"\nupstream = \"" + up + "\"\nprefix = \"/a\"")
		if err == nil || !strings.Contains(err.Error(), "route[0].upstream") {
			t.Fatalf("%s: err = %v, want one naming route[0].upstream", up, err)
		}
		if strings.Contains(err.Error(), "CFGSECRET") {
			t.Errorf("%s: the error holds the key: %v", up, err)
		}
	}
}
