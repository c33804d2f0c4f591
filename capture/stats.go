package capture

import (
	"cmp"
	"fmt"
	"io"
	"slices"
	"text/tabwriter"
	"time"
)

// StatsOptions configure StatsCmd.
type StatsOptions struct {
	CmdOptions
	Since time.Duration // only records newer than this; 0: all
	Now   time.Time     // the clock for Since (default time.Now())
}

// Stats summarises a capture log.
type Stats struct {
	Segments    int              `json:"segments"`
	BytesOnDisk int64            `json:"bytes_on_disk"` // all segment files
	BytesWire   int64            `json:"bytes_wire"`    // Data of the records read, requests whole
	Records     int64            `json:"records"`
	ByKind      map[string]int64 `json:"by_kind"`
	First       time.Time        `json:"first,omitzero"`
	Last        time.Time        `json:"last,omitzero"`
	Since       time.Time        `json:"since,omitzero"`
	Reasoning   []RouteReasoning `json:"reasoning"`
	Chunks      ChunkStats       `json:"chunks_per_call"`
	Outcomes    map[string]int64 `json:"outcomes"`
	Dropped     int64            `json:"dropped"`
	ReadErrors  int64            `json:"read_errors"`
}

// RouteReasoning counts the outgoing reasoning blocks of the requests of
// one route and model.
type RouteReasoning struct {
	Route    string `json:"route"`
	Model    string `json:"model"`
	Requests int64  `json:"requests"`
	Internal int64  `json:"internal"`
	Shaped   int64  `json:"shaped"`
	Raw      int64  `json:"raw"`
}

// ChunkStats describes the number of upstream SSE events per streamed call.
type ChunkStats struct {
	Calls  int `json:"calls"`
	Min    int `json:"min"`
	Median int `json:"median"`
	Max    int `json:"max"`
}

// ComputeStats reads the log forward (without rebuilding request bodies)
// and summarises it. A zero since reads everything.
func ComputeStats(r *Reader, since time.Time, progress io.Writer) (*Stats, error) {
	if err := r.refresh(); err != nil {
		return nil, err
	}
	st := &Stats{ByKind: map[string]int64{}, Outcomes: map[string]int64{}, Since: since}
	segs, err := r.Segments()
	if err != nil {
		return nil, err
	}
	for _, s := range segs {
		st.Segments++
		st.BytesOnDisk += s.Size
	}
	routes := map[[2]string]*RouteReasoning{}
	chunks := map[string]int{}
	opts := readOpts{filter: Filter{Since: since}}
	if bar := newBar(progress, st.BytesOnDisk, "scanning"); bar != nil {
		defer bar.Finish()
		opts.progress = func(done int64) { _ = bar.Set64(done) }
	}
	_, err = r.forward(Pos{}, opts, func(l Located) error {
		st.add(&l, routes, chunks)
		return nil
	})
	if err != nil {
		return nil, err
	}
	for _, rr := range routes {
		st.Reasoning = append(st.Reasoning, *rr)
	}
	slices.SortFunc(st.Reasoning, func(a, b RouteReasoning) int {
		return cmp.Or(cmp.Compare(a.Route, b.Route), cmp.Compare(a.Model, b.Model))
	})
	st.Chunks = chunkStats(chunks)
	return st, nil
}

func (st *Stats) add(l *Located, routes map[[2]string]*RouteReasoning, chunks map[string]int) {
	r := &l.Record
	st.Records++
	st.ByKind[r.Kind.String()]++
	st.BytesWire += int64(l.Size)
	if l.Err != nil {
		st.ReadErrors++
	}
	if st.First.IsZero() || r.Time.Before(st.First) {
		st.First = r.Time
	}
	if r.Time.After(st.Last) {
		st.Last = r.Time
	}
	switch r.Kind {
	case KindRequest:
		k := [2]string{r.Route, r.Model}
		rr := routes[k]
		if rr == nil {
			rr = &RouteReasoning{Route: r.Route, Model: r.Model}
			routes[k] = rr
		}
		rr.Requests++
		if r.Internal {
			rr.Internal++
		}
		rr.Shaped += int64(r.ReasoningShaped)
		rr.Raw += int64(r.ReasoningRaw)
	case KindEvent:
		if r.Where == DefaultWhere {
			chunks[r.Call]++
		}
	case KindEnd:
		st.Outcomes[r.Outcome]++
	case KindDrops:
		st.Dropped += r.DroppedCount
	}
}

func chunkStats(chunks map[string]int) ChunkStats {
	if len(chunks) == 0 {
		return ChunkStats{}
	}
	n := make([]int, 0, len(chunks))
	for _, c := range chunks {
		n = append(n, c)
	}
	slices.Sort(n)
	return ChunkStats{Calls: len(n), Min: n[0], Median: n[len(n)/2], Max: n[len(n)-1]}
}

// StatsCmd prints the statistics of the log.
func StatsCmd(w io.Writer, o StatsOptions) error {
	r, err := OpenReader(o.Dir)
	if err != nil {
		return err
	}
	defer r.Close()
	var since time.Time
	if o.Since > 0 {
		since = cmp.Or(o.Now, time.Now()).Add(-o.Since)
	}
	st, err := ComputeStats(r, since, o.Progress)
	if err != nil {
		return err
	}
	if o.JSON {
		return newPrinter(w, true).json(st)
	}
	return st.print(w)
}

func (st *Stats) print(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	const tf = "2006-01-02 15:04:05"
	fmt.Fprintf(tw, "records\t%d", st.Records)
	if st.Records > 0 {
		fmt.Fprintf(tw, " from %s to %s", st.First.Format(tf), st.Last.Format(tf))
	}
	if !st.Since.IsZero() {
		fmt.Fprintf(tw, " (since %s)", st.Since.Format(tf))
	}
	fmt.Fprintln(tw)
	for _, k := range []Kind{KindRequest, KindClientRequest, KindResponse, KindEvent, KindBody, KindEnd, KindDrops, KindNote} {
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
	fmt.Fprintf(tw, "\noutgoing reasoning blocks\n  route\tmodel\trequests\tinternal\tshaped\traw\tshaped %%\n")
	for _, rr := range st.Reasoning {
		pct := "-"
		if t := rr.Shaped + rr.Raw; t > 0 {
			pct = fmt.Sprintf("%.1f", 100*float64(rr.Shaped)/float64(t))
		}
		fmt.Fprintf(tw, "  %s\t%s\t%d\t%d\t%d\t%d\t%s\n", rr.Route, rr.Model, rr.Requests, rr.Internal, rr.Shaped, rr.Raw, pct)
	}
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
