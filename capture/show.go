package capture

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/shaperproxy/shaperproxy/conv"
	"github.com/shaperproxy/shaperproxy/sse"
)

// ShowOptions configure ShowCmd.
type ShowOptions struct {
	CmdOptions
	Call string // the call id; "" shows the last call with a request
	Full bool   // print reasoning and content whole (text output)
}

// CallView is a call as ShowCmd presents it: the request summary and the
// response reassembled field by field.
type CallView struct {
	Call     string     `json:"call"`
	Parent   string     `json:"parent,omitempty"`
	Internal bool       `json:"internal,omitempty"`
	Request  *ReqView   `json:"request,omitempty"`
	Status   int        `json:"status,omitempty"`
	Response *RespView  `json:"response,omitempty"`
	End      *recordEnd `json:"end,omitempty"`
	Notes    []string   `json:"notes,omitempty"`
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

type recordEnd struct {
	Outcome string `json:"outcome"`
	Events  int    `json:"events"`
	Bytes   int64  `json:"bytes"`
	Err     string `json:"err,omitempty"`
}

// ErrCallNotFound is returned by ShowCmd for a call the log does not hold.
var ErrCallNotFound = errors.New("capture: call not found")

// ShowCmd prints one call: what was sent and what came back.
func ShowCmd(w io.Writer, o ShowOptions) error {
	r, err := OpenReader(o.Dir)
	if err != nil {
		return err
	}
	defer r.Close()
	call := o.Call
	if call == "" {
		last, err := r.Tail(1, Filter{Kinds: []Kind{KindRequest}})
		if err != nil {
			return err
		}
		if len(last) == 0 {
			return fmt.Errorf("%w: the log holds no request", ErrCallNotFound)
		}
		call = last[0].Record.Call
	}
	recs, err := r.CallRecords(call)
	if err != nil {
		return err
	}
	if len(recs) == 0 {
		return fmt.Errorf("%w: %q", ErrCallNotFound, call)
	}
	v := BuildCallView(call, recs)
	if o.JSON {
		return newPrinter(w, true).json(v)
	}
	return v.print(w, o.Full)
}

// BuildCallView assembles the view of a call from its records.
func BuildCallView(call string, recs []Located) *CallView {
	v := &CallView{Call: call}
	var events, clientEvents []Located
	var body []byte
	var start time.Time
	for _, l := range recs {
		r := &l.Record
		switch r.Kind {
		case KindRequest:
			v.Parent, v.Internal = r.Parent, r.Internal
			v.Request = requestView(l)
			start = r.Time
		case KindResponse:
			v.Status = r.Status
		case KindEvent:
			if r.Where == DefaultWhere {
				events = append(events, l)
			} else {
				clientEvents = append(clientEvents, l)
			}
		case KindBody:
			if r.Where == DefaultWhere || body == nil {
				body = r.Data
			}
		case KindEnd:
			v.End = &recordEnd{r.Outcome, r.Events, r.Bytes, r.Err}
		case KindNote:
			v.Notes = append(v.Notes, string(r.Data))
		}
	}
	switch {
	case len(events) > 0:
		v.Response = streamView(events, start)
	case len(clientEvents) > 0:
		v.Response = streamView(clientEvents, start)
		v.Response.FromClientWire = true
	case body != nil:
		a := conv.NewAssembler()
		rv := &RespView{}
		if a.AddBody(body) != nil {
			rv.BadChunks = 1
		}
		rv.fill(a.Response())
		v.Response = rv
	}
	return v
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
		rv.LastMessage = m.Role + ": " + clip([]byte(m.Content), 200)
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

func (v *CallView) print(w io.Writer, full bool) error {
	var b strings.Builder
	fmt.Fprintf(&b, "call %s", v.Call)
	if v.Internal {
		fmt.Fprintf(&b, " (internal, parent %s)", v.Parent)
	} else if v.Parent != "" {
		fmt.Fprintf(&b, " (parent %s)", v.Parent)
	}
	b.WriteString("\n")
	if q := v.Request; q != nil {
		q.print(&b)
	} else {
		b.WriteString("request: not in the log\n")
	}
	if v.Status != 0 {
		fmt.Fprintf(&b, "\nresponse status %d\n", v.Status)
	}
	if rv := v.Response; rv != nil {
		rv.print(&b, full)
	}
	for _, n := range v.Notes {
		fmt.Fprintf(&b, "note: %s\n", n)
	}
	if e := v.End; e != nil {
		fmt.Fprintf(&b, "\nend: %s, %d events, %d bytes", e.Outcome, e.Events, e.Bytes)
		if e.Err != "" {
			fmt.Fprintf(&b, ", error: %s", e.Err)
		}
		b.WriteString("\n")
	}
	_, err := io.WriteString(w, b.String())
	return err
}

func (q *ReqView) print(b *strings.Builder) {
	fmt.Fprintf(b, "\nrequest at %s (%s)\n", q.Time.Format("2006-01-02 15:04:05.000"), q.Pos)
	fmt.Fprintf(b, "  %s %s\n", q.Method, q.URL)
	fmt.Fprintf(b, "  route %s, model %s, stream %v, %d bytes\n", q.Route, q.Model, q.Stream, q.Bytes)
	if q.ReadError != "" {
		fmt.Fprintf(b, "  body not readable: %s\n", q.ReadError)
	}
	var roles []string
	for _, role := range []string{"system", "developer", "user", "assistant", "tool"} {
		if n := q.Roles[role]; n > 0 {
			roles = append(roles, fmt.Sprintf("%s %d", role, n))
		}
	}
	fmt.Fprintf(b, "  messages %d: %s\n", q.Messages, strings.Join(roles, ", "))
	fmt.Fprintf(b, "  reasoning blocks sent: shaped %d, raw %d (history messages with reasoning text: %d, signed: %d)\n",
		q.ReasoningShaped, q.ReasoningRaw, q.ReasoningBlocks, q.SignedBlocks)
	if q.LastMessage != "" {
		fmt.Fprintf(b, "  last message: %s\n", q.LastMessage)
	}
}

func (rv *RespView) print(b *strings.Builder, full bool) {
	src := "upstream events"
	if rv.FromClientWire {
		src = "client events (no upstream events captured)"
	}
	if rv.Events > 0 {
		fmt.Fprintf(b, "stream: %d chunks in %d %s, done %v\n", rv.Chunks, rv.Events, src, rv.Done)
		fmt.Fprintf(b, "  first chunk after %s, largest gap %s (before #%d), last after %s\n",
			fmtDur(rv.FirstChunk), fmtDur(rv.LargestGap), rv.LargestGapAt, fmtDur(rv.Total))
	}
	if rv.BadChunks > 0 {
		fmt.Fprintf(b, "  %d payloads were not JSON objects\n", rv.BadChunks)
	}
	for _, c := range rv.Choices {
		fmt.Fprintf(b, "\nchoice %d, finish_reason %q\n", c.Index, c.FinishReason)
		field := c.ReasoningField
		if field == "" {
			field = "reasoning"
		}
		fmt.Fprintf(b, "  %s (%d chars):\n%s", field, len(c.Reasoning), indent(c.Reasoning, full))
		fmt.Fprintf(b, "  content (%d chars):\n%s", len(c.Content), indent(c.Content, full))
		for _, tc := range c.ToolCalls {
			fmt.Fprintf(b, "  tool call [%d] %s %s(%s)\n", tc.Index, tc.ID, tc.Name, clip([]byte(tc.Arguments), 300))
		}
	}
	if rv.Usage != "" {
		fmt.Fprintf(b, "usage: %s\n", rv.Usage)
	}
	if rv.Error != "" {
		fmt.Fprintf(b, "error in stream: %s\n", rv.Error)
	}
}

// indent prints text under a field, cut to 2000 bytes unless full.
func indent(s string, full bool) string {
	if s == "" {
		return ""
	}
	more := ""
	if !full && len(s) > 2000 {
		cut := 2000
		for cut > 0 && s[cut]&0xC0 == 0x80 {
			cut--
		}
		more = fmt.Sprintf("\n    … %d more bytes (--full)", len(s)-cut)
		s = s[:cut]
	}
	return "    " + strings.ReplaceAll(s, "\n", "\n    ") + more + "\n"
}
