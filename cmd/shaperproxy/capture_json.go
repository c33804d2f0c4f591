package main

// The --json shapes of the capture commands (README, "JSON output"). Every
// key is always present; a value that does not apply is "", 0, false or
// null. usage, error (in a response) and notes hold JSON as the upstream
// or the hook wrote it.

import (
	"encoding/json"
	"time"
	"unicode/utf8"

	"github.com/shaperproxy/shaperproxy/capture"
	"github.com/shaperproxy/shaperproxy/conv"
)

// recordJSON is one record (capture tail, capture read). Data is a string
// holding the exact bytes when they are UTF-8, else base64 in data_base64.
type recordJSON struct {
	Pos             string          `json:"pos"`
	Next            string          `json:"next"` // the position after this record, for read --from
	Kind            string          `json:"kind"`
	Call            string          `json:"call"`
	Parent          string          `json:"parent"`
	Internal        bool            `json:"internal"`
	Seq             int             `json:"seq"`
	Time            jsonTime        `json:"time"`
	OffsetMS        float64         `json:"offset_ms"`
	Where           string          `json:"where"`
	Route           string          `json:"route"`
	Model           string          `json:"model"`
	Method          string          `json:"method"`
	URL             string          `json:"url"`
	Headers         []headerJSON    `json:"headers"`
	Status          int             `json:"status"`
	Stream          bool            `json:"stream"`
	Size            int             `json:"size"`
	Data            *string         `json:"data"`
	DataBase64      []byte          `json:"data_base64"`
	ReasoningShaped int             `json:"reasoning_shaped"`
	ReasoningRaw    int             `json:"reasoning_raw"`
	Outcome         string          `json:"outcome"`
	Bytes           int64           `json:"bytes"`
	Events          int             `json:"events"`
	Usage           json.RawMessage `json:"usage"`
	Error           string          `json:"error"`
	DroppedCount    int64           `json:"dropped_count"`
	ReadError       string          `json:"read_error"`
}

func toRecordJSON(l capture.Located) recordJSON {
	r := &l.Record
	next := l.Pos
	next.Index++
	j := recordJSON{
		Pos: l.Pos.String(), Next: next.String(), Kind: r.Kind.String(), Call: r.Call, Parent: r.Parent, Internal: r.Internal,
		Seq: r.Seq, Time: jsonTime(r.Time), OffsetMS: ms(r.Offset), Where: r.Where,
		Route: r.Route, Model: r.Model, Method: r.Method, URL: r.URL, Headers: headersJSON(r.Header), Status: r.Status,
		Stream: r.Stream, Size: l.Size, ReasoningShaped: r.ReasoningShaped, ReasoningRaw: r.ReasoningRaw,
		Outcome: r.Outcome, Bytes: r.Bytes, Events: r.Events, Usage: rawJSON(r.Usage), Error: r.Err, DroppedCount: r.DroppedCount,
	}
	switch {
	case !utf8.Valid(r.Data):
		j.DataBase64 = r.Data
	case len(r.Data) > 0:
		s := string(r.Data)
		j.Data = &s
	}
	if l.Err != nil {
		j.ReadError = l.Err.Error()
	}
	return j
}

// callJSON is one call (capture show).
type callJSON struct {
	Call         string            `json:"call"`
	Parent       string            `json:"parent"`
	Internal     bool              `json:"internal"`
	Kind         string            `json:"kind"`         // primary, review-child, …
	Purpose      string            `json:"purpose"`      // an internal call's purpose
	Conversation string            `json:"conversation"` // "" in older logs
	Status       int               `json:"status"`
	Request      *requestJSON      `json:"request"`
	Response     *responseJSON     `json:"response"`
	End          *endJSON          `json:"end"`
	Notes        []json.RawMessage `json:"notes"`
	Chunks       []chunkJSON       `json:"chunks"` // with --chunks; null without
	// Cost is the usage the upstream reported, normalised and priced
	// (null when it reported none).
	Cost *callCostJSON `json:"cost"`
}

type requestJSON struct {
	Pos             string         `json:"pos"`
	Time            jsonTime       `json:"time"`
	Route           string         `json:"route"`
	Model           string         `json:"model"`
	Method          string         `json:"method"`
	URL             string         `json:"url"`
	Stream          bool           `json:"stream"`
	Bytes           int            `json:"bytes"`
	Messages        int            `json:"messages"`
	Roles           map[string]int `json:"roles"` // messages per role`
	ReasoningBlocks int            `json:"reasoning_blocks"`
	SignedBlocks    int            `json:"signed_blocks"`
	ReasoningShaped int            `json:"reasoning_shaped"`
	ReasoningRaw    int            `json:"reasoning_raw"`
	LastMessage     string         `json:"last_message"`
	ReadError       string         `json:"read_error"`
}

