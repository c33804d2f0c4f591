package capture

// Searching the log for calls (Find) and reading a call's stream event by
// event (Chunks, ParseEvent): the data behind `shaperproxy capture find`
// and `capture show --chunks`.

import (
	"bytes"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/shaperproxy/shaperproxy/conv"
	"github.com/shaperproxy/shaperproxy/proxy"
	"github.com/shaperproxy/shaperproxy/sse"
	"github.com/tidwall/gjson"
)

// Side says where Query.Text is looked for.
type Side uint8

// The sides of a call.
const (
	InAny      Side = iota // the request or the response
	InRequest              // the request as sent upstream
	InResponse             // the response as received from upstream
)

// OutcomeNone, as Query.Outcome, selects the calls whose end the log does
// not hold (still running, cut by a crash, or ended after the search
// stopped reading).
const OutcomeNone = "none"

// FollowAfterUntil is how long past Query.Until Find keeps reading for the
// ends of the calls whose request came before Until (reasoning streams run
// for many minutes).
const FollowAfterUntil = time.Hour

// untilSlack absorbs the small disorder of record times in the log (a
// record's time is taken just before it is queued).
const untilSlack = 5 * time.Second

// Query selects the calls Find returns. The zero Query selects every call.
type Query struct {
	// Since and Until bound the time of a call's upstream request:
	// Since <= t < Until. A zero bound is open. With Since set, Find starts
	// reading at the first frame that may hold a later record, found by
	// walking back over frame trailers (no decompression); with Until set
	// it stops reading once the calls begun before Until have ended (or
	// FollowAfterUntil later).
	Since, Until time.Time
	// Text, when not empty, must occur in a call: in the text of its
	// request's messages (content, reasoning, tool call names and
	// arguments; the raw body when it has no messages) or in its response
	// rebuilt field by field (reasoning, content, tool calls, error; the
	// raw data of events that are not chat chunks).
	Text string
	// Fold matches Text regardless of case.
	Fold bool
	// In limits where Text is looked for.
	In Side
	// Model, when not empty, must occur in the request's model, regardless
	// of case ("r1" matches "deepseek/deepseek-r1").
	Model string
	// Route and Outcome, when not empty, must equal the call's route and
	// the outcome of its end (OutcomeNone: no end in the log).
	Route, Outcome string
	// Limit stops the search after this many matches, the first in log
	// order; 0: no limit.
	Limit int
	// Progress, when set, is told how many of the compressed bytes to read
	// were read so far.
	Progress func(done, total int64)
}

// Match is one call Find selected.
type Match struct {
	Call, Parent string
	Internal     bool
	// Pos and Time are those of the call's upstream request.
	Pos                       Pos
	Time                      time.Time
	Route, Model, Method, URL string
	// Status is the response status; 0 when none was recorded.
	Status int
	// Outcome, Duration (since the request started), Events and Err come
	// from the call's end; Outcome is "" when the log holds no end.
	Outcome  string
	Duration time.Duration
	Events   int
	Err      string
	// Hits holds, per side where Query.Text was found, the first place.
	Hits []Hit
}

// Hit is where Query.Text was first found on one side of a call.
type Hit struct {
	// In is "request" or "response".
	In string
	// Field names the place: "messages[3].content",
	// "choices[0].reasoning_content", "choices[0].tool_calls[1].arguments",
	// "error", "events[12]" (an event that is not a chat chunk), "body".
	Field string
	// Snippet is the text around the match, on one line.
	Snippet string
	// Fields counts the fields of that side holding the text.
	Fields int
}

// FindResult is what Find returns.
type FindResult struct {
	// Matches are in the log order of their requests.
	Matches []Match
	// Truncated is true when Limit stopped the search: later calls may
	// match too.
	Truncated bool
}

// errStopFind ends Find's read early.
var errStopFind = errors.New("capture: find: stop")

// Find returns the calls that match q, reading the log forward from the
// first frame that may hold a request at or after q.Since. Request bodies
// are rebuilt only when q.Text is looked for in requests.
func Find(r *Reader, q Query) (*FindResult, error) {
	if err := r.refresh(); err != nil {
		return nil, err
	}
	start := Pos{}
	if !q.Since.IsZero() {
		start = r.seek(q.Since)
	}
	f := newFinder(q)
	opts := readOpts{filter: Filter{Since: q.Since}, resolve: f.text != nil && q.In != InResponse}
	if q.Progress != nil {
		total := r.bytesFrom(start)
		opts.progress = func(done int64) { q.Progress(done, total) }
	}
	_, err := r.forward(start, opts, f.add)
	if err != nil && !errors.Is(err, errStopFind) {
		return nil, err
	}
	return f.result(), nil
}

