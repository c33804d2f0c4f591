package guard

import (
	"maps"
	"slices"
	"testing"

	"github.com/shaperproxy/shaperproxy/conv"
)

// bench600 is a 600-message agent history of about 850 KB: a 10 KB
// system prompt, then 299 steps of ~800 characters of reasoning, a
// read_file call and a ~1.8 KB result (one in nine failing).
func bench600(b testing.TB, extra int) (*Guard, *conv.Request) {
	g := mustGuard(b, nil)
	req := mustParse(b, agentHistory(600+extra, 800, 1800).body())
	return g, req
}

// prefix is a view of the first n messages of req (the guard reads only
// Messages and the bytes they delimit).
func prefix(req *conv.Request, n int) *conv.Request {
	return &conv.Request{Body: req.Body, Messages: req.Messages[:n]}
}

// BenchmarkFold600: the full fold of a 600-message history, per request.
func BenchmarkFold600(b *testing.B) {
	g, req := bench600(b, 0)
	b.SetBytes(int64(len(req.Body)))
	b.ReportAllocs()
	for b.Loop() {
		g.Fold(req)
	}
}

// BenchmarkIncremental600: a Projection that has folded 600 messages
// gets the next request, with one message more: the prefix check of the
// whole history plus the fold of one message. (Each iteration uses a copy
// of the same primed Projection, made with the timer stopped.)
func BenchmarkIncremental600(b *testing.B) {
	g, req := bench600(b, 1)
	primed := g.NewProjection()
	primed.Update(prefix(req, 600))
	b.SetBytes(int64(len(req.Body)))
	b.ReportAllocs()
	var batch []*projection
	for i := 0; i < b.N; i++ {
		if len(batch) == 0 {
			b.StopTimer()
			for range 64 {
				batch = append(batch, primed.clone())
			}
			b.StartTimer()
		}
		p := batch[len(batch)-1]
		batch = batch[:len(batch)-1]
		if _, st := p.Update(req); st.Processed != 1 {
			b.Fatalf("processed %d", st.Processed)
		}
	}
}

// clone copies a Projection (for the benchmark).
func (p *projection) clone() *projection {
	q := *p
	q.f.calls = slices.Clone(p.f.calls)
	q.f.byID = maps.Clone(p.f.byID)
	return &q
}

// BenchmarkUnchanged600: the same 600-message request again (a retry):
// only the prefix check.
func BenchmarkUnchanged600(b *testing.B) {
	g, req := bench600(b, 0)
	p := g.NewProjection()
	p.Update(req)
	b.SetBytes(int64(len(req.Body)))
	b.ReportAllocs()
	for b.Loop() {
		p.Update(req)
	}
}

// BenchmarkDecide600: deciding on a 600-message request with notices to
// place again.
func BenchmarkDecide600(b *testing.B) {
	g, req := bench600(b, 0)
	sig := g.Fold(req)
	_, st := g.Decide(state{}, req, sig) // the stall of this history is reported once
	st.Notices = []notice{{echoNotice, 599, messageHash(req, 599), "x"}}
	b.ReportAllocs()
	for b.Loop() {
		g.Decide(st, req, sig)
	}
}
