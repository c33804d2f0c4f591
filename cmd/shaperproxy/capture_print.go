package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"text/tabwriter"
	"time"
	"unicode/utf8"

	"github.com/schollz/progressbar/v3"
	"github.com/shaperproxy/shaperproxy/capture"
	"github.com/shaperproxy/shaperproxy/internal/profile"
	"github.com/shaperproxy/shaperproxy/internal/runecut"
	"github.com/tidwall/gjson"
)

// captureOptions are shared by the capture commands.
type captureOptions struct {
	Dir  string // the capture directory
	JSON bool   // one JSON object per line instead of text
	// Profiles prices the usage (the --config routes' profiles; nil: the
	// built-ins).
	Profiles *profile.Table
	// Progress receives a progress bar during long scans; nil: none. The
	// command line passes stderr when it is a terminal.
	Progress io.Writer
}

// tailOptions configure tailCmd.
type tailOptions struct {
	captureOptions
	N      int            // records to print (default 20)
	Kinds  []capture.Kind // only these kinds
	Call   string         // only this call
	Follow bool           // keep printing new records until ctx is done
}

// tailCmd prints the last records of the log with their positions, and
// with Follow the new ones as they come.
func tailCmd(ctx context.Context, w io.Writer, o tailOptions) error {
	r, err := capture.OpenReader(o.Dir)
	if err != nil {
		return err
	}
	defer r.Close()
	f := capture.Filter{Kinds: o.Kinds, Call: o.Call}
	end, err := r.EndPos()
	if err != nil {
		return err
	}
	var last []capture.Located
	if o.N > 0 {
		if last, err = r.Tail(o.N, f); err != nil {
			return err
		}
	}
	p := newPrinter(w, o.JSON)
	for _, l := range last {
		if err := p.record(l); err != nil {
			return err
		}
	}
	if !o.Follow {
		return nil
	}
	if len(last) > 0 {
		lp := last[len(last)-1].Pos
		end = capture.Pos{Segment: lp.Segment, Offset: lp.Offset, Index: lp.Index + 1}
	}
	err = r.Follow(ctx, end, func(l capture.Located) error {
		if !f.Match(&l.Record) {
			return nil
		}
		return p.record(l)
	})
	if errors.Is(err, context.Canceled) {
		return nil
	}
	return err
}

// readOptions configure readCmd.
type readOptions struct {
	captureOptions
	From  capture.Pos
	Limit int // default 100
}

// readCmd prints records from a position on, then the position to
// continue from ("next SEG:OFF+IDX"; in JSON each record has "next").
func readCmd(w io.Writer, o readOptions) error {
	r, err := capture.OpenReader(o.Dir)
	if err != nil {
		return err
	}
	defer r.Close()
	if o.Limit <= 0 {
		o.Limit = 100
	}
	p := newPrinter(w, o.JSON)
	next, err := r.ReadFrom(o.From, o.Limit, p.record)
	if err != nil {
		return err
	}
	if o.JSON {
		return nil // every record carries "next"
	}
	_, err = fmt.Fprintf(w, "next %s\n", next)
	return err
}

// printer writes records as text lines or JSON lines.
type printer struct {
	w      io.Writer
	asJSON bool
	out    *jsonLines
}

func newPrinter(w io.Writer, asJSON bool) *printer {
	return &printer{w: w, asJSON: asJSON, out: newJSONLines(w)}
}

func (p *printer) json(v any) error { return p.out.write(v) }

func (p *printer) record(l capture.Located) error {
	if p.asJSON {
		return p.json(toRecordJSON(l))
	}
	r := &l.Record
	_, err := fmt.Fprintf(p.w, "%-18s %s %-14s %-16s %s\n", l.Pos, fmtTime(r.Time), r.Kind, r.Call, summary(l))
	return err
}