// seek returns the position of the first frame that may hold a record at
// or after t. It finds the first segment whose newest record is not older
// than t by binary search (opening O(log n) segments, reading one trailer
// of each), then walks back over that segment's trailers until a frame
// whose newest record is older than t. No frame is decompressed.
func (r *Reader) seek(t time.Time) Pos {
	tn := t.UnixNano()
	i := sort.Search(len(r.segs), func(i int) bool {
		last, ok := r.lastFrame(r.segs[i])
		return !ok || last.t.MaxTime >= tn // an empty segment tells nothing: read on
	})
	if i == len(r.segs) {
		return r.endPos()
	}
	s := r.segs[i]
	if !r.open(s) {
		return Pos{Segment: s.num}
	}
	for end := s.end; ; {
		fi, ok := s.prevFrame(end)
		if !ok {
			return Pos{Segment: s.num}
		}
		if fi.t.MaxTime < tn {
			return Pos{Segment: s.num, Offset: fi.next()}
		}
		end = fi.off
	}
}

// lastFrame returns the last valid frame of s.
func (r *Reader) lastFrame(s *segment) (frameInfo, bool) {
	if !r.open(s) {
		return frameInfo{}, false
	}
	return s.prevFrame(s.end)
}

// endPos is the position after the last segment's valid frames.
func (r *Reader) endPos() Pos {
	if len(r.segs) == 0 {
		return Pos{}
	}
	s := r.segs[len(r.segs)-1]
	return Pos{Segment: s.num, Offset: max(s.end, 0)}
}

// bytesFrom is the number of segment bytes from pos to the end of the log.
func (r *Reader) bytesFrom(pos Pos) int64 {
	infos, _ := r.Segments()
	var n int64
	for _, in := range infos {
		switch {
		case in.Num > pos.Segment:
			n += in.Size
		case in.Num == pos.Segment:
			n += max(in.Size-pos.Offset, 0)
		}
	}
	return n
}

// finder is the state of one Find: the calls begun in the window.
type finder struct {
	q       Query
	text    *matcher
	ord     int
	calls   map[string]*found // calls seen, ended or not
	open    map[*found]bool   // calls without an end yet
	matches []*found
	limited bool
}

// found is one call Find is following.
type found struct {
	ord     int
	m       Match
	asm     *conv.Assembler // the response rebuilt, when it is searched
	body    []byte          // a non-stream response body
	reqHit  *Hit
	respHit *Hit
	done    bool
}

func newFinder(q Query) *finder {
	f := &finder{q: q, calls: map[string]*found{}, open: map[*found]bool{}}
	if q.Text != "" {
		f.text = newMatcher(q.Text, q.Fold)
	}
	return f
}

// add takes the next record of the log.
func (f *finder) add(l Located) error {
	rec := &l.Record
	if f.past(rec.Time) {
		return errStopFind
	}
	if rec.Kind == KindRequest {
		f.request(l)
		return nil
	}
	c := f.calls[rec.Call]
	if c == nil || c.done {
		return nil
	}
	switch rec.Kind {
	case KindResponse:
		c.m.Status = rec.Status
	case KindEvent:
		f.event(c, rec)
	case KindBody:
		if c.asm != nil {
			c.body = append(c.body, rec.Data...)
		}
	case KindEnd:
		f.end(c, rec)
	}
	if f.limited {
		return errStopFind
	}
	return nil
}

// past reports whether a record at t lies beyond what the search needs.
func (f *finder) past(t time.Time) bool {
	if f.q.Until.IsZero() {
		return false
	}
	after := t.Sub(f.q.Until)
	return after >= FollowAfterUntil || (after >= untilSlack && len(f.open) == 0)
}

