package main

import (
	"context"
	"fmt"
	"io"
	"sort"
	"strings"
	"text/tabwriter"

	"github.com/shaperproxy/shaperproxy/internal/config"
	"github.com/shaperproxy/shaperproxy/internal/profile"
	"github.com/shaperproxy/shaperproxy/internal/redact"
)

// profilesFlags are the flags of `profiles`.
type profilesFlags struct {
	config, upstream, model string
	json                    bool
}

const profilesUsage = `usage: shaperproxy profiles [flags]

Lists the rendering profiles, in the order they are tried, and the one each
configured route resolves to (for --model, or by the upstream alone).`

// runProfiles lists the rendering profiles, in the order they are tried,
// and which one each configured route resolves to (for --model, or by the
// upstream alone).
func runProfiles(_ context.Context, args []string, stdout, stderr io.Writer) error {
	var f profilesFlags
	fs := newFlagSet("profiles", profilesUsage, stdout)
	fs.StringVar(&f.config, "config", "", "TOML configuration `file` (its routes and [[profile]] entries)")
	fs.StringVar(&f.upstream, "upstream", "", "upstream `URL` of the default route (default "+config.DefaultUpstream+")")
	fs.StringVar(&f.model, "model", "", "resolve the routes for this `model` name")
	fs.BoolVar(&f.json, "json", false, "print JSON")
	if err := fs.parse(args); err != nil {
		return err
	}
	c := config.Default()
	if f.config != "" {
		var err error
		if c, err = config.Load(f.config); err != nil {
			return err
		}
	}
	routes := c.WithDefaultRoute(f.upstream)
	tab := profile.NewTable(c.Profiles, upstreams(routes))
	rep := profilesReport{Policy: string(c.Shaping.Policy), Model: f.model}
	for _, p := range tab.Profiles() {
		rep.Profiles = append(rep.Profiles, profileRow(p))
	}
	for _, r := range routes {
		p := tab.ForRoute(r.Name, f.model)
		rep.Routes = append(rep.Routes, routeRow{Route: r.Name, Upstream: redact.URL(r.Upstream), Profile: p.Name, Family: p.Family})
	}
	if f.json {
		return newJSONLines(stdout).write(rep)
	}
	return printProfiles(stdout, rep)
}

// profilesReport is what `profiles` prints.
type profilesReport struct {
	Policy   string       `json:"shaping_policy"`
	Model    string       `json:"model"`
	Profiles []profileOut `json:"profiles"`
	Routes   []routeRow   `json:"routes"`
}

// profileOut is one profile as printed.
type profileOut struct {
	Name            string   `json:"name"`
	Family          string   `json:"family"`
	Match           []string `json:"match,omitempty"`
	Earlier         string   `json:"earlier"`
	TurnRendered    bool     `json:"turn_rendered"`
	Boundary        string   `json:"boundary"`
	Field           string   `json:"field"`
	Notice          []string `json:"notice"`
	Frozen          bool     `json:"frozen"`
	ChildToolChoice string   `json:"child_tool_choice,omitempty"`
	Resends         int      `json:"resends"`
	HitPerM         float64  `json:"hit_per_m,omitempty"`
	MissPerM        float64  `json:"miss_per_m,omitempty"`
	OutputPerM      float64  `json:"output_per_m,omitempty"`
	Ratio           float64  `json:"ratio,omitempty"`
	PriceNote       string   `json:"price_note,omitempty"`
	Template        string   `json:"template,omitempty"`
	Source          string   `json:"source"`
}

// routeRow is the profile a route resolves to.
type routeRow struct {
	Route    string `json:"route"`
	Upstream string `json:"upstream"`
	Profile  string `json:"profile"`
	Family   string `json:"family"`
}

func profileRow(p profile.Profile) profileOut {
	out := profileOut{
		Name: p.Name, Family: p.Family, Earlier: string(p.Earlier), TurnRendered: p.TurnRendered,
		Boundary: string(p.Boundary), Field: p.Field, Frozen: p.Frozen, ChildToolChoice: p.ChildToolChoice,
		Resends: p.Resends, HitPerM: p.Prices.HitPerM, MissPerM: p.Prices.MissPerM, OutputPerM: p.Prices.OutputPerM,
		PriceNote: p.Prices.Note, Template: p.Template, Source: p.Source,
	}
	if r, ok := p.Prices.HitRatio(); ok {
		out.Ratio = r
	}
	for _, n := range p.Notice {
		out.Notice = append(out.Notice, string(n))
	}
	for _, s := range p.Match {
		var parts []string
		for _, kv := range [][2]string{{"route", s.Route}, {"upstream", s.Upstream}, {"model", s.Model}} {
			if kv[1] != "" {
				parts = append(parts, kv[0]+"="+kv[1])
			}
		}
		out.Match = append(out.Match, strings.Join(parts, " "))
	}
	return out
}

func printProfiles(w io.Writer, rep profilesReport) error {
	fmt.Fprintf(w, "rendering profiles, in the order they are tried (shaping policy %q):\n\n", rep.Policy)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tEARLIER TURNS\tTOOL LOOP\tNOTICE\tFROZEN\tHIT/MISS $/M\tRATIO\tTEMPLATE\tMATCH")
	for _, p := range rep.Profiles {
		loop := "dropped"
		if p.TurnRendered {
			loop = "rendered"
		}
		prices, ratio := "–", "–"
		if p.MissPerM > 0 {
			prices = fmt.Sprintf("%g/%g", p.HitPerM, p.MissPerM)
		}
		if p.Ratio > 0 {
			ratio = fmt.Sprintf("%.3g", p.Ratio)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%v\t%s\t%s\t%s\t%s\n", p.Name, p.Earlier, loop, strings.Join(p.Notice, ","),
			p.Frozen, prices, ratio, or(p.Template, "–"), or(strings.Join(p.Match, "; "), "(anything else)"))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	model := rep.Model
	if model == "" {
		model = "any model (--model to choose one)"
	}
	fmt.Fprintf(w, "\nroutes, for %s:\n", model)
	rows := append([]routeRow(nil), rep.Routes...)
	sort.SliceStable(rows, func(i, j int) bool { return rows[i].Route < rows[j].Route })
	for _, r := range rows {
		fmt.Fprintf(w, "  %s (%s) → %s: %s\n", r.Route, r.Upstream, r.Profile, r.Family)
	}
	fmt.Fprintln(w, "\nsources: shaperproxy profiles --json")
	return nil
}

func or(s, def string) string {
	if s == "" {
		return def
	}
	return s
}
