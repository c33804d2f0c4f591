package capture

import (
	"fmt"
	"math/bits"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"
)

// findLog writes a small log of calls that differ in route, model,
// outcome, where a text is and how the response came.
func findLog(t *testing.T) *Reader {
	t.Helper()
	w, dir := openTest(t, Options{})
	req := func(call, route, model, body string) Record {
		return Record{Kind: KindRequest, Call: call, Route: route, Model: model, Method: "POST", URL: "http://u/v1/chat/completions", Data: []byte(body)}
	}
	ev := func(call string, seq int, data string) Record {
		return Record{Kind: KindEvent, Call: call, Seq: seq, Offset: time.Duration(seq+1) * 10 * time.Millisecond, Data: []byte(data)}
	}
	end := func(call, outcome string) Record {
		return Record{Kind: KindEnd, Call: call, Status: 200, Outcome: outcome, Offset: time.Second, Events: 2}
	}
	recs := []Record{
		req("c1", "ds", "deepseek-reasoner", `{"model":"deepseek-reasoner","messages":[{"role":"system","content":"sys"},{"role":"user","content":"please fix the parser"}]}`),
		{Kind: KindResponse, Call: "c1", Status: 200, Stream: true},
		ev("c1", 0, "data: {\"choices\":[{\"index\":0,\"delta\":{\"reasoning_content\":\"so the f\"}}]}\n\n"),
		ev("c1", 1, "data: {\"choices\":[{\"index\":0,\"delta\":{\"reasoning_content\":\"ix is here\"}}]}\n\n"),
		ev("c1", 2, "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"done\"},\"finish_reason\":\"stop\"}]}\n\n"),
		end("c1", "complete"),
		req("c2", "or", "deepseek/deepseek-r1", `{"messages":[{"role":"user","content":"he said \"quoted\" \u00e9"}]}`),
		ev("c2", 0, "data: {\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":0,\"id\":\"t1\",\"function\":{\"name\":\"read_file\",\"arguments\":\"{\\\"pa\"}}]}}]}\n\n"),
		ev("c2", 1, "data: {\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":0,\"function\":{\"arguments\":\"th\\\":\\\"x.go\\\"}\"}}]}}]}\n\n"),
		end("c2", "upstream_error"),
		{Kind: KindRequest, Call: "c3", Parent: "c1", Internal: true, Route: "ds", Model: "deepseek-reasoner", Data: []byte(`{"messages":[{"role":"user","content":"review"}]}`)},
		{Kind: KindBody, Call: "c3", Data: []byte(`{"choices":[{"index":0,"message":{"role":"assistant","content":"over Budget"}`)},
		{Kind: KindBody, Call: "c3", Seq: 1, Data: []byte(`,"finish_reason":"stop"}]}`)},
		end("c3", "complete"),
		req("c4", "ds", "deepseek-chat", `{"messages":[{"role":"user","content":"never ends"}]}`),
		ev("c4", 0, "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"partial\"}}]}\n\n"),
		req("c5", "ds", "deepseek-chat", `{"messages":[{"role":"user","content":"retry me"}]}`),
		end("c5", "retried"),
		req("c5", "ds", "deepseek-chat", `{"messages":[{"role":"user","content":"retry me unshaped"}]}`),
		end("c5", "complete"),
		req("c6", "anthropic", "claude", `{"model":"claude","messages":[{"role":"user","content":"hello"}]}`),
		ev("c6", 0, "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"delta\":{\"text\":\"anthropic words\"}}\n\n"),
		end("c6", "complete"),
	}
	for _, r := range recs {
		w.Enqueue(r)
	}
	mustFlush(t, w)
	return openReaderTest(t, dir)
}

