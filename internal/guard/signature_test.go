package guard

import (
	"testing"
)

func TestCanonical(t *testing.T) {
	for _, tc := range []struct {
		in, want string
	}{
		{`{"b":1,"a":2}`, `{"a":2,"b":1}`},
		{` { "a" : [ 3 , 1 , 2 ] } `, `{"a":[3,1,2]}`},
		{`{"z":{"y":1,"x":{"b":true,"a":null}},"a":false}`, `{"a":false,"z":{"x":{"a":null,"b":true},"y":1}}`},
		{`[{"b":1,"a":1},{"d":1,"c":1}]`, `[{"a":1,"b":1},{"c":1,"d":1}]`},
		{`"1"`, `"1"`},
		{`1`, `1`},
		{`1.0`, `1`},
		{`1e0`, `1`},
		{`10e-1`, `1`},
		{`100`, `1e2`},
		{`1.5`, `15e-1`},
		{`-0`, `0`},
		{`-0.0e5`, `0`},
		{`-12.340`, `-1234e-2`},
		{`0.001`, `1e-3`},
		{`9007199254740993`, `9007199254740993`},
		{`{"s":"a\u00e9\"\\\n\u0001/"}`, "{\"s\":\"a\u00e9\\\"\\\\\\n\\u0001/\"}"},
		{`{"\u0061":1}`, `{"a":1}`},
		{`[]`, `[]`},
		{`{}`, `{}`},
	} {
		got, ok := canonical(tc.in)
		if !ok || string(got) != tc.want {
			t.Errorf("Canonical(%s) = %s, %v; want %s", tc.in, got, ok, tc.want)
		}
	}
}

func TestCanonicalUnknown(t *testing.T) {
	for _, in := range []string{
		``, ` `, `{`, `{"a":1`, `{"a":1}x`, `{'a':1}`, `{"a":01}`, `{"a":1,}`, `NaN`,
		`{"a":1,"a":2}`, `{"a":{"b":1,"b":1}}`, `1e99999999999`, `10E1000000000`, "{\"a\":\"\xff\"}",
		"\"a\nb\"",
	} {
		if got, ok := canonical(in); ok {
			t.Errorf("Canonical(%q) = %s, want unknown", in, got)
		}
	}
	deep := ""
	for range maxDepth + 1 {
		deep += "["
	}
	for range maxDepth + 1 {
		deep += "]"
	}
	if _, ok := canonical(deep); ok {
		t.Error("arguments deeper than maxDepth should be unknown")
	}
}

func TestSignature(t *testing.T) {
	a, ok1 := signature("read", `{"path":"a","n":1}`)
	b, ok2 := signature("read", `{ "n" : 1.0, "path" : "a" }`)
	if !ok1 || !ok2 || a != b {
		t.Fatalf("equal arguments in another spelling differ: %v %v", a, b)
	}
	for _, other := range []struct{ name, args string }{
		{"write", `{"path":"a","n":1}`},
		{"read", `{"path":"a","n":"1"}`},
		{"read", `{"path":"a","n":2}`},
		{"read", `{"path":["a"],"n":1}`},
		{"rea", `d{"path":"a","n":1}`},
	} {
		if s, _ := signature(other.name, other.args); s == a {
			t.Errorf("Signature(%q, %q) equals the original", other.name, other.args)
		}
	}
	if _, ok := signature("read", `{"path":`); ok {
		t.Error("unparseable arguments must be unknown")
	}
	if rawSig("read", `{"n":1}`) == a {
		t.Error("rawSig must never equal a Signature")
	}
}