// request starts following a call whose request is in the window and
// matches the route and model, or searches a retried call's new request.
func (f *finder) request(l Located) {
	rec := &l.Record
	c := f.calls[rec.Call]
	if c == nil {
		if !f.inWindow(rec.Time) || !f.requestMatches(rec) {
			return
		}
		c = &found{ord: f.ord, m: Match{
			Call: rec.Call, Parent: rec.Parent, Internal: rec.Internal, Pos: l.Pos, Time: rec.Time,
			Route: rec.Route, Model: rec.Model, Method: rec.Method, URL: rec.URL,
		}}
		f.ord++
		f.calls[rec.Call] = c
		f.open[c] = true
		if f.text != nil && f.q.In != InRequest {
			c.asm = conv.NewAssembler()
		}
	}
	if c.done {
		return
	}
	if f.text != nil && f.q.In != InResponse && l.Err == nil {
		f.text.searchRequest(rec.Data, &c.reqHit)
	}
}

func (f *finder) inWindow(t time.Time) bool {
	return (f.q.Since.IsZero() || !t.Before(f.q.Since)) && (f.q.Until.IsZero() || t.Before(f.q.Until))
}

func (f *finder) requestMatches(rec *Record) bool {
	if f.q.Route != "" && rec.Route != f.q.Route {
		return false
	}
	return f.q.Model == "" || strings.Contains(strings.ToLower(rec.Model), strings.ToLower(f.q.Model))
}

// event feeds one stream event to the call's assembler; an event that is
// not a chat chunk is searched as it is.
func (f *finder) event(c *found, rec *Record) {
	if c.asm == nil {
		return
	}
	ev, err := parseSSE(rec.Data)
	if err != nil || !ev.HasData || ev.IsDone() {
		return
	}
	if c.asm.AddChunk(ev.Data) != nil || !gjson.GetBytes(ev.Data, "choices").IsArray() {
		f.text.search("response", fmt.Sprintf("events[%d]", rec.Seq), string(ev.Data), &c.respHit)
	}
}

// end closes a call (an attempt the proxy retried is not the end).
func (f *finder) end(c *found, rec *Record) {
	if rec.Outcome == string(proxy.OutcomeRetried) {
		return
	}
	c.m.Outcome, c.m.Duration, c.m.Events, c.m.Err = rec.Outcome, rec.Offset, rec.Events, rec.Err
	if rec.Status != 0 {
		c.m.Status = rec.Status
	}
	f.finish(c)
}

// finish decides on a call whose end came (or whose end the log lacks).
func (f *finder) finish(c *found) {
	c.done = true
	delete(f.open, c)
	if c.asm != nil {
		f.searchResponse(c)
		c.asm, c.body = nil, nil
	}
	if !f.selects(c) {
		return
	}
	f.matches = append(f.matches, c)
	f.limited = f.limitReached()
}

func (f *finder) selects(c *found) bool {
	switch f.q.Outcome {
	case "":
	case OutcomeNone:
		if c.m.Outcome != "" {
			return false
		}
	default:
		if c.m.Outcome != f.q.Outcome {
			return false
		}
	}
	if f.text == nil {
		return true
	}
	for _, h := range []*Hit{c.reqHit, c.respHit} {
		if h != nil {
			c.m.Hits = append(c.m.Hits, *h)
		}
	}
	return len(c.m.Hits) > 0
}

// limitReached reports whether the first Limit calls in log order are
// decided: Limit matches, and no open call before the last of them.
func (f *finder) limitReached() bool {
	if f.q.Limit <= 0 || len(f.matches) < f.q.Limit {
		return false
	}
	ords := make([]int, len(f.matches))
	for i, m := range f.matches {
		ords[i] = m.ord
	}
	slices.Sort(ords)
	last := ords[f.q.Limit-1]
	for c := range f.open {
		if c.ord < last {
			return false
		}
	}
	return true
}

// searchResponse looks for the text in the rebuilt response.
func (f *finder) searchResponse(c *found) {
	if c.body != nil {
		_ = c.asm.AddBody(c.body)
	}
	resp := c.asm.Response()
	for _, ch := range resp.Choices {
		p := fmt.Sprintf("choices[%d].", ch.Index)
		field := ch.ReasoningField
		if field == "" {
			field = conv.ReasoningFields[0]
		}
		f.text.search("response", p+field, ch.Reasoning, &c.respHit)
		f.text.search("response", p+"content", ch.Content, &c.respHit)
		for j, tc := range ch.ToolCalls {
			f.text.search("response", fmt.Sprintf("%stool_calls[%d].name", p, j), tc.Name, &c.respHit)
			f.text.search("response", fmt.Sprintf("%stool_calls[%d].arguments", p, j), tc.Arguments, &c.respHit)
		}
	}
	f.text.search("response", "error", string(resp.Error), &c.respHit)
}

