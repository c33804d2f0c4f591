package capture

import (
	"bytes"
	"encoding/binary"
	"strconv"
	"testing"
	"time"

	"github.com/shaperproxy/shaperproxy/internal/accounting"
	"github.com/shaperproxy/shaperproxy/proxy"
	"github.com/shaperproxy/shaperproxy/sse"
)

// TestRecordFormatCompatible: a record without a purpose or conversation
// encodes to exactly the bytes of the format before they existed (so old
// segments read as records without them), and the new fields are tagged
// fields that round-trip.
func TestRecordFormatCompatible(t *testing.T) {
	old := Record{Kind: KindEnd, Call: "c", Internal: true, Outcome: "complete"}
	want := append([]byte{byte(KindEnd), flagInternal, 1<<3 | 2, 1, 'c', 0x82, 0x01, 8}, "complete"...)
	if got := appendRecordBody(nil, &old); !bytes.Equal(got, want) {
		t.Fatalf("encoding without purpose:\n got %x\nwant %x", got, want)
	}
	d, err := decodeRecord(want)
	if err != nil || d.Purpose != "" || d.Conversation != "" || d.Outcome != "complete" || !d.Internal {
		t.Fatalf("old record decoded as %+v, %v", d.Record, err)
	}
	if k := accounting.Kind(d.Internal, d.Purpose); k != accounting.KindInternal {
		t.Errorf("an old internal call's kind is %q", k)
	}
	nu := old
	nu.Purpose, nu.Conversation = "review-child", "conv-1"
	d, err = decodeRecord(appendRecordBody(nil, &nu))
	if err != nil || d.Purpose != "review-child" || d.Conversation != "conv-1" {
		t.Fatalf("new record decoded as %+v, %v", d.Record, err)
	}
	// An unknown tag (a later field) is skipped.
	later := append(binary.AppendUvarint(appendRecordBody(nil, &nu), 40<<3|wtBytes), 1, 'x')
	if d, err = decodeRecord(later); err != nil || d.Purpose != "review-child" {
		t.Fatalf("record with a later field: %+v, %v", d.Record, err)
	}
}

// TestObserverRecordsUsage runs calls through the capture observer: the
// request and end records carry the purpose and the conversation, and the
// end record the usage the proxy found in the response (proxy.End.Usage;
// proxy's TestEndCarriesUsage finds it in real streams and bodies).
func TestObserverRecordsUsage(t *testing.T) {
	w, dir := openTest(t, Options{})
	o := NewObserver(w, false)
	primary := &proxy.Call{ID: "p1", Route: "r", Model: "m", Conversation: "k1", Chat: true, Start: time.Now()}
	sink := o.Request(primary, &proxy.Upstream{Method: "POST", URL: "http://up/chat/completions", Body: []byte(`{"messages":[]}`)})
	sink.Response(&proxy.ResponseInfo{Status: 200, Stream: true})
	for i, data := range []string{
		`{"choices":[{"index":0,"delta":{"content":"hi"}}],"usage":null}`,
		`{"choices":[],"usage":{"prompt_tokens":100,"completion_tokens":7,"prompt_tokens_details":{"cached_tokens":64}}}`,
	} {
		sink.Event(&sse.Event{Raw: []byte("data: " + data + "\n\n"), Data: []byte(data), HasData: true}, i, 0)
	}
	sink.End(proxy.End{Outcome: proxy.OutcomeComplete, Status: 200, Usage: []byte(`{"prompt_tokens":100,"completion_tokens":7,"prompt_tokens_details":{"cached_tokens":64}}`)})

	child := &proxy.Call{ID: "c1", Route: "r", Model: "m", Conversation: "k1", Internal: true, Parent: "p1", Purpose: "review-child", Chat: true, Start: time.Now()}
	sink = o.Request(child, &proxy.Upstream{Method: "POST", URL: "http://up/chat/completions", Body: []byte(`{"messages":[]}`)})
	sink.Response(&proxy.ResponseInfo{Status: 200})
	body := []byte(`{"choices":[{"message":{"content":"{}"}}],"usage":{"prompt_tokens":90,"prompt_cache_hit_tokens":80,"prompt_cache_miss_tokens":10,"completion_tokens":3}}`)
	for len(body) > 0 {
		k := min(16, len(body))
		sink.Body(body[:k])
		body = body[k:]
	}
	sink.End(proxy.End{Outcome: proxy.OutcomeComplete, Status: 200, Usage: []byte(`{"prompt_tokens":90,"prompt_cache_hit_tokens":80,"prompt_cache_miss_tokens":10,"completion_tokens":3}`)})
	mustFlush(t, w)

	got := map[string]Record{}
	for _, l := range scanAll(t, openReaderTest(t, dir)) {
		if l.Record.Kind == KindRequest || l.Record.Kind == KindEnd {
			got[l.Record.Call+"/"+l.Record.Kind.String()] = l.Record
		}
	}
	for key, want := range map[string]struct{ purpose, usage string }{
		"p1/request": {"", ""},
		"p1/end":     {"", `{"prompt_tokens":100,"completion_tokens":7,"prompt_tokens_details":{"cached_tokens":64}}`},
		"c1/request": {"review-child", ""},
		"c1/end":     {"review-child", `{"prompt_tokens":90,"prompt_cache_hit_tokens":80,"prompt_cache_miss_tokens":10,"completion_tokens":3}`},
	} {
		r, ok := got[key]
		if !ok || r.Purpose != want.purpose || r.Conversation != "k1" || string(r.Usage) != want.usage {
			t.Errorf("%s: purpose %q conversation %q usage %s (present %v); want %q, k1, %s", key, r.Purpose, r.Conversation, r.Usage, ok, want.purpose, want.usage)
		}
	}
}