type responseJSON struct {
	FromClientWire bool            `json:"from_client_wire"`
	Events         int             `json:"events"`
	Chunks         int             `json:"chunks"`
	Done           bool            `json:"done"`
	FirstChunkMS   float64         `json:"first_chunk_ms"`
	LargestGapMS   float64         `json:"largest_gap_ms"`
	LargestGapSeq  int             `json:"largest_gap_seq"`
	TotalMS        float64         `json:"total_ms"`
	BadChunks      int             `json:"bad_chunks"`
	Choices        []choiceJSON    `json:"choices"`
	Usage          json.RawMessage `json:"usage"`
	Error          json.RawMessage `json:"error"`
}

type choiceJSON struct {
	Index          int            `json:"index"`
	ReasoningField string         `json:"reasoning_field"`
	Reasoning      string         `json:"reasoning"`
	Content        string         `json:"content"`
	ToolCalls      []toolCallJSON `json:"tool_calls"`
	FinishReason   string         `json:"finish_reason"`
}

type toolCallJSON struct {
	Index     int    `json:"index"`
	ID        string `json:"id"`
	Type      string `json:"type"`
	Name      string `json:"name"`
	Arguments string `json:"arguments"`
}

type endJSON struct {
	Outcome string `json:"outcome"`
	Events  int    `json:"events"`
	Bytes   int64  `json:"bytes"`
	Error   string `json:"error"`
}

// chunkJSON is one stream event of capture show --chunks.
type chunkJSON struct {
	Seq      int               `json:"seq"`
	Pos      string            `json:"pos"`
	Time     jsonTime          `json:"time"`
	OffsetMS float64           `json:"offset_ms"`
	GapMS    float64           `json:"gap_ms"`
	Size     int               `json:"size"`
	Where    string            `json:"where"`
	Event    string            `json:"event"`
	Comment  bool              `json:"comment"`
	Done     bool              `json:"done"`
	Invalid  bool              `json:"invalid"`
	Choices  []chunkChoiceJSON `json:"choices"`
	Usage    json.RawMessage   `json:"usage"`
	Error    json.RawMessage   `json:"error"`
	Other    *string           `json:"other"`
}

type chunkChoiceJSON struct {
	Index          int            `json:"index"`
	Role           string         `json:"role"`
	ReasoningField string         `json:"reasoning_field"`
	Reasoning      string         `json:"reasoning"`
	Content        string         `json:"content"`
	ToolCalls      []toolCallJSON `json:"tool_calls"`
	FinishReason   string         `json:"finish_reason"`
}

func toCallJSON(v *capture.CallView, chunks []capture.Chunk, withChunks bool) callJSON {
	j := callJSON{Call: v.Call, Parent: v.Parent, Internal: v.Internal, Kind: v.Kind, Purpose: v.Purpose,
		Conversation: v.Conversation, Status: v.Status, Notes: []json.RawMessage{}}
	if q := v.Request; q != nil {
		j.Request = toRequestJSON(q)
	}
	if rv := v.Response; rv != nil {
		j.Response = toResponseJSON(rv)
	}
	if e := v.End; e != nil {
		j.End = &endJSON{e.Outcome, e.Events, e.Bytes, e.Err}
	}
	for _, n := range v.Notes {
		raw := rawJSON([]byte(n))
		if raw == nil {
			raw, _ = json.Marshal(n)
		}
		j.Notes = append(j.Notes, raw)
	}
	if withChunks {
		j.Chunks = make([]chunkJSON, 0, len(chunks))
		for _, c := range chunks {
			j.Chunks = append(j.Chunks, toChunkJSON(c))
		}
	}
	return j
}

func toRequestJSON(q *capture.ReqView) *requestJSON {
	j := &requestJSON{
		Pos: q.Pos, Time: jsonTime(q.Time), Route: q.Route, Model: q.Model, Method: q.Method, URL: q.URL,
		Stream: q.Stream, Bytes: q.Bytes, Messages: q.Messages, Roles: map[string]int{}, ReasoningBlocks: q.ReasoningBlocks,
		SignedBlocks: q.SignedBlocks, ReasoningShaped: q.ReasoningShaped, ReasoningRaw: q.ReasoningRaw,
		LastMessage: q.LastMessage, ReadError: q.ReadError,
	}
	for role, n := range q.Roles {
		j.Roles[role] = n
	}
	return j
}

func toResponseJSON(rv *capture.RespView) *responseJSON {
	j := &responseJSON{
		FromClientWire: rv.FromClientWire, Events: rv.Events, Chunks: rv.Chunks, Done: rv.Done,
		FirstChunkMS: ms(rv.FirstChunk), LargestGapMS: ms(rv.LargestGap), LargestGapSeq: rv.LargestGapAt,
		TotalMS: ms(rv.Total), BadChunks: rv.BadChunks, Choices: []choiceJSON{},
		Usage: rawJSON([]byte(rv.Usage)), Error: rawJSON([]byte(rv.Error)),
	}
	for _, c := range rv.Choices {
		j.Choices = append(j.Choices, choiceJSON{
			Index: c.Index, ReasoningField: c.ReasoningField, Reasoning: c.Reasoning, Content: c.Content,
			ToolCalls: toolCallsJSON(c.ToolCalls), FinishReason: c.FinishReason,
		})
	}
	return j
}