// result returns the matches in log order, the calls still open included.
func (f *finder) result() *FindResult {
	var open []*found
	for c := range f.open {
		open = append(open, c)
	}
	slices.SortFunc(open, func(a, b *found) int { return a.ord - b.ord })
	for _, c := range open {
		if !f.limited {
			f.finish(c)
		}
	}
	slices.SortFunc(f.matches, func(a, b *found) int { return a.ord - b.ord })
	res := &FindResult{Truncated: f.limited}
	for _, c := range f.matches {
		if f.q.Limit > 0 && len(res.Matches) == f.q.Limit {
			res.Truncated = true
			break
		}
		res.Matches = append(res.Matches, c.m)
	}
	return res
}

// matcher finds Query.Text in strings.
type matcher struct {
	text string
	fold bool
}

func newMatcher(text string, fold bool) *matcher {
	if fold {
		text = strings.ToLower(text)
	}
	return &matcher{text: text, fold: fold}
}

// snippetContext is how many bytes around a match a Hit's snippet shows.
const snippetContext = 40

// search records a hit of the text in s (field names it) into *hit.
func (m *matcher) search(side, field, s string, hit **Hit) {
	if s == "" {
		return
	}
	in := s
	if m.fold {
		in = strings.ToLower(s)
		if len(in) != len(s) { // folding changed the byte offsets
			s = in
		}
	}
	i := strings.Index(in, m.text)
	if i < 0 {
		return
	}
	if *hit != nil {
		(*hit).Fields++
		return
	}
	*hit = &Hit{In: side, Field: field, Snippet: snippet(s, i, len(m.text)), Fields: 1}
}

// searchRequest searches the text of a request body's messages, or the
// raw body when it has none.
func (m *matcher) searchRequest(body []byte, hit **Hit) {
	req, err := conv.ParseRequest(body)
	if err != nil || len(req.Messages) == 0 {
		m.search("request", "body", string(body), hit)
		return
	}
	for _, msg := range req.Messages {
		p := fmt.Sprintf("messages[%d].", msg.Index)
		m.search("request", p+"content", msg.Content, hit)
		if msg.Reasoning != "" {
			m.search("request", p+msg.ReasoningField, msg.Reasoning, hit)
		}
		for j, tc := range msg.ToolCalls {
			m.search("request", fmt.Sprintf("%stool_calls[%d].name", p, j), tc.Name, hit)
			m.search("request", fmt.Sprintf("%stool_calls[%d].arguments", p, j), tc.Arguments, hit)
		}
	}
}

// snippet returns s around s[i:i+n] on one line, cut at rune boundaries.
func snippet(s string, i, n int) string {
	lo, hi := max(0, i-snippetContext), min(len(s), i+n+snippetContext)
	for lo > 0 && !utf8.RuneStart(s[lo]) {
		lo--
	}
	for hi < len(s) && !utf8.RuneStart(s[hi]) {
		hi++
	}
	out := oneLine.Replace(s[lo:hi])
	if lo > 0 {
		out = "…" + out
	}
	if hi < len(s) {
		out += "…"
	}
	return out
}

// oneLine escapes line breaks and tabs.
var oneLine = strings.NewReplacer("\r", `\r`, "\n", `\n`, "\t", `\t`)

// EventDelta is what one captured SSE event carried, read as a
// chat.completion.chunk.
type EventDelta struct {
	// Name is the event's "event:" field ("" when it has none).
	Name string
	// Comment is true for an event of comment lines only (": keep-alive");
	// Other holds their text.
	Comment bool
	// Done is true for "data: [DONE]".
	Done bool
	// Choices are the deltas of the chunk's choices, in array order.
	Choices []ChoiceDelta
	// Usage and Error are the raw JSON of a non-null "usage" and "error".
	Usage, Error []byte
	// Other is the data of an event that is not a chat chunk (another
	// protocol's event, or not JSON), or a comment's text, as sent.
	Other []byte
	// Invalid is true when the data is not a JSON object.
	Invalid bool
}

