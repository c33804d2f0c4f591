package capture

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"net/http"
	"reflect"
	"testing"
	"time"
)

func allKinds() []Record {
	return []Record{
		{Kind: KindClientRequest, Call: "c1", Where: "client-wire", Route: "deepseek", Model: "deepseek-reasoner",
			Method: "POST", URL: "/v1/chat/completions", Header: http.Header{"Content-Type": {"application/json"}},
			Stream: true, Data: []byte(`{"model":"deepseek-reasoner","messages":[{"role":"user","content":"hi"}],"stream":true}`)},
		{Kind: KindRequest, Call: "c1", Route: "deepseek", Model: "deepseek-reasoner", Method: "POST",
			URL: "https://api.deepseek.com/v1/chat/completions", Header: http.Header{"Content-Type": {"application/json"}},
			Stream: true, ReasoningShaped: 179, ReasoningRaw: 12,
			Data: []byte(`{"model":"deepseek-reasoner", "messages": [ {"role":"user","content":"hi"} ,` + "\n" + `{"role":"assistant","content":"yo"}],"stream":true}`)},
		{Kind: KindResponse, Call: "c1", Status: 200, Header: http.Header{"Content-Type": {"text/event-stream"}}, Offset: 120 * time.Millisecond},
		{Kind: KindEvent, Call: "c1", Seq: 0, Offset: 130 * time.Millisecond, Data: []byte(": keep-alive\n\n")},
		{Kind: KindEvent, Call: "c1", Seq: 1, Offset: 140 * time.Millisecond, Data: []byte("data: {\"choices\":[]}\n\n")},
		{Kind: KindEvent, Call: "c1", Seq: 2, Where: "client-wire", Data: []byte("data: [DONE]\n\n")},
		{Kind: KindEnd, Call: "c1", Outcome: "complete", Bytes: 12345, Events: 3, Usage: []byte(`{"total_tokens":9}`), Offset: time.Second},
		{Kind: KindRequest, Call: "r1", Parent: "c1", Internal: true, Route: "review", Model: "m", Data: []byte("not json at all")},
		{Kind: KindBody, Call: "r1", Data: []byte(`{"choices":[{"message":{"content":"ok"}}]}`)},
		{Kind: KindEnd, Call: "r1", Outcome: "upstream_error", Err: "status 400: missing reasoning_content"},
		{Kind: KindNote, Call: "c1", Data: []byte(`{"guard":"loop","n":3}`)},
	}
}

// normalize returns r as a reader returns it.
func normalize(r Record) Record {
	if r.Where == "" {
		r.Where = DefaultWhere
	}
	return r
}

func TestRoundTripEveryKind(t *testing.T) {
	w, dir := openTest(t, Options{})
	want := allKinds()
	for i := range want {
		want[i].Time = t0.Add(time.Duration(i) * time.Millisecond)
		if !w.Enqueue(want[i]) {
			t.Fatalf("Enqueue %d refused", i)
		}
	}
	mustFlush(t, w)
	got := scanAll(t, openReaderTest(t, dir))
	if len(got) != len(want) {
		t.Fatalf("got %d records, want %d", len(got), len(want))
	}
	for i, l := range got {
		if l.Err != nil {
			t.Errorf("record %d: %v", i, l.Err)
		}
		g, wr := l.Record, normalize(want[i])
		if !g.Time.Equal(wr.Time) {
			t.Errorf("record %d time %v, want %v", i, g.Time, wr.Time)
		}
		g.Time, wr.Time = time.Time{}, time.Time{}
		if !reflect.DeepEqual(g, wr) {
			t.Errorf("record %d:\n got %+v\nwant %+v", i, g, wr)
		}
		if l.Size != len(wr.Data) {
			t.Errorf("record %d size %d, want %d", i, l.Size, len(wr.Data))
		}
	}
	if s := w.Stats(); s.Enqueued != int64(len(want)) || s.Written != int64(len(want)) || s.Dropped != 0 {
		t.Errorf("stats %+v", s)
	}
}

