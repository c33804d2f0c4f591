package capture

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/schollz/progressbar/v3"
	"github.com/tidwall/gjson"
)

// CmdOptions are shared by the capture commands.
type CmdOptions struct {
	Dir  string // the capture directory
	JSON bool   // one JSON object per line instead of text
	// Progress receives a progress bar during long scans; nil: none. The
	// command line passes stderr when it is a terminal.
	Progress io.Writer
}

// TailOptions configure TailCmd.
type TailOptions struct {
	CmdOptions
	N      int    // records to print (default 20)
	Kinds  []Kind // only these kinds
	Call   string // only this call
	Follow bool   // keep printing new records until ctx is done
}

// TailCmd prints the last records of the log with their positions, and
// with Follow the new ones as they come.
func TailCmd(ctx context.Context, w io.Writer, o TailOptions) error {
	r, err := OpenReader(o.Dir)
	if err != nil {
		return err
	}
	defer r.Close()
	if o.N <= 0 {
		o.N = 20
	}
	f := Filter{Kinds: o.Kinds, Call: o.Call}
	end, err := r.EndPos()
	if err != nil {
		return err
	}
	last, err := r.Tail(o.N, f)
	if err != nil {
		return err
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
		end = Pos{lp.Segment, lp.Offset, lp.Index + 1}
	}
	err = r.Follow(ctx, end, func(l Located) error {
		if !f.kindOK(l.Record.Kind) || (f.Call != "" && l.Record.Call != f.Call) {
			return nil
		}
		return p.record(l)
	})
	if errors.Is(err, context.Canceled) {
		return nil
	}
	return err
}

// ReadOptions configure ReadCmd.
type ReadOptions struct {
	CmdOptions
	From  Pos
	Limit int // default 100
}

// ReadCmd prints records from a position on, then the position to
// continue from ("next SEG:OFF+IDX", or {"next": ...} in JSON).
func ReadCmd(w io.Writer, o ReadOptions) error {
	r, err := OpenReader(o.Dir)
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
		return p.json(map[string]string{"next": next.String()})
	}
	_, err = fmt.Fprintf(w, "next %s\n", next)
	return err
}

// printer writes records as text lines or JSON lines.
type printer struct {
	w      io.Writer
	asJSON bool
	enc    *json.Encoder
}

func newPrinter(w io.Writer, asJSON bool) *printer {
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	return &printer{w: w, asJSON: asJSON, enc: enc}
}

func (p *printer) json(v any) error { return p.enc.Encode(v) }

func (p *printer) record(l Located) error {
	if p.asJSON {
		return p.json(toJSON(l))
	}
	r := &l.Record
	_, err := fmt.Fprintf(p.w, "%-18s %s %-14s %-16s %s\n", l.Pos, r.Time.Format("2006-01-02 15:04:05.000"),
		r.Kind, r.Call, summary(l))
	return err
}

// summary is the one-line description of a record in text output.
func summary(l Located) string {
	r := &l.Record
	var b strings.Builder
	if r.Where != DefaultWhere {
		fmt.Fprintf(&b, "[%s] ", r.Where)
	}
	if r.Internal {
		fmt.Fprintf(&b, "[internal parent=%s] ", r.Parent)
	}
	switch r.Kind {
	case KindRequest, KindClientRequest:
		fmt.Fprintf(&b, "%s %s route=%s model=%s", r.Method, r.URL, r.Route, r.Model)
		if n := gjson.GetBytes(r.Data, "messages.#"); n.Exists() {
			fmt.Fprintf(&b, " messages=%d", n.Int())
		}
		fmt.Fprintf(&b, " reasoning shaped=%d raw=%d stream=%v %d bytes", r.ReasoningShaped, r.ReasoningRaw, r.Stream, l.Size)
	case KindResponse:
		fmt.Fprintf(&b, "status=%d content-type=%s", r.Status, http.Header(r.Header).Get("Content-Type"))
	case KindEvent:
		fmt.Fprintf(&b, "#%d +%s %s", r.Seq, fmtDur(r.Offset), clip(r.Data, 160))
	case KindEnd:
		fmt.Fprintf(&b, "%s events=%d bytes=%d +%s", r.Outcome, r.Events, r.Bytes, fmtDur(r.Offset))
		if len(r.Usage) > 0 {
			fmt.Fprintf(&b, " usage=%s", clip(r.Usage, 200))
		}
		if r.Err != "" {
			fmt.Fprintf(&b, " err=%q", r.Err)
		}
	case KindDrops:
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
		cut := n
		for cut > 0 && !utf8.RuneStart(s[cut]) {
			cut--
		}
		s = s[:cut] + "…"
	}
	return s
}

func fmtDur(d time.Duration) string {
	return d.Round(time.Millisecond).String()
}

// recordJSON is the JSON form of a record. Data is a string holding the
// exact bytes when they are UTF-8, else base64 in data_base64.
type recordJSON struct {
	Pos             string          `json:"pos"`
	Kind            string          `json:"kind"`
	Call            string          `json:"call,omitempty"`
	Parent          string          `json:"parent,omitempty"`
	Internal        bool            `json:"internal,omitempty"`
	Seq             int             `json:"seq"`
	Time            time.Time       `json:"time"`
	OffsetMS        float64         `json:"offset_ms"`
	Where           string          `json:"where"`
	Route           string          `json:"route,omitempty"`
	Model           string          `json:"model,omitempty"`
	Method          string          `json:"method,omitempty"`
	URL             string          `json:"url,omitempty"`
	Header          http.Header     `json:"header,omitempty"`
	Status          int             `json:"status,omitempty"`
	Stream          bool            `json:"stream,omitempty"`
	Size            int             `json:"size"`
	Data            *string         `json:"data,omitempty"`
	DataBase64      []byte          `json:"data_base64,omitempty"`
	ReasoningShaped int             `json:"reasoning_shaped,omitempty"`
	ReasoningRaw    int             `json:"reasoning_raw,omitempty"`
	Outcome         string          `json:"outcome,omitempty"`
	Bytes           int64           `json:"bytes,omitempty"`
	Events          int             `json:"events,omitempty"`
	Usage           json.RawMessage `json:"usage,omitempty"`
	Err             string          `json:"err,omitempty"`
	DroppedCount    int64           `json:"dropped_count,omitempty"`
	ReadError       string          `json:"read_error,omitempty"`
}

func toJSON(l Located) recordJSON {
	r := &l.Record
	j := recordJSON{
		Pos: l.Pos.String(), Kind: r.Kind.String(), Call: r.Call, Parent: r.Parent, Internal: r.Internal,
		Seq: r.Seq, Time: r.Time, OffsetMS: float64(r.Offset) / float64(time.Millisecond), Where: r.Where,
		Route: r.Route, Model: r.Model, Method: r.Method, URL: r.URL, Header: r.Header, Status: r.Status,
		Stream: r.Stream, Size: l.Size, ReasoningShaped: r.ReasoningShaped, ReasoningRaw: r.ReasoningRaw,
		Outcome: r.Outcome, Bytes: r.Bytes, Events: r.Events, Err: r.Err, DroppedCount: r.DroppedCount,
	}
	if json.Valid(r.Usage) {
		j.Usage = r.Usage
	}
	if utf8.Valid(r.Data) {
		if len(r.Data) > 0 {
			s := string(r.Data)
			j.Data = &s
		}
	} else {
		j.DataBase64 = r.Data
	}
	if l.Err != nil {
		j.ReadError = l.Err.Error()
	}
	return j
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