// ChoiceDelta is one choice of a chunk: what it added to the response.
type ChoiceDelta struct {
	Index          int
	Role           string
	ReasoningField string // the field the reasoning came in, or ""
	Reasoning      string
	Content        string
	// ToolCalls are the fragments of tool calls this chunk carried: the
	// id, type and name when this fragment has them, and the piece of the
	// arguments it added.
	ToolCalls    []conv.ToolCall
	FinishReason string
}

// ParseEvent reads one captured SSE event (its raw bytes).
func ParseEvent(raw []byte) EventDelta {
	var d EventDelta
	ev, err := parseSSE(raw)
	if err != nil {
		return EventDelta{Other: raw, Invalid: true}
	}
	d.Name = string(ev.Name)
	switch {
	case ev.Comment:
		d.Comment, d.Other = true, bytes.TrimSpace(ev.Raw)
		return d
	case !ev.HasData:
		d.Other = bytes.TrimSpace(ev.Raw)
		return d
	case ev.IsDone():
		d.Done = true
		return d
	}
	obj := gjson.ParseBytes(ev.Data)
	if !conv.ValidJSON(ev.Data) || !obj.IsObject() {
		d.Other, d.Invalid = ev.Data, true
		return d
	}
	choices := obj.Get("choices")
	if !choices.IsArray() {
		d.Other = ev.Data
		return d
	}
	for _, c := range choices.Array() {
		d.Choices = append(d.Choices, choiceDelta(c))
	}
	if u := obj.Get("usage"); u.Exists() && u.Type != gjson.Null {
		d.Usage = []byte(u.Raw)
	}
	if e := obj.Get("error"); e.Exists() && e.Type != gjson.Null {
		d.Error = []byte(e.Raw)
	}
	return d
}

// parseSSE reads the one event of a captured event's raw bytes, whole.
func parseSSE(raw []byte) (sse.Event, error) {
	return sse.NewReaderOptions(bytes.NewReader(raw), sse.Options{MaxEvent: len(raw) + 1}).Next()
}

func choiceDelta(c gjson.Result) ChoiceDelta {
	cd := ChoiceDelta{Index: int(c.Get("index").Int())}
	delta := c.Get("delta")
	if !delta.Exists() {
		delta = c.Get("message")
	}
	cd.Role = delta.Get("role").Str
	for _, f := range conv.ReasoningFields {
		if v := delta.Get(f); v.Type == gjson.String {
			cd.ReasoningField, cd.Reasoning = f, v.Str
			break
		}
	}
	cd.Content = delta.Get("content").Str
	for i, tc := range delta.Get("tool_calls").Array() {
		idx := i
		if v := tc.Get("index"); v.Exists() {
			idx = int(v.Int())
		}
		cd.ToolCalls = append(cd.ToolCalls, conv.ToolCall{
			Index: idx, ID: tc.Get("id").Str, Type: tc.Get("type").Str,
			Name: tc.Get("function.name").Str, Arguments: tc.Get("function.arguments").Str,
		})
	}
	cd.FinishReason = c.Get("finish_reason").Str
	return cd
}

// Chunk is one stream event of a call, with its timing.
type Chunk struct {
	Seq  int
	Pos  Pos
	Time time.Time
	// Offset is the time since the request started; Gap the time since
	// the previous event (for the first, since the request started).
	Offset, Gap time.Duration
	// Size is the event's bytes on the wire.
	Size  int
	Where string
	EventDelta
}

// Chunks returns the stream events of a call's records (as CallRecords
// returns them), read one by one: the upstream's events, or those
// recorded elsewhere in the pipeline when the log holds none.
func Chunks(recs []Located) []Chunk {
	var start time.Time
	var upstream, other []Located
	for _, l := range recs {
		switch {
		case l.Record.Kind == KindRequest && start.IsZero():
			start = l.Record.Time
		case l.Record.Kind != KindEvent:
		case l.Record.Where == DefaultWhere:
			upstream = append(upstream, l)
		default:
			other = append(other, l)
		}
	}
	events := upstream
	if len(events) == 0 {
		events = other
	}
	out := make([]Chunk, 0, len(events))
	var prev time.Duration
	for _, l := range events {
		r := &l.Record
		at := eventOffset(r, start)
		out = append(out, Chunk{
			Seq: r.Seq, Pos: l.Pos, Time: r.Time, Offset: at, Gap: at - prev,
			Size: l.Size, Where: r.Where, EventDelta: ParseEvent(r.Data),
		})
		prev = at
	}
	return out
}
