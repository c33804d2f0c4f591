package capture

import (
	"reflect"
	"strings"
	"testing"

	"github.com/shaperproxy/shaperproxy/conv"
	"github.com/shaperproxy/shaperproxy/fixtures"
)

// TestSpansOf: the spans read from the proxy's view are splitBody's.
func TestSpansOf(t *testing.T) {
	big := `"` + strings.Repeat("x", minWholeValue) + `"`
	bodies := []string{
		string(fixtures.SeedHistory()),
		`{"model":"m","messages":[{"role":"user","content":"hi"},{"role":"assistant","content":"ok"}]}`,
		`{"tools":[` + big + `],"messages":[{"role":"user","content":"hi"}],"small":[1],"system":` + big + `}`,
		`{"messages":[]}`,
		`{"messages":[],"tools":` + big + `}`,
		`{"messages":[{"role":"user","content":"hi"}],"input":[{"a":1}]}`,
		`{"messages":[{"role":"user"}],"messages":[{"role":"tool"}]}`,
		` { "messages" : [ {"role":"user"} , 1 , "s" ] , "x" : ` + big + ` } `,
	}
	for i, b := range bodies {
		view, err := conv.ParseRequest([]byte(b))
		if err != nil {
			t.Fatalf("body %d: %v", i, err)
		}
		got, want := spansOf(view), splitBody(view.Body)
		if leftToSplit := i == 5 || i == 6; leftToSplit != (got == nil) && want != nil {
			t.Errorf("body %d: spansOf gave nil %v, want nil only for an input array or a repeated key", i, got == nil)
			continue
		}
		if got == nil {
			continue // left to splitBody
		}
		ranges := make([]span, len(got))
		for k, sp := range got {
			ranges[k] = span{start: sp.start, end: sp.end}
			// A message's span carries the key the view gave: the key of
			// those very bytes (other values are keyed by the writer).
			isMessage := false
			for m := range view.Messages {
				isMessage = isMessage || view.Messages[m].Start == sp.start && view.Messages[m].End == sp.end
			}
			if isMessage && sp.key != conv.RawKeyOf(view.Body[sp.start:sp.end]) || !isMessage && sp.key != (conv.RawKey{}) {
				t.Errorf("body %d: span %d's key %v is not what the view gives", i, k, sp.key)
			}
		}
		if !reflect.DeepEqual(ranges, want) {
			t.Errorf("body %d: spansOf %v, splitBody %v", i, ranges, want)
		}
	}
}
