package deliberate

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/shaperproxy/shaperproxy/internal/jsonstr"
	"github.com/tidwall/gjson"
)

// ToolName is the function name the model calls.
const ToolName = "deliberate"

// Role fixes what history a branch sees (seed 003 §6).
type Role string

// The roles.
const (
	// RoleAlternative is fresh: the goal and the context only, no history,
	// no incumbent; it proposes its own approach.
	RoleAlternative Role = "independent-alternative"
	// RoleAudit is a fork: the whole conversation and the incumbent; it
	// audits the plan.
	RoleAudit Role = "trajectory-audit"
	// RoleMasked is a mid-fork: the conversation before the last K complete
	// steps, then those steps with their reasoning masked; no incumbent.
	RoleMasked Role = "masked-review"
)

var roles = []Role{RoleAlternative, RoleAudit, RoleMasked}

// Limits of the arguments.
const (
	maxBranches    = 3
	maxRecentSteps = 8
	maxGoalChars   = 8000
	maxTextChars   = 32000 // incumbent, context
)

// policy is the tool's description: the short usage policy the model reads.
const policy = `Ask for independent second opinions before you commit to a plan or an answer. ` +
	`Each branch is a separate model call: expensive and slow, so use it only when a wrong choice would be costly ` +
	`(a risky change, an ambiguous diagnosis, several plausible approaches), not for routine steps. ` +
	`Each role sees a different history: "independent-alternative" sees only goal and context (not the conversation, not your plan) and proposes its own approach; ` +
	`"trajectory-audit" sees the whole conversation and your incumbent plan and audits it; ` +
	`"masked-review" sees the conversation with your reasoning of your last recentSteps completed steps hidden (only what you did and what the tools returned) and looks for errors. ` +
	`Each branch answers with a JSON packet of items (kind, certainty, content): claims to check, not facts.`

// toolJSON returns the function definition added to "tools": the same
// bytes in every request (the tool list is at the head of the rendered
// prompt). strong adds the optional "strong" flag of a branch.
func toolJSON(strong bool) []byte {
	branch := `{"type":"object","additionalProperties":false,"required":["role"],"properties":{` +
		`"role":{"type":"string","enum":["independent-alternative","trajectory-audit","masked-review"]},` +
		`"recentSteps":{"type":"integer","minimum":1,"maximum":8,"description":"masked-review only: how many of your last completed steps to show with their reasoning hidden"}`
	if strong {
		branch += `,"strong":{"type":"boolean","description":"run this branch on the stronger reviewer model"}`
	}
	branch += `}}`
	params := `{"type":"object","additionalProperties":false,"required":["goal","branches"],"properties":{` +
		`"goal":{"type":"string","description":"what you are trying to achieve"},` +
		`"incumbent":{"type":"string","description":"your current plan or answer (shown to trajectory-audit only)"},` +
		`"context":{"type":"string","description":"facts a branch without the conversation needs (shown to independent-alternative)"},` +
		`"branches":{"type":"array","minItems":1,"maxItems":3,"items":` + branch + `}}}`
	b := []byte(`{"type":"function","function":{"name":"deliberate","description":`)
	b = jsonstr.Append(b, policy)
	return append(append(append(b, `,"parameters":`...), params...), "}}"...)
}

// Branch is one requested second opinion.
type Branch struct {
	Role        Role
	RecentSteps int  // masked-review: K, 1 to 8
	Strong      bool // run on Config.StrongModel
}

// Args are a deliberate call's arguments.
type Args struct {
	Goal, Incumbent, Context string
	Branches                 []Branch
}

