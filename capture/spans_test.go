package capture

import (
	"bytes"
	"reflect"
	"runtime"
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
			// A span carries the key the view gave its message or member:
			// the key of those very bytes, not hashed again by the writer.
			if sp.key != conv.RawKeyOf(view.Body[sp.start:sp.end]) {
				t.Errorf("body %d: span %d's key %v is not the key of its bytes", i, k, sp.key)
			}
		}
		if !reflect.DeepEqual(ranges, want) {
			t.Errorf("body %d: spansOf %v, splitBody %v", i, ranges, want)
		}
	}
}

// TestSplitBodyBounded: a body of more array elements than maxSpans (a
// request past conv's bounds has no view and is split here) is stored
// whole, without a span apiece: splitting 2 MB of "0," made 191 MB of
// spans and blob entries.
func TestSplitBodyBounded(t *testing.T) {
	body := func(n int) []byte {
		return []byte(`{"model":"m","messages":[` + strings.TrimSuffix(strings.Repeat("0,", n), ",") + `]}`)
	}
	if got := splitBody(body(maxSpans)); len(got) != maxSpans {
		t.Fatalf("%d spans at the bound, want %d", len(got), maxSpans)
	}
	big := body(1 << 20)
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	got := splitBody(big)
	runtime.ReadMemStats(&after)
	if got != nil {
		t.Fatalf("%d spans for %d elements, want none (stored whole)", len(got), 1<<20)
	}
	if alloc := after.TotalAlloc - before.TotalAlloc; alloc > 32<<20 {
		t.Fatalf("splitting %d bytes allocated %d MB", len(big), alloc>>20)
	}
	// Through a writer: the record is stored whole and reads back.
	w, dir := openTest(t, Options{})
	if !w.Enqueue(Record{Kind: KindRequest, Call: "c", Data: big}) {
		t.Fatal("not queued")
	}
	mustFlush(t, w)
	var reqs []Located
	for _, l := range scanAll(t, openReaderTest(t, dir)) {
		if l.Record.Kind == KindRequest {
			reqs = append(reqs, l)
		}
	}
	if len(reqs) != 1 || !bytes.Equal(reqs[0].Record.Data, big) {
		t.Fatalf("%d requests read back, or not the body", len(reqs))
	}
}
