package profile

import (
	"net/url"
	"strings"
)

// Table resolves profiles: the configured [[profile]] entries that
// select by route, upstream or model first (in their order), then the
// built-ins (with the configured changes to them), then Unknown. A Table
// is immutable and safe for concurrent use.
type Table struct {
	rules    []Profile // configured profiles with selectors, in order
	builtins []Profile // built-ins, changed by the configuration
	unknown  Profile
	routes   map[string]string // route name → upstream URL
}

// NewTable builds the table for the configuration's [[profile]] entries
// (valid: see Config.Validate) and the routes (name → upstream URL).
func NewTable(c Config, routes map[string]string) *Table {
	t := &Table{builtins: builtins(), unknown: Unknown, routes: routes}
	for _, o := range c {
		if o.selects() {
			continue
		}
		if p := t.builtin(o.Name); p != nil {
			o.apply(p)
		} else if o.Name == Unknown.Name {
			o.apply(&t.unknown)
		}
	}
	for _, o := range c {
		if !o.selects() {
			continue
		}
		p := Profile{Name: o.Name}
		if b := t.builtin(o.Base); b != nil {
			p = *b
		} else if o.Base == Unknown.Name || o.Base == "" {
			p = t.unknown
		}
		p.Name, p.Match = o.Name, []Selector{{Route: o.Route, Upstream: o.Upstream, Model: o.Model}}
		o.apply(&p)
		t.rules = append(t.rules, p)
	}
	return t
}

func (t *Table) builtin(name string) *Profile {
	for i := range t.builtins {
		if t.builtins[i].Name == name {
			return &t.builtins[i]
		}
	}
	return nil
}

// Resolve returns the profile for a request of model sent on route to the
// upstream URL upstream (a base URL such as "https://api.deepseek.com",
// or a bare host).
func (t *Table) Resolve(route, upstream, model string) Profile {
	host, hostPath := hostOf(upstream)
	for _, list := range [][]Profile{t.rules, t.builtins} {
		for _, p := range list {
			if p.matches(route, host, hostPath, model) {
				return p
			}
		}
	}
	return t.unknown
}

// ForRoute resolves with the upstream of the named route. A name that is
// no configured route is taken as a host: HTTPS_PROXY mode names the
// route of an intercepted host without a route after the host.
func (t *Table) ForRoute(route, model string) Profile {
	up, ok := t.routes[route]
	if !ok {
		up = route
	}
	return t.Resolve(route, up, model)
}

// Profiles returns the configured profiles, the built-ins and Unknown, in
// the order Resolve tries them.
func (t *Table) Profiles() []Profile {
	out := append(append([]Profile(nil), t.rules...), t.builtins...)
	return append(out, t.unknown)
}

func (p Profile) matches(route, host, hostPath, model string) bool {
	for _, s := range p.Match {
		if Glob(s.Route, route) && (Glob(s.Upstream, host) || Glob(s.Upstream, hostPath)) && Glob(s.Model, model) {
			return true
		}
	}
	return false
}

// hostOf returns the lower-case host of an upstream URL (without port)
// and host+path (without a trailing slash).
func hostOf(upstream string) (host, hostPath string) {
	s := strings.ToLower(upstream)
	if !strings.Contains(s, "://") {
		s = "http://" + s
	}
	u, err := url.Parse(s)
	if err != nil {
		return "", ""
	}
	return u.Hostname(), u.Hostname() + strings.TrimSuffix(u.EscapedPath(), "/")
}

// Glob reports whether s matches pattern, ignoring case: "" and "*"
// match anything, * matches any run of characters ('/' included), ?
// matches one character.
func Glob(pattern, s string) bool {
	if pattern == "" || pattern == "*" {
		return true
	}
	return glob([]rune(strings.ToLower(pattern)), []rune(strings.ToLower(s)))
}

func glob(p, s []rune) bool {
	for len(p) > 0 {
		switch p[0] {
		case '*':
			for i := 0; i <= len(s); i++ {
				if glob(p[1:], s[i:]) {
					return true
				}
			}
			return false
		case '?':
			if len(s) == 0 {
				return false
			}
		default:
			if len(s) == 0 || s[0] != p[0] {
				return false
			}
		}
		p, s = p[1:], s[1:]
	}
	return len(s) == 0
}