func toolCallsJSON(tcs []conv.ToolCall) []toolCallJSON {
	out := make([]toolCallJSON, 0, len(tcs))
	for _, tc := range tcs {
		out = append(out, toolCallJSON{tc.Index, tc.ID, tc.Type, tc.Name, tc.Arguments})
	}
	return out
}

func toChunkJSON(c capture.Chunk) chunkJSON {
	j := chunkJSON{
		Seq: c.Seq, Pos: c.Pos.String(), Time: jsonTime(c.Time), OffsetMS: ms(c.Offset), GapMS: ms(c.Gap),
		Size: c.Size, Where: c.Where, Event: c.Name, Comment: c.Comment, Done: c.Done, Invalid: c.Invalid,
		Choices: []chunkChoiceJSON{}, Usage: rawJSON(c.Usage), Error: rawJSON(c.Error),
	}
	if c.Other != nil {
		j.Other = strPtr(string(c.Other))
	}
	for _, d := range c.Choices {
		j.Choices = append(j.Choices, chunkChoiceJSON{
			Index: d.Index, Role: d.Role, ReasoningField: d.ReasoningField, Reasoning: d.Reasoning,
			Content: d.Content, ToolCalls: toolCallsJSON(d.ToolCalls), FinishReason: d.FinishReason,
		})
	}
	return j
}

// statsJSON is the statistics of the log (capture stats).
type statsJSON struct {
	Segments    int                      `json:"segments"`
	BytesOnDisk int64                    `json:"bytes_on_disk"`
	BytesWire   int64                    `json:"bytes_wire"`
	Records     int64                    `json:"records"`
	ByKind      map[string]int64         `json:"by_kind"`
	First       jsonTime                 `json:"first"`
	Last        jsonTime                 `json:"last"`
	Since       jsonTime                 `json:"since"`
	Reasoning   []capture.RouteReasoning `json:"reasoning"`
	Chunks      capture.ChunkStats       `json:"chunks_per_call"`
	Outcomes    map[string]int64         `json:"outcomes"`
	Dropped     int64                    `json:"dropped"`
	ReadErrors  int64                    `json:"read_errors"`
	Damaged     capture.Damage           `json:"damaged"`
	Markers     capture.MarkerCount      `json:"markers"`
	// Cost is the usage per route, model and kind of call, CostByKind per
	// kind, Conversations per conversation, route and model.
	Cost          []usageRowJSON     `json:"cost"`
	CostByKind    []kindRowJSON      `json:"cost_by_kind"`
	Conversations []conversationJSON `json:"conversations"`
}

func toStatsJSON(st *capture.Stats, ps *pricedStats) statsJSON {
	j := statsJSON{
		Segments: st.Segments, BytesOnDisk: st.BytesOnDisk, BytesWire: st.BytesWire, Records: st.Records,
		ByKind: st.ByKind, First: jsonTime(st.First), Last: jsonTime(st.Last), Since: jsonTime(st.Since),
		Reasoning: st.Reasoning, Chunks: st.Chunks, Outcomes: st.Outcomes, Dropped: st.Dropped, ReadErrors: st.ReadErrors,
		Damaged: st.Damaged, Markers: st.Markers, Cost: ps.rows, CostByKind: ps.kinds, Conversations: ps.convs,
	}
	if j.Reasoning == nil {
		j.Reasoning = []capture.RouteReasoning{}
	}
	return j
}

// findJSON is one call found (capture find).
type findJSON struct {
	Call       string    `json:"call"`
	Parent     string    `json:"parent"`
	Internal   bool      `json:"internal"`
	Pos        string    `json:"pos"`
	Time       jsonTime  `json:"time"`
	Route      string    `json:"route"`
	Model      string    `json:"model"`
	Method     string    `json:"method"`
	URL        string    `json:"url"`
	Status     int       `json:"status"`
	Outcome    string    `json:"outcome"`
	DurationMS *float64  `json:"duration_ms"` // null without an end
	Events     int       `json:"events"`
	Error      string    `json:"error"`
	Hits       []hitJSON `json:"hits"`
}

type hitJSON struct {
	In      string `json:"in"`
	Field   string `json:"field"`
	Snippet string `json:"snippet"`
	Fields  int    `json:"fields"`
}

func toFindJSON(m capture.Match) findJSON {
	j := findJSON{
		Call: m.Call, Parent: m.Parent, Internal: m.Internal, Pos: m.Pos.String(), Time: jsonTime(m.Time),
		Route: m.Route, Model: m.Model, Method: m.Method, URL: m.URL, Status: m.Status, Outcome: m.Outcome,
		Events: m.Events, Error: m.Err, Hits: []hitJSON{},
	}
	if m.Outcome != "" {
		d := ms(m.Duration)
		j.DurationMS = &d
	}
	for _, h := range m.Hits {
		j.Hits = append(j.Hits, hitJSON{h.In, h.Field, h.Snippet, h.Fields})
	}
	return j
}

// durationOrDash formats d for text output, "-" when unknown.
func durationOrDash(d time.Duration, known bool) string {
	if !known {
		return "-"
	}
	return fmtDur(d)
}
