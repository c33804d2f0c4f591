package capture

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/shaperproxy/shaperproxy/conv"
	"github.com/shaperproxy/shaperproxy/internal/accounting"
	"github.com/shaperproxy/shaperproxy/internal/runecut"
	"github.com/shaperproxy/shaperproxy/sse"
)

// CallView is a call as ShowCmd presents it: the request summary and the
// response reassembled field by field.
type CallView struct {
	Call     string `json:"call"`
	Parent   string `json:"parent,omitempty"`
	Internal bool   `json:"internal,omitempty"`
	Purpose  string `json:"purpose,omitempty"` // an internal call's purpose
	Kind     string `json:"kind"`              // accounting.Kind: "primary", "review-child", …
	// Conversation is the call's conversation key ("" in older logs).
	Conversation string    `json:"conversation,omitempty"`
	Request      *ReqView  `json:"request,omitempty"`
	Status       int       `json:"status,omitempty"`
	Response     *RespView `json:"response,omitempty"`
	End          *EndView  `json:"end,omitempty"`
	Notes        []string  `json:"notes,omitempty"`
	// Usage is the usage the upstream reported, normalised (nil when it
	// reported none): from the end record, else (older logs) from the
	// response rebuilt. UsageShape is the shape it came in.
	Usage      *accounting.Usage `json:"usage_tokens,omitempty"`
	UsageShape accounting.Shape  `json:"usage_shape,omitempty"`
}

// ReqView summarises the request as sent upstream.
type ReqView struct {
	Pos             string         `json:"pos"`
	Time            time.Time      `json:"time"`
	Route           string         `json:"route,omitempty"`
	Model           string         `json:"model,omitempty"`
	Method          string         `json:"method,omitempty"`
	URL             string         `json:"url,omitempty"`
	Stream          bool           `json:"stream"`
	Bytes           int            `json:"bytes"`
	Messages        int            `json:"messages"`
	Roles           map[string]int `json:"roles,omitempty"`
	ReasoningBlocks int            `json:"reasoning_blocks"` // history messages carrying reasoning text
	SignedBlocks    int            `json:"signed_blocks,omitempty"`
	ReasoningShaped int            `json:"reasoning_shaped"`
	ReasoningRaw    int            `json:"reasoning_raw"`
	LastMessage     string         `json:"last_message,omitempty"`
	ReadError       string         `json:"read_error,omitempty"`
}

// RespView is the response rebuilt from its upstream events or body.
type RespView struct {
	Choices        []ChoiceView  `json:"choices"`
	Usage          string        `json:"usage,omitempty"`
	Error          string        `json:"error,omitempty"`
	Chunks         int           `json:"chunks"`
	Events         int           `json:"events"`
	Done           bool          `json:"done"`
	FirstChunk     time.Duration `json:"first_chunk_ns"`
	LargestGap     time.Duration `json:"largest_gap_ns"`
	LargestGapAt   int           `json:"largest_gap_at"` // seq of the event after the gap
	Total          time.Duration `json:"total_ns"`
	BadChunks      int           `json:"bad_chunks,omitempty"`
	FromClientWire bool          `json:"from_client_wire,omitempty"`
}

// ChoiceView is one rebuilt choice.
type ChoiceView struct {
	Index          int             `json:"index"`
	ReasoningField string          `json:"reasoning_field,omitempty"`
	Reasoning      string          `json:"reasoning"`
	Content        string          `json:"content"`
	ToolCalls      []conv.ToolCall `json:"tool_calls,omitempty"`
	FinishReason   string          `json:"finish_reason"`
}

// EndView is how a call ended.
type EndView struct {
	Outcome string `json:"outcome"`
	Events  int    `json:"events"`
	Bytes   int64  `json:"bytes"`
	Err     string `json:"err,omitempty"`
}

// ErrCallNotFound is returned by ShowCmd for a call the log does not hold.
var ErrCallNotFound = errors.New("capture: call not found")

// Show returns the view of one call; "" is the last call with a request.
func Show(r *Reader, call string) (*CallView, error) {
	if call == "" {
		last, err := r.Tail(1, Filter{Kinds: []Kind{KindRequest}})
		if err != nil {
			return nil, err
		}
		if len(last) == 0 {
			return nil, fmt.Errorf("%w: the log holds no request", ErrCallNotFound)
		}
		call = last[0].Record.Call
	}
	recs, err := r.CallRecords(call)
	if err != nil {
		return nil, err
	}
	if len(recs) == 0 {
		return nil, fmt.Errorf("%w: %q", ErrCallNotFound, call)
	}
	return buildCallView(call, recs), nil
}

// buildCallView assembles the view of a call from its records.
func buildCallView(call string, recs []Located) *CallView {
	v := &CallView{Call: call}
	var p callParts
	for _, l := range recs {
		p.add(v, l)
	}
	switch {
	case len(p.events) > 0:
		v.Response = streamView(p.events, p.start)
	case len(p.clientEvents) > 0:
		v.Response = streamView(p.clientEvents, p.start)
		v.Response.FromClientWire = true
	case p.body != nil:
		v.Response = bodyView(p.body)
	case p.clientBody != nil:
		v.Response = bodyView(p.clientBody)
	}
	v.Kind = accounting.Kind(v.Internal, v.Purpose)
	v.setUsage(p.endUsage)
	return v
}