// summary is the one-line description of a record in text output.
func summary(l capture.Located) string {
	r := &l.Record
	var b strings.Builder
	if r.Where != capture.DefaultWhere {
		fmt.Fprintf(&b, "[%s] ", r.Where)
	}
	if r.Internal {
		fmt.Fprintf(&b, "[internal parent=%s] ", r.Parent)
	}
	switch r.Kind {
	case capture.KindRequest, capture.KindClientRequest:
		fmt.Fprintf(&b, "%s %s route=%s model=%s", r.Method, r.URL, r.Route, r.Model)
		if n := gjson.GetBytes(r.Data, "messages.#"); n.Exists() {
			fmt.Fprintf(&b, " messages=%d", n.Int())
		}
		fmt.Fprintf(&b, " reasoning shaped=%d raw=%d stream=%v %d bytes", r.ReasoningShaped, r.ReasoningRaw, r.Stream, l.Size)
	case capture.KindResponse:
		fmt.Fprintf(&b, "status=%d content-type=%s", r.Status, http.Header(r.Header).Get("Content-Type"))
	case capture.KindEvent:
		fmt.Fprintf(&b, "#%d +%s %s", r.Seq, fmtDur(r.Offset), describeDelta(capture.ParseEvent(r.Data), 160))
	case capture.KindEnd:
		fmt.Fprintf(&b, "%s events=%d bytes=%d +%s", r.Outcome, r.Events, r.Bytes, fmtDur(r.Offset))
		if len(r.Usage) > 0 {
			fmt.Fprintf(&b, " usage=%s", clip(r.Usage, 200))
		}
		if r.Err != "" {
			fmt.Fprintf(&b, " err=%q", r.Err)
		}
	case capture.KindDrops:
		fmt.Fprintf(&b, "dropped=%d %s", r.DroppedCount, r.Data)
	default:
		fmt.Fprintf(&b, "%d bytes %s", l.Size, clip(r.Data, 160))
	}
	if l.Err != nil {
		fmt.Fprintf(&b, " (error: %v)", l.Err)
	}
	return b.String()
}

// clip returns b on one line, cut to n bytes.
func clip(b []byte, n int) string {
	s := string(b)
	if !utf8.ValidString(s) {
		return fmt.Sprintf("<%d bytes binary>", len(b))
	}
	s = strings.TrimRight(s, "\r\n")
	s = strings.NewReplacer("\r", `\r`, "\n", `\n`, "\t", `\t`).Replace(s)
	if len(s) > n {
		s = runecut.Prefix(s, n) + "…"
	}
	return s
}

func fmtDur(d time.Duration) string {
	return d.Round(time.Millisecond).String()
}

// newBar returns a progress bar over total bytes, or nil.
func newBar(w io.Writer, total int64, desc string) *progressbar.ProgressBar {
	if w == nil {
		return nil
	}
	return progressbar.NewOptions64(total,
		progressbar.OptionSetWriter(w),
		progressbar.OptionSetDescription(desc),
		progressbar.OptionShowBytes(true),
		progressbar.OptionThrottle(100*time.Millisecond),
		progressbar.OptionClearOnFinish(),
	)
}

// showOptions configure showCmd.
type showOptions struct {
	captureOptions
	Call   string // the call id; "" shows the last call with a request
	Full   bool   // print reasoning, content and deltas whole (text output)
	Chunks bool   // list the stream's events one by one
}

// showCmd prints one call: what was sent and what came back.
func showCmd(w io.Writer, o showOptions) error {
	r, err := capture.OpenReader(o.Dir)
	if err != nil {
		return err
	}
	defer r.Close()
	v, err := capture.Show(r, o.Call)
	if err != nil {
		return err
	}
	var chunks []capture.Chunk
	if o.Chunks {
		recs, err := r.CallRecords(v.Call)
		if err != nil {
			return err
		}
		chunks = capture.Chunks(recs)
	}
	tab := o.profiles()
	if o.JSON {
		j := toCallJSON(v, chunks, o.Chunks)
		j.Cost, _, _ = callCost(v, tab)
		return newJSONLines(w).write(j)
	}
	if err := printCallView(w, v, o.Full, tab); err != nil {
		return err
	}
	if !o.Chunks {
		return nil
	}
	return printChunks(w, chunks, o.Full)
}