func TestRequestRebuiltByteForByte(t *testing.T) {
	bodies := []string{
		`{"messages":[]}`,
		`{"messages":[{"role":"user","content":"a"}]}`,
		" \n{ \"model\" : \"x\" ,\n  \"messages\" : [\n    {\"role\":\"user\",\"content\":\"a\"}\n  , {\"role\":\"user\",\"content\":\"a\"},{\"role\":\"user\",\"content\":\"a\"} ] , \"stream\":true }\n",
		`{"messages":["x", 1, null, [1,2], {"a":{"b":"}]"}}], "tail":"\u00e9\"\\"}`,
		`{"input":[{"type":"message","content":"q"}],"tools":[` + string(bytes.Repeat([]byte(`{"n":"tool"},`), 200)) + `{}]}`,
		`{"model":"m","messages":"not an array","messages2":[1]}`,
		`{"messages":[{"role":"user","content":"unterminated"`,
		`[{"role":"user"}]`,
		`{}`,
		``,
		"\x00\xff binary",
	}
	w, dir := openTest(t, Options{})
	for i, b := range bodies {
		w.Enqueue(Record{Kind: KindRequest, Call: fmt.Sprint(i), Data: []byte(b)})
	}
	mustFlush(t, w)
	got := scanAll(t, openReaderTest(t, dir))
	if len(got) != len(bodies) {
		t.Fatalf("got %d records, want %d", len(got), len(bodies))
	}
	for i, l := range got {
		if l.Err != nil || string(l.Record.Data) != bodies[i] {
			t.Errorf("body %d: got %q (err %v), want %q", i, l.Record.Data, l.Err, bodies[i])
		}
	}
}

func TestBlobsStoredOncePerSegment(t *testing.T) {
	w, dir := openTest(t, Options{})
	conv := newConversation(1)
	for i := range 20 {
		w.Enqueue(Record{Kind: KindRequest, Call: fmt.Sprint(i), Data: conv.next(i)})
	}
	mustFlush(t, w)
	raw := decompressedFiles(t, dir)
	// The system prompt is the first message of every request: one copy.
	sys := conv.messages[0]
	if n := bytes.Count(raw, []byte(sys)); n != 1 {
		t.Errorf("system message stored %d times, want 1", n)
	}
	if n := bytes.Count(raw, []byte(conv.tools)); n != 1 {
		t.Errorf("tools stored %d times, want 1", n)
	}
}

func TestTail(t *testing.T) {
	w, dir := openTest(t, Options{FrameBytes: 4 << 10, SegmentBytes: 32 << 10})
	rng := rand.New(rand.NewPCG(1, 2))
	const calls, events = 40, 50
	for c := range calls {
		call := fmt.Sprintf("call-%03d", c)
		w.Enqueue(Record{Kind: KindRequest, Call: call, Data: newConversation(uint64(c)).next(0)})
		for i := range events {
			w.Enqueue(Record{Kind: KindEvent, Call: call, Seq: i, Data: sseEvent(rng, call)})
		}
		w.Enqueue(Record{Kind: KindEnd, Call: call, Outcome: "complete", Events: events})
	}
	mustFlush(t, w)
	r := openReaderTest(t, dir)
	all := scanAll(t, r)
	if len(all) != calls*(events+2) {
		t.Fatalf("scan: %d records", len(all))
	}
	if st := w.Stats(); st.Segments < 3 {
		t.Fatalf("want several segments, got %d", st.Segments)
	}
	for _, n := range []int{1, 7, 100, 2000, len(all) + 5} {
		got, err := r.Tail(n, Filter{})
		if err != nil {
			t.Fatal(err)
		}
		want := all[max(0, len(all)-n):]
		if !samePositions(got, want) {
			t.Errorf("Tail(%d): got %d records, first %v; want %d, first %v", n, len(got), first(got), len(want), first(want))
		}
	}
	// Filtered: the last 3 requests, rebuilt.
	got, err := r.Tail(3, Filter{Kinds: []Kind{KindRequest}})
	if err != nil || len(got) != 3 {
		t.Fatalf("Tail requests: %d, %v", len(got), err)
	}
	for i, l := range got {
		c := calls - 3 + i
		if want := newConversation(uint64(c)).next(0); !bytes.Equal(l.Record.Data, want) || l.Record.Call != fmt.Sprintf("call-%03d", c) {
			t.Errorf("request %d: call %s, body equal %v, err %v", i, l.Record.Call, bytes.Equal(l.Record.Data, want), l.Err)
		}
	}
	// Filtered by call: every record of an old call.
	got, err = r.Tail(1000, Filter{Call: "call-005"})
	if err != nil || len(got) != events+2 {
		t.Fatalf("Tail call: %d, %v", len(got), err)
	}
	for i, l := range got[1 : events+1] {
		if l.Record.Seq != i {
			t.Fatalf("event %d has seq %d", i, l.Record.Seq)
		}
	}
}