// parseArgs validates the arguments of a call. The error says what was
// wrong in words the model can act on; it goes back to the model as the
// tool result, never to the client.
func parseArgs(s string, strong bool) (Args, error) {
	if !json.Valid([]byte(s)) || !gjson.Parse(s).IsObject() {
		return Args{}, errors.New("the arguments are not a JSON object")
	}
	o := gjson.Parse(s)
	if err := onlyKeys(o, "arguments", "goal", "incumbent", "context", "branches"); err != nil {
		return Args{}, err
	}
	var a Args
	var err error
	if a.Goal, err = text(o, "goal", true, maxGoalChars); err != nil {
		return Args{}, err
	}
	if a.Incumbent, err = text(o, "incumbent", false, maxTextChars); err != nil {
		return Args{}, err
	}
	if a.Context, err = text(o, "context", false, maxTextChars); err != nil {
		return Args{}, err
	}
	if a.Branches, err = branches(o.Get("branches"), strong); err != nil {
		return Args{}, err
	}
	for _, b := range a.Branches {
		if b.Role == RoleAudit && strings.TrimSpace(a.Incumbent) == "" {
			return Args{}, errors.New(`"trajectory-audit" audits your plan: give it as "incumbent"`)
		}
	}
	return a, nil
}

// onlyKeys rejects keys other than allowed (a misspelt key would otherwise
// be ignored silently).
func onlyKeys(o gjson.Result, what string, allowed ...string) error {
	var err error
	o.ForEach(func(k, _ gjson.Result) bool {
		for _, a := range allowed {
			if k.Str == a {
				return true
			}
		}
		err = fmt.Errorf("unknown key %q in %s (allowed: %s)", k.Str, what, strings.Join(allowed, ", "))
		return false
	})
	return err
}

// text reads an optional or required string of at most limit characters.
func text(o gjson.Result, key string, required bool, limit int) (string, error) {
	v := o.Get(key)
	switch {
	case !v.Exists() || v.Type == gjson.Null:
		if required {
			return "", fmt.Errorf("%q is required", key)
		}
		return "", nil
	case v.Type != gjson.String:
		return "", fmt.Errorf("%q must be a string", key)
	case required && strings.TrimSpace(v.Str) == "":
		return "", fmt.Errorf("%q must not be empty", key)
	case utf8.RuneCountInString(v.Str) > limit:
		return "", fmt.Errorf("%q is longer than %d characters", key, limit)
	}
	return v.Str, nil
}

// branches reads the branches array: 1 to 3 objects with a known role.
func branches(v gjson.Result, strong bool) ([]Branch, error) {
	if !v.IsArray() {
		return nil, errors.New(`"branches" must be an array of 1 to 3 objects like {"role":"trajectory-audit"}`)
	}
	items := v.Array()
	if len(items) == 0 || len(items) > maxBranches {
		return nil, fmt.Errorf(`"branches" must hold 1 to %d branches, not %d`, maxBranches, len(items))
	}
	allowed := []string{"role", "recentSteps"}
	if strong {
		allowed = append(allowed, "strong")
	}
	out := make([]Branch, 0, len(items))
	for i, it := range items {
		b, err := branch(it, allowed)
		if err != nil {
			return nil, fmt.Errorf("branch %d: %w", i+1, err)
		}
		out = append(out, b)
	}
	return out, nil
}

func branch(it gjson.Result, allowed []string) (Branch, error) {
	if !it.IsObject() {
		return Branch{}, errors.New("not an object")
	}
	if err := onlyKeys(it, "a branch", allowed...); err != nil {
		return Branch{}, err
	}
	b := Branch{Role: Role(it.Get("role").Str), Strong: it.Get("strong").Type == gjson.True}
	if !knownRole(b.Role) {
		return Branch{}, fmt.Errorf(`"role" must be one of independent-alternative, trajectory-audit, masked-review`)
	}
	k := it.Get("recentSteps")
	switch {
	case b.Role != RoleMasked && k.Exists():
		return Branch{}, errors.New(`"recentSteps" is for masked-review only`)
	case b.Role != RoleMasked:
	case k.Type != gjson.Number || k.Num != float64(int(k.Num)) || k.Num < 1 || k.Num > maxRecentSteps:
		return Branch{}, fmt.Errorf(`masked-review needs "recentSteps", a whole number from 1 to %d`, maxRecentSteps)
	default:
		b.RecentSteps = int(k.Num)
	}
	return b, nil
}

func knownRole(r Role) bool {
	for _, k := range roles {
		if r == k {
			return true
		}
	}
	return false
}

// quoteJSON appends s as a JSON string.
func quoteJSON(b []byte, s string) []byte { return jsonstr.Append(b, s) }