func TestFindFilters(t *testing.T) {
	r := findLog(t)
	tests := []struct {
		name  string
		q     Query
		calls []string
		field string // of the first hit of the first match
	}{
		{"all", Query{}, []string{"c1", "c2", "c3", "c4", "c5", "c6"}, ""},
		{"text split across chunks", Query{Text: "the fix"}, []string{"c1"}, "choices[0].reasoning_content"},
		{"text in request", Query{Text: "please fix", In: InRequest}, []string{"c1"}, "messages[1].content"},
		{"request text not in response", Query{Text: "please fix", In: InResponse}, nil, ""},
		{"response text not in request", Query{Text: "is here", In: InRequest}, nil, ""},
		{"decoded quotes and accents", Query{Text: `"quoted" é`}, []string{"c2"}, "messages[0].content"},
		{"tool call arguments joined", Query{Text: `{"path":"x.go"}`}, []string{"c2"}, "choices[0].tool_calls[0].arguments"},
		{"non-stream body", Query{Text: "over Budget"}, []string{"c3"}, "choices[0].content"},
		{"case", Query{Text: "BUDGET"}, nil, ""},
		{"fold", Query{Text: "BUDGET", Fold: true}, []string{"c3"}, "choices[0].content"},
		{"other protocol's event", Query{Text: "anthropic words"}, []string{"c6"}, "events[0]"},
		{"retried call's second request", Query{Text: "unshaped"}, []string{"c5"}, "messages[0].content"},
		{"model substring", Query{Model: "R1"}, []string{"c2"}, ""},
		{"route", Query{Route: "ds"}, []string{"c1", "c3", "c4", "c5"}, ""},
		{"outcome", Query{Outcome: "upstream_error"}, []string{"c2"}, ""},
		{"no end", Query{Outcome: OutcomeNone}, []string{"c4"}, ""},
		{"retried attempt is not the end", Query{Outcome: "complete", Route: "ds"}, []string{"c1", "c3", "c5"}, ""},
		{"limit", Query{Limit: 2}, []string{"c1", "c2"}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res, err := Find(r, tt.q)
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, m := range res.Matches {
				got = append(got, m.Call)
			}
			if !slices.Equal(got, tt.calls) {
				t.Fatalf("calls = %v, want %v", got, tt.calls)
			}
			if tt.field != "" {
				h := res.Matches[0].Hits
				if len(h) == 0 || h[0].Field != tt.field {
					t.Errorf("hits = %+v, want field %s", h, tt.field)
				}
			}
			if res.Truncated != (tt.q.Limit > 0) {
				t.Errorf("truncated = %v", res.Truncated)
			}
		})
	}
	res, _ := Find(r, Query{Text: "the fix"})
	m := res.Matches[0]
	if m.Outcome != "complete" || m.Duration != time.Second || m.Status != 200 || m.Route != "ds" || m.Pos.String() == "" {
		t.Errorf("match = %+v", m)
	}
	if h := m.Hits[0]; h.In != "response" || !strings.Contains(h.Snippet, "so the fix is here") || h.Fields != 1 {
		t.Errorf("hit = %+v", h)
	}
	res, _ = Find(r, Query{Outcome: OutcomeNone})
	if m := res.Matches[0]; m.Outcome != "" || m.Duration != 0 {
		t.Errorf("open call: %+v", m)
	}
}

// windowLog writes calls a minute apart over many small segments: call i
// has its request at base+i minutes, two events and an end.
func windowLog(t *testing.T, calls int) (*Writer, string, time.Time) {
	t.Helper()
	w, dir := openTest(t, Options{FrameBytes: 2 << 10, SegmentBytes: 4 << 10, QueueSize: 1 << 16, QueueBytes: 256 << 20})
	base := time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)
	rng := rand.New(rand.NewPCG(3, 4))
	for i := range calls {
		at := base.Add(time.Duration(i) * time.Minute)
		call := fmt.Sprintf("call-%03d", i)
		body := fmt.Sprintf(`{"messages":[{"role":"user","content":%q}]}`, text(rng, 600))
		w.Enqueue(Record{Kind: KindRequest, Call: call, Time: at, Route: "r", Data: []byte(body)})
		for k := range 2 {
			w.Enqueue(Record{Kind: KindEvent, Call: call, Seq: k, Time: at.Add(time.Duration(k+1) * time.Millisecond), Data: sseEvent(rng, call)})
		}
		w.Enqueue(Record{Kind: KindEnd, Call: call, Time: at.Add(5 * time.Millisecond), Outcome: "complete"})
	}
	mustFlush(t, w)
	return w, dir, base
}

