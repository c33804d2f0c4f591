package proxy

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/shaperproxy/shaperproxy/conv"
)

// TestPiecedBodies: a large body a transform edited (conv.Request.Apply)
// goes upstream as its pieces, the client's body and the replacements
// (one writev), and the upstream gets exactly the edited body: random
// edits of the messages' contents, longer, shorter, emptied and at the
// ends of their strings, over a growing conversation, some bodies under
// the size that has pieces.
func TestPiecedBodies(t *testing.T) {
	var mu sync.Mutex
	var got [][]byte
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		got = append(got, b)
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"choices":[{"index":0,"message":{"role":"assistant","content":"ok"},"finish_reason":"stop"}]}`)
	}))
	defer up.Close()
	rng := rand.New(rand.NewPCG(15, 4))
	var want [][]byte // the edited bodies, as the transform made them
	edit := RequestTransformFunc(func(_ context.Context, call *Call, body []byte) ([]byte, error) {
		var edits []conv.Edit
		for _, m := range call.View.Messages {
			if m.ContentEnd-m.ContentStart < 4 || rng.IntN(3) == 0 {
				continue
			}
			s, e := m.ContentStart+1, m.ContentEnd-1 // inside the quotes
			switch rng.IntN(4) {
			case 0: // the string's first bytes
				e = s + rng.IntN(e-s)
			case 1: // its last
				s = e - rng.IntN(e-s)
			case 2: // an insertion
				s = s + rng.IntN(e-s)
				e = s
			}
			edits = append(edits, conv.Edit{Start: s, End: e, Repl: []byte(strings.Repeat("~", rng.IntN(3)*rng.IntN(200)))})
		}
		v, err := call.View.Apply(edits)
		if err != nil {
			return nil, err
		}
		call.SetView(v)
		mu.Lock()
		want = append(want, bytes.Clone(v.Body))
		mu.Unlock()
		return v.Body, nil
	})
	_, srv := newTestProxy(t, up.URL, func(o *Options) { o.Transforms = []RequestTransform{edit} })
	before := piecedBodies.Load()
	msgs := []string{`{"role":"system","content":"be brief"}`}
	large := 0
	for i := range 40 {
		msgs = append(msgs, fmt.Sprintf(`{"role":"user","content":"question %d %s"}`, i, strings.Repeat("q", rng.IntN(8000))),
			fmt.Sprintf(`{"role":"assistant","content":"answer %d %s"}`, i, strings.Repeat("a", rng.IntN(8000))))
		body := []byte(`{"model":"m","messages":[` + strings.Join(msgs, ",") + `]}`)
		resp, _ := do(t, http.DefaultClient, http.MethodPost, srv.URL+"/v1/chat/completions", body, nil)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("request %d: status %d", i, resp.StatusCode)
		}
		mu.Lock()
		last, edited, ran := got[len(got)-1], want[len(want)-1], len(want)
		mu.Unlock()
		if ran != i+1 {
			t.Fatalf("request %d: the transform ran %d times", i, ran)
		}
		if !bytes.Equal(last, edited) {
			n := 0
			for n < len(last) && n < len(edited) && last[n] == edited[n] {
				n++
			}
			t.Fatalf("request %d: the upstream got %d bytes, differing from the edited body's %d at byte %d", i, len(last), len(edited), n)
		}
		if len(edited) >= 64<<10 && !bytes.Equal(edited, body) {
			large++
		}
	}
	if large < 20 {
		t.Fatalf("%d large edited bodies: the test checked little", large)
	}
	if n := piecedBodies.Load() - before; n != int64(large) {
		t.Fatalf("%d bodies written from their pieces, want the %d large edited ones", n, large)
	}
}
