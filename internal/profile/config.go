package profile

import (
	"errors"
	"fmt"
	"slices"

	"github.com/shaperproxy/shaperproxy/conv"
)

// Config is the [[profile]] entries of the configuration.
type Config []Override

// Override is one [[profile]] entry. Without route, upstream or model it
// changes the built-in profile it names (or "unknown") wherever that
// applies. With any of them it is a profile of its own, tried before the
// built-ins: it starts from the built-in named by base ("unknown" by
// default) and applies to the requests its globs all match. Every field
// left unset keeps the base's value.
type Override struct {
	Name     string `toml:"name"`
	Base     string `toml:"base"`
	Route    string `toml:"route"`
	Upstream string `toml:"upstream"`
	Model    string `toml:"model"`

	Family          *string     `toml:"family"`
	Earlier         *Earlier    `toml:"earlier"`
	TurnRendered    *bool       `toml:"turn_rendered"`
	Boundary        *Boundary   `toml:"boundary"`
	Field           *string     `toml:"field"`
	Notice          []Placement `toml:"notice"`
	Frozen          *bool       `toml:"frozen"`
	ChildToolChoice *string     `toml:"child_tool_choice"`
	Resends         *int        `toml:"resends"`
	HitPerM         *float64    `toml:"hit_per_m"`
	MissPerM        *float64    `toml:"miss_per_m"`
	OutputPerM      *float64    `toml:"output_per_m"`
	Ratio           *float64    `toml:"ratio"`
	Template        *string     `toml:"template"`
}

func (o Override) selects() bool { return o.Route != "" || o.Upstream != "" || o.Model != "" }

// apply writes every set field of o into p.
func (o Override) apply(p *Profile) {
	set(&p.Family, o.Family)
	set(&p.Earlier, o.Earlier)
	set(&p.TurnRendered, o.TurnRendered)
	set(&p.Boundary, o.Boundary)
	set(&p.Field, o.Field)
	set(&p.Frozen, o.Frozen)
	set(&p.ChildToolChoice, o.ChildToolChoice)
	set(&p.Resends, o.Resends)
	set(&p.Prices.HitPerM, o.HitPerM)
	set(&p.Prices.MissPerM, o.MissPerM)
	set(&p.Prices.OutputPerM, o.OutputPerM)
	set(&p.Prices.Ratio, o.Ratio)
	set(&p.Template, o.Template)
	if o.Notice != nil {
		p.Notice = slices.Clone(o.Notice)
	}
	if o.anyPrice() {
		p.Prices.Note = "configured"
	}
	p.Source = "configured ([[profile]] " + o.Name + "); " + p.Source
}

func (o Override) anyPrice() bool {
	return o.HitPerM != nil || o.MissPerM != nil || o.OutputPerM != nil || o.Ratio != nil
}

func set[T any](dst *T, v *T) {
	if v != nil {
		*dst = *v
	}
}

// Validate checks every entry; each error names its key (relative to the
// [[profile]] array).
func (c Config) Validate() error {
	var errs []error
	names := map[string]bool{}
	for i, o := range c {
		key := fmt.Sprintf("profile[%d].", i)
		errs = append(errs, o.validate(key)...)
		if o.selects() && names[o.Name] {
			errs = append(errs, fmt.Errorf("%sname: %q is used twice", key, o.Name))
		}
		names[o.Name] = true
	}
	return errors.Join(errs...)
}

func (o Override) validate(key string) []error {
	var errs []error
	add := func(k, format string, a ...any) { errs = append(errs, fmt.Errorf(key+k+": "+format, a...)) }
	known := isBuiltin(o.Name)
	switch {
	case o.Name == "":
		add("name", "must be set")
	case !o.selects() && !known:
		add("name", "%q is no built-in profile: set route, upstream or model to add one", o.Name)
	case o.selects() && known:
		add("name", "%q is a built-in profile: choose another name (base = %q starts from it)", o.Name, o.Name)
	}
	if o.Base != "" && !isBuiltin(o.Base) {
		add("base", "%q is no built-in profile", o.Base)
	}
	if o.Earlier != nil && !slices.Contains([]Earlier{EarlierDropped, EarlierKeptWithTools, EarlierKept}, *o.Earlier) {
		add("earlier", "%q is not dropped, kept-with-tools or kept", *o.Earlier)
	}
	if o.Boundary != nil && !slices.Contains([]Boundary{BoundaryUser, BoundaryFinal, BoundaryUserOrTool}, *o.Boundary) {
		add("boundary", "%q is not last-user, last-final-answer or last-user-or-tool", *o.Boundary)
	}
	if o.Field != nil && !slices.Contains(conv.ReasoningFields[:], *o.Field) {
		add("field", "%q is not one of %v", *o.Field, conv.ReasoningFields)
	}
	for j, pl := range o.Notice {
		if !slices.Contains([]Placement{PlaceSystem, PlaceUser, PlaceToolPair, PlaceToolResult}, pl) {
			add(fmt.Sprintf("notice[%d]", j), "%q is not system, user, tool-pair or tool-result", pl)
		}
	}
	if o.Resends != nil && *o.Resends < 0 {
		add("resends", "must not be negative")
	}
	for _, f := range []struct {
		k string
		v *float64
	}{{"hit_per_m", o.HitPerM}, {"miss_per_m", o.MissPerM}, {"output_per_m", o.OutputPerM}, {"ratio", o.Ratio}} {
		if f.v != nil && *f.v < 0 {
			add(f.k, "must not be negative")
		}
	}
	return errs
}

func isBuiltin(name string) bool {
	if name == Unknown.Name {
		return true
	}
	for _, p := range builtins() {
		if p.Name == name {
			return true
		}
	}
	return false
}
