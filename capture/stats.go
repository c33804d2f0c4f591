package capture

import (
	"cmp"
	"slices"
	"time"
)

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
// and summarises it. A zero since reads everything. progress, when not
// nil, is told how many of the segments' bytes were read so far.
func ComputeStats(r *Reader, since time.Time, progress func(done, total int64)) (*Stats, error) {
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
	if progress != nil {
		total := st.BytesOnDisk
		opts.progress = func(done int64) { progress(done, total) }
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
