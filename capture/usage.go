package capture

import (
	"cmp"
	"hash/maphash"
	"slices"

	"github.com/shaperproxy/shaperproxy/conv"
	"github.com/shaperproxy/shaperproxy/internal/accounting"
	"github.com/shaperproxy/shaperproxy/proxy"
	"github.com/shaperproxy/shaperproxy/shaping"
)

// statsAcc holds what ComputeStats gathers before it sorts it into Stats.
type statsAcc struct {
	routes  map[[2]string]*RouteReasoning
	chunks  map[string]int
	usage   map[[3]string]*UsageRow
	convs   map[[3]string]*ConversationUsage
	markers markerSeen
}

func newStatsAcc() *statsAcc {
	return &statsAcc{
		routes: map[[2]string]*RouteReasoning{}, chunks: map[string]int{},
		usage: map[[3]string]*UsageRow{}, convs: map[[3]string]*ConversationUsage{},
		markers: markerSeen{seed: maphash.MakeSeed(), seen: map[uint64]bool{}},
	}
}

func (a *statsAcc) route(route, model string) *RouteReasoning {
	return entry(a.routes, [2]string{route, model}, func() *RouteReasoning { return &RouteReasoning{Route: route, Model: model} })
}

// end adds the usage of an end record: a chat call's (its record names a
// model), or any call's that reported a usage.
func (a *statsAcc) end(r *Record) {
	if r.Outcome == string(proxy.OutcomeRetried) {
		return // an attempt dropped for a retry: the call is counted by the attempt that answered
	}
	u, _, ok := accounting.Parse(r.Usage)
	if !ok && r.Model == "" {
		return
	}
	kind := accounting.Kind(r.Internal, r.Purpose)
	row := a.usageRow(r.Route, r.Model, kind)
	cv := a.conversation(r.Conversation, r.Route, r.Model)
	row.Calls++
	cv.Calls++
	if r.Internal {
		cv.Internal++
	}
	if ok {
		row.Reported++
		cv.Reported++
		row.Add(u)
		cv.Add(u)
	}
}

func (a *statsAcc) usageRow(route, model, kind string) *UsageRow {
	return entry(a.usage, [3]string{route, model, kind}, func() *UsageRow { return &UsageRow{Route: route, Model: model, Kind: kind} })
}

func (a *statsAcc) conversation(key, route, model string) *ConversationUsage {
	return entry(a.convs, [3]string{key, route, model}, func() *ConversationUsage {
		return &ConversationUsage{Conversation: key, Route: route, Model: model}
	})
}

// fill sorts what was gathered into st.
func (a *statsAcc) fill(st *Stats) {
	for _, rr := range a.routes {
		st.Reasoning = append(st.Reasoning, *rr)
	}
	slices.SortFunc(st.Reasoning, func(a, b RouteReasoning) int {
		return cmp.Or(cmp.Compare(a.Route, b.Route), cmp.Compare(a.Model, b.Model))
	})
	st.Chunks = chunkStats(a.chunks)
	for _, row := range a.usage {
		st.Usage = append(st.Usage, *row)
	}
	slices.SortFunc(st.Usage, func(a, b UsageRow) int {
		return cmp.Or(cmp.Compare(a.Route, b.Route), cmp.Compare(a.Model, b.Model), compareKinds(a.Kind, b.Kind))
	})
	for _, cv := range a.convs {
		st.Conversations = append(st.Conversations, *cv)
	}
	slices.SortFunc(st.Conversations, func(a, b ConversationUsage) int {
		return cmp.Or(cmp.Compare(a.Conversation, b.Conversation), cmp.Compare(a.Route, b.Route), cmp.Compare(a.Model, b.Model))
	})
}

// compareKinds orders kinds with the client's own calls first.
func compareKinds(a, b string) int {
	pa, pb := a == accounting.KindPrimary, b == accounting.KindPrimary
	switch {
	case pa && !pb:
		return -1
	case pb && !pa:
		return 1
	}
	return cmp.Compare(a, b)
}

// UsageByKind sums the usage rows of s per kind, primary first.
func (s *Stats) UsageByKind() []UsageRow {
	m := map[string]*UsageRow{}
	var out []UsageRow
	for _, row := range s.Usage {
		k := entry(m, row.Kind, func() *UsageRow { return &UsageRow{Kind: row.Kind} })
		k.Calls += row.Calls
		k.Reported += row.Reported
		k.Add(row.Usage)
	}
	for _, k := range m {
		out = append(out, *k)
	}
	slices.SortFunc(out, func(a, b UsageRow) int { return compareKinds(a.Kind, b.Kind) })
	return out
}

// markerSeen counts the shaping markers of each distinct reasoning block
// once, however many requests re-send it.
type markerSeen struct {
	seed maphash.Seed
	seen map[uint64]bool // blocks with markers, by hash
}

// request counts the markers of the blocks of a request body not seen
// before: the blocks holding one, and the markers in them.
func (m *markerSeen) request(body []byte) (blocks, found int64) {
	if len(body) == 0 || shaping.CountMarkers(string(body)) == 0 {
		return 0, 0
	}
	req, err := conv.ParseRequest(body)
	if err != nil {
		return 0, 0
	}
	for _, msg := range req.Messages {
		n := shaping.CountMarkers(msg.Reasoning)
		if n == 0 {
			continue
		}
		h := maphash.String(m.seed, msg.Reasoning)
		if !m.seen[h] {
			m.seen[h] = true
			blocks++
			found += int64(n)
		}
	}
	return blocks, found
}

// entry returns m[k], made by mk and stored first when there is none.
func entry[K comparable, V any](m map[K]*V, k K, mk func() *V) *V {
	v := m[k]
	if v == nil {
		v = mk()
		m[k] = v
	}
	return v
}