func samePositions(a, b []Located) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i].Pos != b[i].Pos {
			return false
		}
	}
	return true
}

func first(l []Located) any {
	if len(l) == 0 {
		return nil
	}
	return l[0].Pos
}

func TestReadFromPaging(t *testing.T) {
	w, dir := openTest(t, Options{FrameBytes: 2 << 10, SegmentBytes: 16 << 10})
	rng := rand.New(rand.NewPCG(3, 4))
	for i := range 1000 {
		w.Enqueue(Record{Kind: KindEvent, Call: "c", Seq: i, Data: sseEvent(rng, "c")})
	}
	mustFlush(t, w)
	r := openReaderTest(t, dir)
	all := scanAll(t, r)
	var pages [][]Located
	pos := Pos{}
	for range 200 {
		var page []Located
		next, err := r.ReadFrom(pos, 37, func(l Located) error { page = append(page, l); return nil })
		if err != nil {
			t.Fatal(err)
		}
		if len(page) == 0 {
			if next != pos {
				t.Errorf("empty page moved %v -> %v", pos, next)
			}
			break
		}
		pages = append(pages, page)
		pos = next
	}
	var joined []Located
	for i, p := range pages {
		if len(p) != 37 && i != len(pages)-1 {
			t.Errorf("page %d has %d records", i, len(p))
		}
		joined = append(joined, p...)
	}
	if !samePositions(joined, all) {
		t.Fatalf("pages hold %d records, scan %d", len(joined), len(all))
	}
	for i, l := range joined {
		if l.Record.Seq != i {
			t.Fatalf("record %d has seq %d", i, l.Record.Seq)
		}
	}
	// A position printed and parsed again reads the same record.
	p, err := ParsePos(all[500].Pos.String())
	if err != nil || p != all[500].Pos {
		t.Fatalf("ParsePos(%q) = %v, %v", all[500].Pos, p, err)
	}
	var one []Located
	if _, err := r.ReadFrom(p, 1, func(l Located) error { one = append(one, l); return nil }); err != nil || len(one) != 1 || one[0].Record.Seq != 500 {
		t.Fatalf("ReadFrom(%v): %v %v", p, one, err)
	}
	// An offset inside a frame starts at the next frame.
	mid := Pos{Segment: all[500].Pos.Segment, Offset: all[500].Pos.Offset + 1}
	one = one[:0]
	if _, err := r.ReadFrom(mid, 1, func(l Located) error { one = append(one, l); return nil }); err != nil || len(one) != 1 || one[0].Pos.Offset <= mid.Offset {
		t.Fatalf("ReadFrom(%v): %v %v", mid, one, err)
	}
}

func TestParsePos(t *testing.T) {
	tests := []struct {
		in   string
		want Pos
		ok   bool
	}{
		{"3", Pos{Segment: 3}, true},
		{"3:1024", Pos{3, 1024, 0}, true},
		{"3:1024+7", Pos{3, 1024, 7}, true},
		{"x", Pos{}, false},
		{"3:-1", Pos{}, false},
		{"3:10+x", Pos{}, false},
	}
	for _, tt := range tests {
		got, err := ParsePos(tt.in)
		if (err == nil) != tt.ok || got != tt.want {
			t.Errorf("ParsePos(%q) = %v, %v", tt.in, got, err)
		}
		if tt.ok && got.String() != tt.in && tt.in != "3" {
			t.Errorf("String() = %q, want %q", got.String(), tt.in)
		}
	}
}
