package capture

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"testing"

	"github.com/shaperproxy/shaperproxy/conv"
	"github.com/shaperproxy/shaperproxy/fixtures"
	"github.com/shaperproxy/shaperproxy/proxy"
	"github.com/tidwall/gjson"
)

// This package's tests check every carry the writer takes.
func init() { checkCarries = true }

// shapeReasoning edits as the shaper does: every reasoning string over
// 300 bytes becomes a short one, the same for the same message in every
// request (conv.Request.Apply, which writes a conversation's next edited
// body over the last one's).
func shapeReasoning(_ context.Context, call *proxy.Call, _ []byte) ([]byte, error) {
	var edits []conv.Edit
	for i, m := range call.View.Messages {
		if m.ReasoningStart >= 0 && m.ReasoningEnd-m.ReasoningStart > 300 {
			edits = append(edits, conv.QuoteString(fmt.Sprintf("shaped block %d", i)).Replace(m.ReasoningStart, m.ReasoningEnd))
		}
	}
	if len(edits) == 0 {
		return nil, nil
	}
	v, err := call.View.Apply(edits)
	if err != nil {
		return nil, err
	}
	call.SetView(v)
	return v.Body, nil
}

// seedRequest is a request of the first n of the seed's messages.
func seedRequest(messages []gjson.Result, n int) []byte {
	var b bytes.Buffer
	b.WriteString(`{"model":"deepseek-reasoner","messages":[`)
	for i, m := range messages[:n] {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(m.Raw)
	}
	b.WriteString(`],"stream":false}`)
	return b.Bytes()
}

// TestSpansCarried: a conversation's requests, each the last one's history
// and a few messages more, edited as the shaper edits them, go through
// the proxy to the capture. Each next request's body, as sent upstream
// and as the client sent it, repeats the last one's first bytes
// (conv.Request.Lineage): the writer takes the spans of those bytes and
// their blobs from the last one's carry instead of reading their messages
// again (checked against a whole reading in test binaries:
// checkCarried), and every record reads back as the bytes sent.
func TestSpansCarried(t *testing.T) {
	rig := newBodiesRig(t, proxy.RequestTransformFunc(shapeReasoning), func() bool { return false })
	messages := gjson.GetBytes(fixtures.SeedHistory(), "messages").Array()
	var sent [][]byte
	spans := 0
	for n := 200; n <= 260; n += 4 {
		body := seedRequest(messages, n)
		resp, err := http.Post(rig.url, "application/json", bytes.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		_ = resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("status %d", resp.StatusCode)
		}
		rig.ended(t)        // its records queued (the observers are told once the answer's first bytes are out)
		mustFlush(t, rig.w) // encoded: the bodies go back, the next edited one is written over this one's
		sent = append(sent, body)
		if n > 200 {
			spans += 2 * (n + 1) // each request's two records: messages and the array's members
		}
	}
	wire, client, got := rig.records(t)
	if len(wire) != len(sent) || len(client) != len(sent) || len(got) != len(sent) {
		t.Fatalf("%d wire and %d client records, the upstream read %d; want %d", len(wire), len(client), len(got), len(sent))
	}
	for i := range sent {
		if !bytes.Equal(client[i], sent[i]) {
			t.Fatalf("request %d: the client's record differs from what it sent", i)
		}
		if !bytes.Equal(wire[i], got[i]) {
			t.Fatalf("request %d: the wire record differs from what the upstream read", i)
		}
		if bytes.Equal(wire[i], sent[i]) {
			t.Fatalf("request %d went upstream unedited: the test checks edited bodies", i)
		}
	}
	// The messages every request after the first repeats: 200 of at
	// least 204, twice (wire and client).
	if carried := rig.w.carriedSpans.Load(); carried < int64(len(sent)-1)*2*190 {
		t.Fatalf("%d spans taken from a carry in %d requests after the first, want most of their %d", carried, len(sent)-1, spans)
	}
}

// TestSpanCarriesBounded: the carries keep the latest maxCarries bodies'
// spans, letting the oldest go past maxCarriedSpans spans; the body kept
// last is always found, and the scratch a replaced carry gives back is no
// carry's any more.
func TestSpanCarriesBounded(t *testing.T) {
	var s spanCarries
	for i := 1; i <= 3*maxCarries; i++ {
		n := 100 + (i%7)*5000
		scratch := s.keep(uint64(i), make([]span, n), make([]uint32, n))
		for _, c := range s.c {
			if cap(scratch) > 0 && cap(c.spans) > 0 && &scratch[:1][0] == &c.spans[:1][0] {
				t.Fatalf("body %d: the scratch given back is still a carry's", i)
			}
		}
		if c := s.find(uint64(i)); c == nil || len(c.spans) != n || len(c.ords) != n {
			t.Fatalf("body %d: not found as kept", i)
		}
		held := 0
		for _, c := range s.c {
			held += cap(c.spans)
		}
		if held != s.held {
			t.Fatalf("body %d: the carries hold %d spans, counted %d", i, held, s.held)
		}
		if held-n > maxCarriedSpans {
			t.Fatalf("body %d: %d spans held besides the latest's, over the bound %d", i, held-n, maxCarriedSpans)
		}
	}
	if s.find(1) != nil || s.find(0) != nil {
		t.Fatal("a body let go long ago (or no body) is still found")
	}
}