func TestFindTimeWindowReadsOnlyTheWindow(t *testing.T) {
	const calls = 300
	_, dir, base := windowLog(t, calls)
	ids := func(res *FindResult) []string {
		var out []string
		for _, m := range res.Matches {
			out = append(out, m.Call)
		}
		return out
	}
	want := func(from, to int) []string {
		var out []string
		for i := from; i < to; i++ {
			out = append(out, fmt.Sprintf("call-%03d", i))
		}
		return out
	}
	minute := func(i int) time.Time { return base.Add(time.Duration(i) * time.Minute) }

	r := openReaderTest(t, dir)
	res, err := Find(r, Query{Since: minute(290)})
	if err != nil {
		t.Fatal(err)
	}
	if got := ids(res); !slices.Equal(got, want(290, calls)) {
		t.Fatalf("since: %v", got)
	}
	segs := len(r.segs)
	opened := 0
	for _, s := range r.segs {
		if s.ra != nil {
			opened++
		}
	}
	if segs < 30 || opened > bits.Len(uint(segs))+3 {
		t.Errorf("since: opened %d of %d segments", opened, segs)
	}
	if n := r.cache.lru.Len(); n > 15 {
		t.Errorf("since: decompressed %d frames for 10 calls", n)
	}

	r = openReaderTest(t, dir)
	res, err = Find(r, Query{Until: minute(10)})
	if err != nil {
		t.Fatal(err)
	}
	if got := ids(res); !slices.Equal(got, want(0, 10)) {
		t.Fatalf("until: %v", got)
	}
	if last := r.segs[len(r.segs)-1]; last.ra != nil {
		t.Errorf("until: the newest segment was opened")
	}

	r = openReaderTest(t, dir)
	var done, total int64
	res, err = Find(r, Query{Since: minute(100), Until: minute(103), Progress: func(d, t int64) { done, total = d, t }})
	if err != nil {
		t.Fatal(err)
	}
	if got := ids(res); !slices.Equal(got, want(100, 103)) {
		t.Fatalf("window: %v", got)
	}
	if done <= 0 || total <= 0 || done > total || done > total/2 {
		t.Errorf("window: progress %d of %d bytes (the window is a hundredth of the log)", done, total)
	}

	for _, tt := range []struct {
		since time.Time
		n     int
	}{{base.Add(-time.Hour), calls}, {minute(calls + 1), 0}} {
		res, err := Find(openReaderTest(t, dir), Query{Since: tt.since})
		if err != nil || len(res.Matches) != tt.n {
			t.Errorf("since %v: %d matches (%v), want %d", tt.since, len(res.Matches), err, tt.n)
		}
	}
}

// TestFindUntilFollowsOpenCalls: a call begun before Until is followed to
// its end, later calls are left out.
func TestFindUntilFollowsOpenCalls(t *testing.T) {
	w, dir := openTest(t, Options{})
	base := time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)
	w.Enqueue(Record{Kind: KindRequest, Call: "long", Time: base})
	w.Enqueue(Record{Kind: KindRequest, Call: "later", Time: base.Add(2 * time.Minute)})
	w.Enqueue(Record{Kind: KindEnd, Call: "later", Time: base.Add(3 * time.Minute), Outcome: "complete"})
	w.Enqueue(Record{Kind: KindEnd, Call: "long", Time: base.Add(20 * time.Minute), Outcome: "timeout", Offset: 20 * time.Minute})
	mustFlush(t, w)
	res, err := Find(openReaderTest(t, dir), Query{Until: base.Add(time.Minute)})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Matches) != 1 || res.Matches[0].Call != "long" || res.Matches[0].Outcome != "timeout" {
		t.Fatalf("matches = %+v", res.Matches)
	}
}

