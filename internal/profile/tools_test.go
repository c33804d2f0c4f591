package profile

import (
	"testing"

	"github.com/shaperproxy/shaperproxy/conv"
	"github.com/shaperproxy/shaperproxy/fixtures"
	"github.com/tidwall/gjson"
	"github.com/tidwall/sjson"
)

// TestHasTools: the view-based check answers as a gjson lookup of the
// body does (a non-empty "tools" array, the first member of that name),
// wherever the member lies and however it is spaced.
func TestHasTools(t *testing.T) {
	msgs := `"messages":[{"role":"user","content":"hi"}]`
	for _, tc := range []struct {
		body string
		want bool
	}{
		{`{` + msgs + `}`, false},
		{`{` + msgs + `,"tools":[{"type":"function","function":{"name":"f"}}]}`, true},
		{`{"tools":[{"type":"function"}],` + msgs + `}`, true},
		{`{` + msgs + `,"tools":[]}`, false},
		{`{` + msgs + `,"tools": [ ] }`, false},
		{`{` + msgs + `,"tools" :` + "\n\t" + `[` + "\r\n" + ` {"type":"function"} ]}`, true},
		{`{` + msgs + `,"tools":null}`, false},
		{`{` + msgs + `,"tools":{"type":"function"}}`, false},
		{`{` + msgs + `,"tools":"[1]"}`, false},
		{`{` + msgs + `,"tools":[],"tools":[{"type":"function"}]}`, false}, // the first, as gjson
		{`{` + msgs + `,"tools":[{"type":"function"}],"tools":[]}`, true},
		{`{` + msgs + `,"x":{"tools":[1]}}`, false}, // nested: not the request's
	} {
		req, err := conv.ParseRequest([]byte(tc.body))
		if err != nil {
			t.Fatalf("%s: %v", tc.body, err)
		}
		g := gjson.Get(tc.body, "tools")
		if byGJSON := g.IsArray() && len(g.Array()) > 0; byGJSON != tc.want {
			t.Fatalf("%s: the table says %v, gjson %v", tc.body, tc.want, byGJSON)
		}
		if got := HasTools(req); got != tc.want {
			t.Errorf("%s: HasTools = %v, want %v", tc.body, got, tc.want)
		}
	}
}

// BenchmarkHasTools: the seed's request with "tools" before "messages"
// (as the fixture has it) and after them (as the OpenAI SDKs send it),
// read from the view's member list, and by a lookup in the body as it was
// (body-lookup), which skips the whole history in the second case.
func BenchmarkHasTools(b *testing.B) {
	seed := fixtures.SeedHistory()
	tools := gjson.GetBytes(seed, "tools").Raw
	after, _ := sjson.DeleteBytes(seed, "tools")
	after, _ = sjson.SetRawBytes(after, "tools", []byte(tools))
	for _, c := range []struct {
		name string
		body []byte
	}{{"tools-first", seed}, {"messages-first", after}} {
		req, err := conv.ParseRequest(c.body)
		if err != nil {
			b.Fatal(err)
		}
		b.Run(c.name, func(b *testing.B) {
			for b.Loop() {
				if !HasTools(req) {
					b.Fatal("no tools found")
				}
			}
		})
		b.Run(c.name+"/body-lookup", func(b *testing.B) { // as it was: a lookup in the body
			for b.Loop() {
				if t := gjson.GetBytes(c.body, "tools"); !t.IsArray() || len(t.Array()) == 0 {
					b.Fatal("no tools found")
				}
			}
		})
	}
}

// TestHasToolsReadsNoHistory: the answer comes from the "tools" member
// alone. With the history's bytes overwritten after the parse (an
// unclosed bracket each), a lookup that skips over the history would
// never reach "tools"; the view's member list goes straight to it.
func TestHasToolsReadsNoHistory(t *testing.T) {
	body := []byte(`{"messages":[{"role":"user","content":"hi"},{"role":"assistant","content":"hello"}],"tools":[{"type":"function"}]}`)
	req, err := conv.ParseRequest(body)
	if err != nil {
		t.Fatal(err)
	}
	f, ok := req.Field("messages")
	if !ok {
		t.Fatal("no messages member")
	}
	for i := f.Start + 1; i < f.End-1; i++ {
		body[i] = '['
	}
	if !HasTools(req) {
		t.Fatal("HasTools read the history: it did not find the tools after it")
	}
}

// TestHasToolsOtherViews: the views the request path hands the shaper
// besides a fresh parse — the Reparser's, which reuses the previous
// request's messages, and an edited body's, derived from the edits —
// locate "tools" as well.
func TestHasToolsOtherViews(t *testing.T) {
	first := []byte(`{"messages":[{"role":"user","content":"hi"}],"model":"m","tools":[{"type":"function"}]}`)
	next := []byte(`{"messages":[{"role":"user","content":"hi"},{"role":"assistant","content":"hello"},{"role":"user","content":"and?"}],"model":"m","tools":[{"type":"function"}]}`)
	rp := conv.NewReparser(1 << 20)
	if _, err := rp.Parse(first); err != nil {
		t.Fatal(err)
	}
	req, err := rp.Parse(next)
	if err != nil {
		t.Fatal(err)
	}
	if !HasTools(req) {
		t.Fatal("the Reparser's view: no tools found")
	}
	// An edit inside a message moves "tools"; an edit of its value empties it.
	m := req.Messages[1]
	moved, err := req.Apply([]conv.Edit{{Start: m.Start, End: m.End, Repl: []byte(`{"role":"assistant","content":"a much longer answer than before"}`)}})
	if err != nil {
		t.Fatal(err)
	}
	if !HasTools(moved) {
		t.Fatal("an edited view: no tools found after the edit moved them")
	}
	f, _ := moved.Field("tools")
	emptied, err := moved.Apply([]conv.Edit{{Start: f.Start, End: f.End, Repl: []byte(`[]`)}})
	if err != nil {
		t.Fatal(err)
	}
	if HasTools(emptied) {
		t.Fatal("an edited view: tools found after the edit emptied them")
	}
}