// TestStatsUsage sums the usage of end records per route, model and kind,
// per conversation and per kind, and counts the markers of distinct
// reasoning blocks once however often requests re-send them.
func TestStatsUsage(t *testing.T) {
	w, dir := openTest(t, Options{})
	marked := `{"model":"m","messages":[{"role":"user","content":"go"},` +
		`{"role":"assistant","content":"a","reasoning_content":"[reasoning extract: 242 chars omitted] So the fix is X. [Reasoning extract: 9 chars omitted]"},` +
		`{"role":"user","content":"[reasoning extract: 1 chars omitted] in content does not count"}]}`
	at := t0
	call := func(id, kind string, internal bool, conv, model, req, u string) {
		at = at.Add(time.Second)
		purpose := ""
		if internal {
			purpose = kind
		}
		for _, r := range []Record{
			{Kind: KindRequest, Call: id, Internal: internal, Purpose: purpose, Conversation: conv, Route: "r", Model: model, Time: at, Data: []byte(req)},
			{Kind: KindEnd, Call: id, Internal: internal, Purpose: purpose, Conversation: conv, Route: "r", Model: model, Time: at, Outcome: "complete", Usage: []byte(u)},
		} {
			if !w.Enqueue(r) {
				t.Fatal("Enqueue refused")
			}
		}
	}
	ds := func(hit, miss, out int) string {
		return `{"prompt_tokens":` + itoa(hit+miss) + `,"prompt_cache_hit_tokens":` + itoa(hit) + `,"prompt_cache_miss_tokens":` + itoa(miss) + `,"completion_tokens":` + itoa(out) + `}`
	}
	call("a1", "primary", false, "k1", "m", marked, ds(0, 100, 10))
	call("a2", "primary", false, "k1", "m", marked, ds(90, 20, 5))
	call("a3", "review-child", true, "k1", "m", marked, ds(100, 5, 2))
	call("b1", "primary", false, "k2", "m2", `{"model":"m2","messages":[]}`, ``) // no usage reported
	mustFlush(t, w)

	st, err := ComputeStats(openReaderTest(t, dir), time.Time{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	byKind := st.UsageByKind()
	if len(byKind) != 2 || byKind[0].Kind != "primary" || byKind[1].Kind != "review-child" {
		t.Fatalf("by kind: %+v", byKind)
	}
	p, c := byKind[0], byKind[1]
	if p.Calls != 3 || p.Reported != 2 || p.Hit != 90 || p.Miss != 120 || p.Prompt != 210 || p.Output != 15 {
		t.Errorf("primary: %+v", p)
	}
	if c.Calls != 1 || c.Reported != 1 || c.Hit != 100 || c.Miss != 5 || c.Output != 2 {
		t.Errorf("review-child: %+v", c)
	}
	if len(st.Usage) != 3 || st.Usage[0].Model != "m" || st.Usage[0].Kind != "primary" || st.Usage[2].Model != "m2" {
		t.Errorf("rows: %+v", st.Usage)
	}
	if len(st.Conversations) != 2 || st.Conversations[0].Conversation != "k1" || st.Conversations[0].Calls != 3 ||
		st.Conversations[0].Internal != 1 || st.Conversations[0].Prompt != 315 || st.Conversations[1].Reported != 0 {
		t.Errorf("conversations: %+v", st.Conversations)
	}
	if st.Markers.Blocks != 1 || st.Markers.Found != 2 {
		t.Errorf("markers: %+v, want 1 block with 2 markers", st.Markers)
	}
	if len(st.Reasoning) != 2 || st.Reasoning[0].Markers != 2 {
		t.Errorf("markers per route: %+v", st.Reasoning)
	}
}

func itoa(n int) string { return strconv.Itoa(n) }