func printCallView(w io.Writer, v *capture.CallView, full bool, tab *profile.Table) error {
	var b strings.Builder
	fmt.Fprintf(&b, "call %s", v.Call)
	if v.Internal {
		fmt.Fprintf(&b, " (internal: %s, parent %s)", v.Kind, v.Parent)
	} else if v.Parent != "" {
		fmt.Fprintf(&b, " (parent %s)", v.Parent)
	}
	b.WriteString("\n")
	if v.Conversation != "" {
		fmt.Fprintf(&b, "conversation %s\n", v.Conversation)
	}
	if q := v.Request; q != nil {
		printReqView(&b, q)
	} else {
		b.WriteString("request: not in the log\n")
	}
	if v.Status != 0 {
		fmt.Fprintf(&b, "\nresponse status %d\n", v.Status)
	}
	if rv := v.Response; rv != nil {
		printRespView(&b, rv, full)
	}
	printCallUsage(&b, v, tab)
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

func printReqView(b *strings.Builder, q *capture.ReqView) {
	fmt.Fprintf(b, "\nrequest at %s (%s)\n", fmtTime(q.Time), q.Pos)
	fmt.Fprintf(b, "  %s %s\n", q.Method, q.URL)
	fmt.Fprintf(b, "  route %s, model %s, stream %v, %d bytes\n", q.Route, q.Model, q.Stream, q.Bytes)
	if q.ReadError != "" {
		fmt.Fprintf(b, "  body not readable: %s\n", q.ReadError)
	}
	var roles []string
	for _, role := range sortedRoles(q.Roles) {
		roles = append(roles, fmt.Sprintf("%s %d", role, q.Roles[role]))
	}
	fmt.Fprintf(b, "  messages %d: %s\n", q.Messages, strings.Join(roles, ", "))
	fmt.Fprintf(b, "  reasoning blocks sent: shaped %d, raw %d (history messages with reasoning text: %d, signed: %d)\n",
		q.ReasoningShaped, q.ReasoningRaw, q.ReasoningBlocks, q.SignedBlocks)
	if q.LastMessage != "" {
		fmt.Fprintf(b, "  last message: %s\n", q.LastMessage)
	}
}

func printRespView(b *strings.Builder, rv *capture.RespView, full bool) {
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

// roleOrder is the order roles are listed in; others follow, sorted.
var roleOrder = []string{"system", "developer", "user", "assistant", "tool"}

// sortedRoles returns the roles counted in roles, in roleOrder.
func sortedRoles(roles map[string]int) []string {
	var out []string
	for _, role := range roleOrder {
		if roles[role] > 0 {
			out = append(out, role)
		}
	}
	var rest []string
	for role, n := range roles {
		if n > 0 && !slices.Contains(roleOrder, role) {
			rest = append(rest, role)
		}
	}
	slices.Sort(rest)
	return append(out, rest...)
}

// statsOptions configure statsCmd.
type statsOptions struct {
	captureOptions
	Since time.Time // only records at or after this time; zero: all
}

// statsCmd prints the statistics of the log.
func statsCmd(w io.Writer, o statsOptions) error {
	r, err := capture.OpenReader(o.Dir)
	if err != nil {
		return err
	}
	defer r.Close()
	var progress func(done, total int64)
	if bar := newBar(o.Progress, 0, "scanning"); bar != nil {
		defer bar.Finish()
		progress = func(done, total int64) {
			bar.ChangeMax64(total)
			_ = bar.Set64(done)
		}
	}
	st, err := capture.ComputeStats(r, o.Since, progress)
	if err != nil {
		return err
	}
	ps := priceStats(st, o.profiles())
	if o.JSON {
		return newJSONLines(w).write(toStatsJSON(st, ps))
	}
	return printStats(w, st, ps)
}

// profiles is the table that prices the usage.
func (o captureOptions) profiles() *profile.Table {
	if o.Profiles == nil {
		return profile.NewTable(nil, nil)
	}
	return o.Profiles
}

func printStats(w io.Writer, st *capture.Stats, ps *pricedStats) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "records\t%d", st.Records)
	if st.Records > 0 {
		fmt.Fprintf(tw, " from %s to %s", fmtTime(st.First), fmtTime(st.Last))
	}
	if !st.Since.IsZero() {
		fmt.Fprintf(tw, " (since %s)", fmtTime(st.Since))
	}
	fmt.Fprintln(tw)
	for _, k := range []capture.Kind{capture.KindRequest, capture.KindClientRequest, capture.KindResponse, capture.KindEvent, capture.KindBody, capture.KindEnd, capture.KindDrops, capture.KindNote} {
		if n := st.ByKind[k.String()]; n > 0 {
			fmt.Fprintf(tw, "  %s\t%d\n", k, n)
		}
	}
	fmt.Fprintf(tw, "bytes on the wire (raw)\t%s\n", fmtBytes(st.BytesWire))
	fmt.Fprintf(tw, "bytes on disk\t%s in %d segments", fmtBytes(st.BytesOnDisk), st.Segments)
	if st.BytesWire > 0 {
		fmt.Fprintf(tw, " (%.2f%% of raw)", 100*float64(st.BytesOnDisk)/float64(st.BytesWire))
	}
	fmt.Fprintln(tw)
	fmt.Fprintf(tw, "dropped records\t%d\n", st.Dropped)
	if st.ReadErrors > 0 {
		fmt.Fprintf(tw, "unreadable requests\t%d\n", st.ReadErrors)
	}
	if d := st.Damaged; d.Frames > 0 || d.Bytes > 0 {
		fmt.Fprintf(tw, "damaged, skipped\t%s (%d frames failed their checks: their records are lost)\n", fmtBytes(d.Bytes), d.Frames)
	}
	fmt.Fprintf(tw, "\noutgoing reasoning blocks\n  route\tmodel\trequests\tinternal\tshaped\traw\tshaped %%\tmarkers found\n")
	for _, rr := range st.Reasoning {
		pct := "-"
		if t := rr.Shaped + rr.Raw; t > 0 {
			pct = fmt.Sprintf("%.1f", 100*float64(rr.Shaped)/float64(t))
		}
		fmt.Fprintf(tw, "  %s\t%s\t%d\t%d\t%d\t%d\t%s\t%d\n", rr.Route, rr.Model, rr.Requests, rr.Internal, rr.Shaped, rr.Raw, pct, rr.Markers)
	}
	fmt.Fprintf(tw, "  shaping markers found (pollution: \"[reasoning extract: …]\" in reasoning sent upstream): %d in %d distinct blocks\n",
		st.Markers.Found, st.Markers.Blocks)
	printStatsCost(tw, st, ps)
	printStatsConversations(tw, ps)
	c := st.Chunks
	fmt.Fprintf(tw, "\nchunks per streamed call\t%d calls: min %d, median %d, max %d\n", c.Calls, c.Min, c.Median, c.Max)
	fmt.Fprintf(tw, "\ncalls by outcome\n")
	outcomes := make([]string, 0, len(st.Outcomes))
	for o := range st.Outcomes {
		outcomes = append(outcomes, o)
	}
	slices.Sort(outcomes)
	for _, o := range outcomes {
		fmt.Fprintf(tw, "  %s\t%d\n", o, st.Outcomes[o])
	}
	return tw.Flush()
}

func fmtBytes(n int64) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%.2f GiB", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.2f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d B", n)
}
