package conv

import (
	"testing"

	"github.com/tidwall/gjson"
)

// FuzzFirstKeys: one pass of firstKeys finds what a gjson lookup by key
// finds, key by key (the Assembler relies on it).
func FuzzFirstKeys(f *testing.F) {
	for _, s := range []string{
		`{"id":"a","id":"b","model":1,"choices":[{"index":0}]}`,
		`{"i\u0064":"esc","id":"plain"}`,
		`{"role":"assistant","reasoning_content":null,"reasoning":"r","content":[{"type":"text","text":"t"}]}`,
		`{"usage":{"a":1},"error":null,"x":{"id":"nested"}}`,
		`{}`,
	} {
		f.Add(s)
	}
	names := append(append(append([]string(nil), responseKeys...), choiceKeys...), partKeys...)
	f.Fuzz(func(t *testing.T, s string) {
		obj := gjson.Parse(s)
		if !ValidJSONString(s) || !obj.IsObject() {
			return
		}
		k := firstKeys(obj, names...)
		for _, n := range names {
			got, want := k.get(n), obj.Get(n)
			if got.Type != want.Type || got.Raw != want.Raw || got.Str != want.Str {
				t.Fatalf("%s in %q: firstKeys %v, Get %v", n, s, got, want)
			}
		}
	})
}