// callParts gathers the records of a call that make its response.
type callParts struct {
	events, clientEvents []Located
	body, clientBody     []byte // the body's pieces, joined
	endUsage             []byte
	start                time.Time
}

// add takes one record of the call.
func (p *callParts) add(v *CallView, l Located) {
	r := &l.Record
	upstream := r.Where == DefaultWhere || r.Where == whereDecoded
	switch r.Kind {
	case KindRequest:
		v.Parent, v.Internal, v.Purpose, v.Conversation = r.Parent, r.Internal, r.Purpose, r.Conversation
		v.Request = requestView(l)
		p.start, p.body = r.Time, nil // a retry's answer replaces the first attempt's
	case KindResponse:
		v.Status = r.Status
	case KindEvent:
		if r.Where == DefaultWhere {
			p.events = append(p.events, l)
		} else {
			p.clientEvents = append(p.clientEvents, l)
		}
	case KindBody:
		if upstream {
			p.body = append(p.body, r.Data...)
		} else {
			p.clientBody = append(p.clientBody, r.Data...)
		}
	case KindEnd:
		v.End = &EndView{r.Outcome, r.Events, r.Bytes, r.Err}
		p.endUsage = r.Usage
	case KindNote:
		v.Notes = append(v.Notes, string(r.Data))
	}
}

// bodyView rebuilds a non-stream response body.
func bodyView(body []byte) *RespView {
	a := conv.NewAssembler()
	rv := &RespView{}
	if a.AddBody(body) != nil {
		rv.BadChunks = 1
	}
	rv.fill(a.Response())
	return rv
}

// setUsage normalises the usage of the end record, or else the one the
// rebuilt response holds.
func (v *CallView) setUsage(raw []byte) {
	if raw == nil && v.Response != nil {
		raw = []byte(v.Response.Usage)
	}
	if u, shape, ok := accounting.Parse(raw); ok {
		v.Usage, v.UsageShape = &u, shape
	}
}

func requestView(l Located) *ReqView {
	r := &l.Record
	rv := &ReqView{
		Pos: l.Pos.String(), Time: r.Time, Route: r.Route, Model: r.Model, Method: r.Method, URL: r.URL,
		Stream: r.Stream, Bytes: l.Size, ReasoningShaped: r.ReasoningShaped, ReasoningRaw: r.ReasoningRaw,
	}
	if l.Err != nil {
		rv.ReadError = l.Err.Error()
		return rv
	}
	req, err := conv.ParseRequest(r.Data)
	if err != nil {
		rv.ReadError = err.Error()
		return rv
	}
	if rv.Model == "" {
		rv.Model = req.Model
	}
	rv.Messages = len(req.Messages)
	rv.Roles = map[string]int{}
	for _, m := range req.Messages {
		rv.Roles[m.Role]++
		if m.Signed {
			rv.SignedBlocks++
		} else if m.Reasoning != "" {
			rv.ReasoningBlocks++
		}
	}
	if n := len(req.Messages); n > 0 {
		m := req.Messages[n-1]
		rv.LastMessage = m.Role + ": " + preview(m.Content, 200)
	}
	return rv
}

// streamView feeds the events' data to conv's assembler and measures the
// timing: the offset of the first chunk and the largest gap between two.
func streamView(events []Located, start time.Time) *RespView {
	a := conv.NewAssembler()
	rv := &RespView{Events: len(events)}
	var prev time.Duration
	for i, l := range events {
		at := eventOffset(&l.Record, start)
		if i == 0 {
			rv.FirstChunk = at
		} else if gap := at - prev; gap > rv.LargestGap {
			rv.LargestGap, rv.LargestGapAt = gap, l.Record.Seq
		}
		prev, rv.Total = at, at
		ev, err := sse.NewReader(bytes.NewReader(l.Record.Data)).Next()
		if err != nil || !ev.HasData {
			continue
		}
		if a.AddChunk(ev.Data) != nil {
			rv.BadChunks++
		}
	}
	rv.fill(a.Response())
	return rv
}

// eventOffset is the time of an event since the request started: its
// monotonic Offset, or the wall clock difference when Offset is not set.
func eventOffset(r *Record, start time.Time) time.Duration {
	if r.Offset != 0 || start.IsZero() {
		return r.Offset
	}
	return r.Time.Sub(start)
}

func (rv *RespView) fill(resp conv.Response) {
	rv.Chunks, rv.Done = resp.Chunks, resp.Done
	rv.Usage, rv.Error = string(resp.Usage), string(resp.Error)
	for _, c := range resp.Choices {
		rv.Choices = append(rv.Choices, ChoiceView{
			Index: c.Index, ReasoningField: c.ReasoningField, Reasoning: c.Reasoning,
			Content: c.Content, ToolCalls: c.ToolCalls, FinishReason: c.FinishReason,
		})
	}
}

// preview is s on one line, cut to about n bytes at a rune boundary.
func preview(s string, n int) string {
	s = strings.NewReplacer("\r", `\r`, "\n", `\n`, "\t", `\t`).Replace(s)
	if len(s) <= n {
		return s
	}
	return runecut.Prefix(s, n) + "…"
}
