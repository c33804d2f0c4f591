package deliberate

import (
	"bytes"
	"testing"

	"github.com/shaperproxy/shaperproxy/conv"
	"github.com/shaperproxy/shaperproxy/fixtures"
	"github.com/tidwall/gjson"
	"github.com/tidwall/sjson"
)

// TestAddToolAsInject checks that addTool writes exactly injectTool's
// bytes, and that its view is the view of those bytes.
func TestAddToolAsInject(t *testing.T) {
	d := New(Config{Routes: []string{"*"}}, nil, nil)
	seedTools, _ := sjson.SetRawBytes(fixtures.SeedHistory(), "tools", []byte(`[{"type":"function","function":{"name":"run"}}]`))
	bodies := []string{
		`{"model":"m","tools":[{"type":"function","function":{"name":"run"}}],"messages":[{"role":"user","content":"hi"}]}`,
		`{"messages":[{"role":"user","content":"hi"}],"tools":[ {"type":"function","function":{"name":"a"}} , {"type":"function","function":{"name":"b"}} ] ,"stream":true}`,
		`{"messages":[{"role":"user","content":"hi"}],"tools":[]}`,
		`{"messages":[{"role":"user","content":"hi"}],"tools":{}}`,
		`{"messages":[{"role":"user","content":"hi"}]}`,
		`{"messages":[{"role":"user","content":"hi"}],"tools":[{"type":"function","function":{"name":"deliberate"}}]}`,
		`{"tools":[{"type":"function","function":{"name":"a"}}],"messages":[{"role":"user","content":"hi"}],"tools":[{"type":"function","function":{"name":"b"}}]}`,
		string(fixtures.SeedHistory()),
		string(seedTools),
	}
	for i, b := range bodies {
		view, err := conv.ParseRequest([]byte(b))
		if err != nil {
			t.Fatalf("body %d: %v", i, err)
		}
		want, wantOK := injectTool(view, d.tool)
		got, ok := d.addTool(view)
		if ok != wantOK || !bytes.Equal(got.Body, want) {
			t.Fatalf("body %d: addTool = %v %.200s, injectTool = %v %.200s", i, ok, got.Body, wantOK, want)
		}
		fresh, err := conv.ParseRequest(want)
		if err != nil {
			t.Fatal(err)
		}
		if len(fresh.Messages) != len(got.Messages) {
			t.Fatalf("body %d: view has %d messages, want %d", i, len(got.Messages), len(fresh.Messages))
		}
		for k := range fresh.Messages {
			if g, w := got.Messages[k], fresh.Messages[k]; g.Start != w.Start || g.End != w.End || g.Content != w.Content || g.Reasoning != w.Reasoning {
				t.Fatalf("body %d message %d: view %+v, parsed %+v", i, k, g, w)
			}
		}
	}
}

// injectTool is the reference addTool is checked against: it returns body with the deliberate tool appended to its
// non-empty "tools" array, and whether it added it. A request without
// tools, or one whose client already declares a function named
// deliberate, is left alone. tool is toolJSON's bytes.
func injectTool(req *conv.Request, tool []byte) ([]byte, bool) {
	tools := gjson.GetBytes(req.Body, "tools")
	if !tools.IsArray() || len(tools.Array()) == 0 || declares(tools) || tools.Index <= 0 {
		return req.Body, false
	}
	end := tools.Index + bytes.LastIndexByte([]byte(tools.Raw), ']')
	out := make([]byte, 0, len(req.Body)+len(tool)+1)
	out = append(append(out, req.Body[:end]...), ',')
	out = append(append(out, tool...), req.Body[end:]...)
	return out, true
}
