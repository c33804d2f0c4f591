package guard

import "testing"

func TestIdentity(t *testing.T) {
	g := mustGuard(t, nil)
	read := func(id string) tc { return tc{id, "read_file", `{"path":"main.go"}`} }
	base := func() *hist { return (&hist{}).system("agent").user("go") }
	for _, tc := range []struct {
		name string
		h    *hist
		want int
	}{
		{"three failures", failingLoop(3), 3},
		{"duplicate failing result counted once", base().
			assistant("", read("a")).tool("a", failOut).tool("a", failOut).
			assistant("", read("b")).tool("b", failOut), 2},
		{"first result wins over a later success", base().
			assistant("", read("a")).tool("a", failOut).tool("a", okOut).
			assistant("", read("b")).tool("b", failOut).
			assistant("", read("c")).tool("c", failOut), 3},
		{"first result wins over a later failure", base().
			assistant("", read("a")).tool("a", failOut).
			assistant("", read("b")).tool("b", okOut).tool("b", failOut).
			assistant("", read("c")).tool("c", failOut), 1},
		{"an id reused after its result is a new call", base().
			assistant("", read("a")).tool("a", failOut).
			assistant("", read("a")).tool("a", failOut).
			assistant("", read("b")).tool("b", failOut), 3},
		{"the same call twice before its result counted once", base().
			assistant("", read("a"), read("a")).tool("a", failOut).
			assistant("", read("b")).tool("b", failOut), 2},
		{"a reused id with other arguments after its result", base().
			assistant("", read("a")).tool("a", failOut).
			assistant("", tc{"a", "read_file", `{"path":"go.mod"}`}).tool("a", failOut).
			assistant("", read("b")).tool("b", failOut), 1},
		{"orphan results count for nothing", base().
			assistant("", read("a")).tool("a", failOut).
			tool("ghost", failOut).tool("", failOut).
			assistant("", read("b")).tool("b", failOut), 2},
		{"result before its call is an orphan; the call is pending", base().
			assistant("", read("a")).tool("a", failOut).
			assistant("", read("b")).tool("b", failOut).
			tool("c", failOut).assistant("", read("c")), 0},
		{"missing id breaks the run", base().
			assistant("", read("a")).tool("a", failOut).
			assistant("", read("")).tool("", failOut).
			assistant("", read("b")).tool("b", failOut).
			assistant("", read("c")).tool("c", failOut), 2},
		{"newest call without id", base().
			assistant("", read("a")).tool("a", failOut).
			assistant("", read("b")).tool("b", failOut).
			assistant("", read("")).tool("", failOut), 0},
		{"conflicting arguments for one id", base().
			assistant("", read("a")).tool("a", failOut).
			assistant("", read("b")).tool("b", failOut).
			assistant("", tc{"b", "read_file", `{"path":"other.go"}`}).tool("b", failOut).
			assistant("", read("c")).tool("c", failOut), 1},
		{"conflicting name for one id", base().
			assistant("", read("a")).tool("a", failOut).
			assistant("", read("b")).tool("b", failOut).
			assistant("", tc{"a", "write_file", `{"path":"main.go"}`}).
			assistant("", read("c")).tool("c", failOut), 1},
		{"same id, same arguments in another spelling is a duplicate", base().
			assistant("", read("a")).tool("a", failOut).
			assistant("", tc{"a", "read_file", ` { "path" : "main.go" } `}).
			assistant("", read("b")).tool("b", failOut).
			assistant("", read("c")).tool("c", failOut), 3},
		{"unparseable arguments never match", base().
			assistant("", tc{"a", "bash", `{"cmd":`}).tool("a", failOut).
			assistant("", tc{"b", "bash", `{"cmd":`}).tool("b", failOut).
			assistant("", tc{"c", "bash", `{"cmd":`}).tool("c", failOut), 0},
		{"empty arguments are unknown", base().
			assistant("", tc{"a", "ls", ``}).tool("a", failOut).
			assistant("", tc{"b", "ls", ``}).tool("b", failOut).
			assistant("", tc{"c", "ls", ``}).tool("c", failOut), 0},
		{"a new signature breaks the run", base().
			assistant("", read("a")).tool("a", failOut).
			assistant("", tc{"x", "read_file", `{"path":"go.mod"}`}).tool("x", failOut).
			assistant("", read("b")).tool("b", failOut).
			assistant("", read("c")).tool("c", failOut), 2},
		{"equal arguments in another spelling continue the run", base().
			assistant("", read("a")).tool("a", failOut).
			assistant("", tc{"b", "read_file", "{\n  \"path\": \"main.go\"\n}"}).tool("b", failOut).
			assistant("", read("c")).tool("c", failOut), 3},
		{"a success ends the run", base().
			assistant("", read("a")).tool("a", failOut).
			assistant("", read("b")).tool("b", okOut).
			assistant("", read("c")).tool("c", failOut), 1},
		{"a pending newest call", base().
			assistant("", read("a")).tool("a", failOut).
			assistant("", read("b")).tool("b", failOut).
			assistant("", read("c"), read("d")).tool("c", failOut), 0},
		{"calls across turns still count", base().
			assistant("", read("a")).tool("a", failOut).
			assistant("giving up").user("try again").
			assistant("", read("b")).tool("b", failOut).
			assistant("", read("c")).tool("c", failOut), 3},
	} {
		sig := g.Fold(tc.h.req(t))
		if got := sig.Echo.Count(""); got != tc.want {
			t.Errorf("%s: count %d, want %d (chain %+v)", tc.name, got, tc.want, sig.Echo.Chain)
		}
	}
}

// TestArgumentsAsObject: a client may send arguments as a JSON object
// rather than a string; the signature is the same.
func TestArgumentsAsObject(t *testing.T) {
	g := mustGuard(t, nil)
	h := (&hist{}).user("go")
	for _, id := range []string{"a", "b", "c"} {
		h.raw(`{"role":"assistant","content":null,"tool_calls":[{"id":"` + id + `","type":"function","function":{"name":"read_file","arguments":{"path":"main.go"}}}]}`)
		h.tool(id, failOut)
	}
	h.assistant("", tc{"d", "read_file", `{"path":"main.go"}`}).tool("d", failOut)
	if n := g.Fold(h.req(t)).Echo.Count(""); n != 4 {
		t.Errorf("count %d, want 4", n)
	}
}
