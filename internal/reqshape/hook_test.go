package reqshape

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/shaperproxy/shaperproxy/fixtures"
	"github.com/shaperproxy/shaperproxy/internal/profile"
	"github.com/shaperproxy/shaperproxy/originals"
)

// TestFirstRequestBeside: a request with no assistant message goes out as
// it came (the very slice), and the shaper's work for it (the originals'
// new turn, the prints its conversation's next request finds a break
// against) is done beside the trip, not before: nothing is recorded until
// the work runs, and then what the request shaped at once records; a
// first request long enough to carry makes its carry once its answer is
// the client's (Call.After), neither before its trip nor beside it. A
// request with an assistant message is still shaped before its trip.
func TestFirstRequestBeside(t *testing.T) {
	newShaper := func() (*Shaper, *originals.Store, *originals.Writer) {
		st, err := originals.Open(filepath.Join(t.TempDir(), "originals.db"), originals.Options{})
		if err != nil {
			t.Fatal(err)
		}
		w := st.Async(16)
		t.Cleanup(func() { _ = w.Close(); _ = st.Close() })
		return NewShaper(DefaultConfig(), Options{Originals: w, Profiles: profile.NewTable(nil, map[string]string{"ds": "https://api.deepseek.com"})}), st, w
	}
	s, store, w := newShaper()
	ref, _, _ := newShaper()
	// An original left from an earlier turn of each conversation: the
	// new turn's beginning deletes it.
	left := func(conversation string) int {
		w.Flush()
		es, err := store.List(conversation)
		if err != nil {
			t.Fatal(err)
		}
		return len(es)
	}
	for i, body := range [][]byte{
		[]byte(`{"model":"deepseek-v4-flash","messages":[{"role":"system","content":"be brief"},{"role":"user","content":"hello"}]}`),
		[]byte(`{"model":"deepseek-v4-flash","messages":[{"role":"user","content":"one"},{"role":"user","content":"two"},{"role":"user","content":"three"}]}`),
	} {
		conversation := fmt.Sprint("first ", i)
		if err := store.Put([]originals.Entry{{Shaped: "s", Original: "o", Conversation: conversation, Turn: 0}}); err != nil {
			t.Fatal(err)
		}
		c := call(t, body, conversation)
		out, err := s.TransformRequest(context.Background(), c, body)
		if err != nil {
			t.Fatal(err)
		}
		if len(out) != len(body) || &out[0] != &body[0] {
			t.Fatalf("request %d: a request with no assistant message was not sent as it came", i)
		}
		if p, _ := s.history.state(conversation); p.msgs != nil {
			t.Fatalf("request %d: its prints were recorded before the request went upstream", i)
		}
		if left(conversation) != 1 {
			t.Fatalf("request %d: its turn began before the request went upstream", i)
		}
		c.RunBeside()
		c.RunAfter()
		got, _ := s.history.state(conversation)
		r := requestOf(call(t, body, conversation))
		if _, b := ref.shapeRequest(r); b != nil {
			ref.book(*b)
		}
		want, _ := ref.history.state(conversation)
		if got.msgs == nil || !samePrints(got, want) {
			t.Fatalf("request %d: beside the trip it recorded prints %v, at once %v", i, got.msgs, want.msgs)
		}
		if n := left(conversation); n != 0 {
			t.Fatalf("request %d: its turn did not begin beside the trip (%d originals of the earlier turn left)", i, n)
		}
	}
	// A long one makes its carry beside the trip too (book), not before.
	long := []byte(`{"model":"deepseek-v4-flash","messages":[`)
	for i := range minCarried + 1 {
		if i > 0 {
			long = append(long, ',')
		}
		long = fmt.Appendf(long, `{"role":"user","content":"message %d"}`, i)
	}
	long = append(long, "]}"...)
	if before, beside, after := carryMade(t, s, long, "long"); before || beside || !after {
		t.Fatalf("a long first request's carry: before the request went upstream %v, beside its trip %v, after its answer %v", before, beside, after)
	}
	// With an assistant message, the prints are recorded before the trip.
	body := []byte(`{"model":"deepseek-v4-flash","messages":[{"role":"user","content":"hi"},{"role":"assistant","content":"yes","reasoning_content":"Let me think. The answer is yes."},{"role":"user","content":"and?"}]}`)
	c := call(t, body, "later")
	if _, err := s.TransformRequest(context.Background(), c, body); err != nil {
		t.Fatal(err)
	}
	if p, _ := s.history.state("later"); p.msgs == nil {
		t.Fatal("a request with an assistant message had its prints left for later")
	}
	c.RunBeside()
	c.RunAfter()
}

