package reqshape

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"

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
