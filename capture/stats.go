package capture

import (
	"slices"
	"time"

	"github.com/shaperproxy/shaperproxy/internal/accounting"
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
	// Damaged is what the read skipped: frames that failed their checks
	// and bytes that are no frame (see Damage).
	Damaged Damage `json:"damaged"`
	// Usage sums what the upstreams reported per route, model and kind of
	// call, sorted by route, model and kind (primary first).
	Usage []UsageRow `json:"usage"`
	// Conversations sums the usage per conversation, route and model,
	// sorted by conversation.
	Conversations []ConversationUsage `json:"conversations"`
	// Markers counts the shaping markers in the reasoning the requests
	// carried upstream (pollution).
	Markers MarkerCount `json:"markers"`
}

// RouteReasoning counts the outgoing reasoning blocks of the requests of
// one route and model, and the shaping markers in them.
type RouteReasoning struct {
	Route    string `json:"route"`
	Model    string `json:"model"`
	Requests int64  `json:"requests"`
	Internal int64  `json:"internal"`
	Shaped   int64  `json:"shaped"`
	Raw      int64  `json:"raw"`
	Markers  int64  `json:"markers_found"` // in distinct blocks first seen here
}

// UsageRow sums the usage the upstream reported for the calls of one
// route, model and kind (accounting.Kind: "primary", "review-child", …).
type UsageRow struct {
	Route    string `json:"route"`
	Model    string `json:"model"`
	Kind     string `json:"kind"`
	Calls    int64  `json:"calls"`    // calls that ended (chat calls, or any call with a usage)
	Reported int64  `json:"reported"` // of them, with a usage
	accounting.Usage
}

// ConversationUsage sums the usage of one conversation's calls on one
// route and model, every kind together.
type ConversationUsage struct {
	Conversation string `json:"conversation"` // "" for calls without a key (older logs)
	Route        string `json:"route"`
	Model        string `json:"model"`
	Calls        int64  `json:"calls"`
	Internal     int64  `json:"internal_calls"`
	Reported     int64  `json:"reported"`
	accounting.Usage
}

// MarkerCount counts shaping markers ("[reasoning extract: N chars
// omitted]" and its family, shaping.CountMarkers) in the reasoning blocks
// of the requests sent upstream, each distinct block once.
type MarkerCount struct {
	Blocks int64 `json:"blocks"`        // distinct reasoning blocks holding a marker
	Found  int64 `json:"markers_found"` // markers in them
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
	acc := newStatsAcc()
	opts := readOpts{filter: Filter{Since: since}, resolve: true, damage: &st.Damaged}
	if progress != nil {
		total := st.BytesOnDisk
		opts.progress = func(done int64) { progress(done, total) }
	}
	_, err = r.forward(Pos{}, opts, func(l Located) error {
		st.add(&l, acc)
		return nil
	})
	if err != nil {
		return nil, err
	}
	acc.fill(st)
	return st, nil
}

func (st *Stats) add(l *Located, acc *statsAcc) {
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
		rr := acc.route(r.Route, r.Model)
		rr.Requests++
		if r.Internal {
			rr.Internal++
		}
		rr.Shaped += int64(r.ReasoningShaped)
		rr.Raw += int64(r.ReasoningRaw)
		blocks, found := acc.markers.request(r.Data)
		rr.Markers += found
		st.Markers.Blocks += blocks
		st.Markers.Found += found
	case KindEvent:
		if r.Where == DefaultWhere {
			acc.chunks[r.Call]++
		}
	case KindEnd:
		st.Outcomes[r.Outcome]++
		acc.end(r)
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