// TestShaperCounts: the blocks each request sends, shaped and raw and by
// why, are counted once its answer is the client's (Call.After), per
// route, and only the reasons that occur get a series.
// Under the cache-aware policy the later requests take the blocks of the
// history they repeat as the carry decided them (settled.go), and count
// them all the same.
func TestShaperCounts(t *testing.T) {
	for _, policy := range []Policy{PolicyKeepRecent, PolicyCacheAware} {
		t.Run(string(policy), func(t *testing.T) { testShaperCounts(t, policy) })
	}
}

func testShaperCounts(t *testing.T, policy Policy) {
	cfg := DefaultConfig()
	cfg.Policy = policy // keep-recent: the old blocks shaped, the latest raw: both counted
	s := NewShaper(cfg, Options{Profiles: profile.NewTable(nil, map[string]string{"ds": "https://api.deepseek.com"})})
	body := fixtures.AgentHistory(40, 700, 200)
	var shaped, raw int
	for i := range 3 {
		if policy == PolicyCacheAware && i > 0 && s.carries.get("counted", 0).decided() == nil {
			t.Fatalf("request %d: no decisions carried from the one before: the test checks nothing taken", i)
		}
		c := call(t, body, "counted")
		if _, err := s.TransformRequest(context.Background(), c, body); err != nil {
			t.Fatal(err)
		}
		c.RunBeside()
		if got := seriesOf(s.blocks)[[2]string{"ds", "shaped"}]; got != float64(shaped) {
			t.Fatalf("request %d: counted before its answer (%v shaped blocks, want %d)", i, got, shaped)
		}
		c.RunAfter()
		shaped, raw = shaped+c.Reasoning.Shaped, raw+c.Reasoning.Raw
		if c.Reasoning.Raw == 0 || c.Reasoning.Shaped == 0 && policy == PolicyKeepRecent {
			t.Fatalf("request %d: the history should have both shaped and raw blocks (%+v)", i, c.Reasoning)
		}
		blocks := seriesOf(s.blocks)
		if got, want := blocks[[2]string{"ds", "shaped"}], float64(shaped); got != want {
			t.Fatalf("request %d: %v shaped blocks counted, want %v", i, got, want)
		}
		if got, want := blocks[[2]string{"ds", "raw"}], float64(raw); got != want {
			t.Fatalf("request %d: %v raw blocks counted, want %v", i, got, want)
		}
		decisions := seriesOf(s.decisions)
		var decided float64
		for _, v := range decisions {
			decided += v
		}
		if decided != float64(shaped+raw) {
			t.Fatalf("request %d: %v decisions counted, want %d", i, decided, shaped+raw)
		}
		if len(decisions) == 0 || len(decisions) == len(blockReasons) && policy == PolicyKeepRecent {
			t.Fatalf("request %d: %d series of decisions, where this history has some reasons, not all", i, len(decisions))
		}
	}
}

// seriesOf reads every series of a vector of counters with two labels.
func seriesOf(c prometheus.Collector) map[[2]string]float64 {
	ch := make(chan prometheus.Metric, 64)
	go func() { c.Collect(ch); close(ch) }()
	out := map[[2]string]float64{}
	for m := range ch {
		var d dto.Metric
		if err := m.Write(&d); err != nil || len(d.GetLabel()) != 2 {
			continue
		}
		out[[2]string{d.GetLabel()[0].GetValue(), d.GetLabel()[1].GetValue()}] = d.GetCounter().GetValue()
	}
	return out
}