func TestParseEvent(t *testing.T) {
	tests := []struct {
		raw  string
		want string
	}{
		{"data: {\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"reasoning_content\":\"think\"}}]}\n\n", "0 role=assistant reasoning_content=think"},
		{"data: {\"choices\":[{\"index\":1,\"delta\":{\"reasoning\":\"r\",\"content\":\"c\"}}]}\n\n", "1 reasoning=r content=c"},
		{"data: {\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":2,\"id\":\"t\",\"type\":\"function\",\"function\":{\"name\":\"f\",\"arguments\":\"{\\\"a\"}}]}}]}\n\n", "0 tool[2 t function f {\"a]"},
		{"data: {\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}],\"usage\":{\"total_tokens\":3}}\n\n", "0 finish=stop usage={\"total_tokens\":3}"},
		{"data: {\"choices\":[],\"error\":{\"message\":\"boom\"}}\n\n", "error={\"message\":\"boom\"}"},
		{": keep-alive\n\n", "comment other=: keep-alive"},
		{"data: [DONE]\n\n", "done"},
		{"data: not json\n\n", "invalid other=not json"},
		{"event: ping\ndata: {\"type\":\"ping\"}\n\n", "name=ping other={\"type\":\"ping\"}"},
	}
	for _, tt := range tests {
		if got := describeDelta(ParseEvent([]byte(tt.raw))); got != tt.want {
			t.Errorf("%q:\n got %s\nwant %s", tt.raw, got, tt.want)
		}
	}
}

// describeDelta is a compact form of d for comparisons.
func describeDelta(d EventDelta) string {
	var p []string
	if d.Name != "" {
		p = append(p, "name="+d.Name)
	}
	for _, b := range []struct {
		on   bool
		name string
	}{{d.Comment, "comment"}, {d.Done, "done"}, {d.Invalid, "invalid"}} {
		if b.on {
			p = append(p, b.name)
		}
	}
	for _, c := range d.Choices {
		p = append(p, fmt.Sprint(c.Index))
		for _, kv := range [][2]string{{"role", c.Role}, {c.ReasoningField, c.Reasoning}, {"content", c.Content}, {"finish", c.FinishReason}} {
			if kv[1] != "" {
				p = append(p, kv[0]+"="+kv[1])
			}
		}
		for _, tc := range c.ToolCalls {
			p = append(p, fmt.Sprintf("tool[%d %s %s %s %s]", tc.Index, tc.ID, tc.Type, tc.Name, tc.Arguments))
		}
	}
	for _, kv := range [][2]string{{"usage", string(d.Usage)}, {"error", string(d.Error)}, {"other", string(d.Other)}} {
		if kv[1] != "" {
			p = append(p, kv[0]+"="+kv[1])
		}
	}
	return strings.Join(p, " ")
}

func TestChunks(t *testing.T) {
	start := time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)
	recs := []Located{
		{Record: Record{Kind: KindRequest, Call: "c", Time: start}},
		{Record: Record{Kind: KindEvent, Call: "c", Seq: 0, Where: "client", Offset: 5 * time.Millisecond, Data: []byte("data: {\"choices\":[]}\n\n")}},
		{Record: Record{Kind: KindEvent, Call: "c", Seq: 0, Where: DefaultWhere, Offset: 800 * time.Millisecond, Data: []byte("data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"a\"}}]}\n\n")}, Size: 55},
		{Record: Record{Kind: KindEvent, Call: "c", Seq: 1, Where: DefaultWhere, Time: start.Add(2 * time.Second), Data: []byte("data: [DONE]\n\n")}},
		{Record: Record{Kind: KindEnd, Call: "c"}},
	}
	got := Chunks(recs)
	if len(got) != 2 {
		t.Fatalf("got %d chunks, want the 2 upstream events", len(got))
	}
	if got[0].Offset != 800*time.Millisecond || got[0].Gap != 800*time.Millisecond || got[0].Choices[0].Content != "a" || got[0].Size != 55 {
		t.Errorf("chunk 0: %+v", got[0])
	}
	// No monotonic offset recorded: the wall clock since the request.
	if got[1].Offset != 2*time.Second || got[1].Gap != 1200*time.Millisecond || !got[1].Done {
		t.Errorf("chunk 1: %+v", got[1])
	}
	if only := Chunks(recs[:2]); len(only) != 1 || only[0].Where != "client" {
		t.Errorf("without upstream events: %+v", only)
	}
}
