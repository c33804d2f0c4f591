package capture

import (
	"bytes"
	"fmt"
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
		got, want := spansOf(view, nil, 0), splitBody(view.Body)
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
			// A span marked as one comma after the previous one is that.
			if sp.comma && (k == 0 || sp.start-got[k-1].end != 1 || view.Body[sp.start-1] != ',') {
				t.Errorf("body %d: span %d is marked one comma after the previous one, which it is not", i, k)
			}
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

// TestSkeletonCommaGaps: the gaps the view says are one comma are written
// as one without reading the body (its bytes there are poisoned below, and
// the skeleton still holds the comma), and every other gap as the body has
// it; the skeleton rebuilds the body byte for byte.
func TestSkeletonCommaGaps(t *testing.T) {
	body := []byte(`{"messages":[{"role":"user","content":"a"},{"role":"user","content":"b"}, {"role":"user","content":"c"},` + "\n\t" + `{"role":"user","content":"d"},{"role":"user","content":"e"}]}`)
	view, err := conv.ParseRequest(body)
	if err != nil {
		t.Fatal(err)
	}
	spans := spansOf(view, nil, 0)
	var commas []int
	for k, sp := range spans {
		if sp.comma {
			commas = append(commas, k)
		}
	}
	if !reflect.DeepEqual(commas, []int{1, 4}) {
		t.Fatalf("spans %v marked one comma apart, want 1 and 4", commas)
	}
	ords := make([]uint32, len(spans))
	blobs := map[uint32][]byte{}
	for k, sp := range spans {
		ords[k] = uint32(k)
		blobs[uint32(k)] = body[sp.start:sp.end]
	}
	blob := func(ord uint32) ([]byte, error) { return blobs[ord], nil }
	got, err := rebuild(appendSkeleton(nil, body, spans, ords), blob)
	if err != nil || !bytes.Equal(got, body) {
		t.Fatalf("rebuilt %q, %v; want the body", got, err)
	}
	poisoned := bytes.Clone(body)
	for _, k := range commas {
		poisoned[spans[k].start-1] = 'X'
	}
	for k, sp := range spans {
		blobs[uint32(k)] = poisoned[sp.start:sp.end]
	}
	if got, err := rebuild(appendSkeleton(nil, poisoned, spans, ords), blob); err != nil || !bytes.Equal(got, body) {
		t.Fatalf("the skeleton read a gap the view said was a comma: rebuilt %q, %v", got, err)
	}
}

// TestBlobsByPlace: requests of conversations whose messages differ at
// the same places, interleaved in one segment, each find their own blobs
// (the writer tries the last request's blob at each place first) and read
// back byte for byte.
func TestBlobsByPlace(t *testing.T) {
	w, dir := openTest(t, Options{})
	body := func(tag string, n int) []byte {
		var b strings.Builder
		b.WriteString(`{"model":"m","messages":[`)
		for i := range n {
			if i > 0 {
				b.WriteByte(',')
			}
			fmt.Fprintf(&b, `{"role":"user","content":"%s %d %s"}`, tag, i, strings.Repeat("z", 300)) // past minBlob
		}
		b.WriteString(`]}`)
		return []byte(b.String())
	}
	bodies := [][]byte{body("a", 5), body("b", 5), body("a", 6), body("b", 6), body("a", 6), body("c", 3)}
	for i, b := range bodies {
		if !w.Enqueue(Record{Kind: KindRequest, Call: fmt.Sprint("call-", i), Data: b}) {
			t.Fatal("refused")
		}
	}
	mustFlush(t, w)
	var got [][]byte
	for _, l := range scanAll(t, openReaderTest(t, dir)) {
		if l.Record.Kind == KindRequest {
			got = append(got, l.Record.Data)
		}
	}
	if len(got) != len(bodies) {
		t.Fatalf("read %d requests, want %d", len(got), len(bodies))
	}
	for i := range bodies {
		if !bytes.Equal(got[i], bodies[i]) {
			t.Fatalf("request %d reads back as %.80q", i, got[i])
		}
	}
}
