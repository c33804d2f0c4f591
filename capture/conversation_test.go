package capture

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"
)

// TestAgentConversationStorage writes a 600-request agent conversation
// whose history grows with every request (as agents re-send it), with a
// streamed response per request, and checks that the log grows with the
// new content only: bytes on disk at most 5% of the raw bytes, and every
// request rebuilt byte for byte.
func TestAgentConversationStorage(t *testing.T) {
	if testing.Short() {
		t.Skip("writes and reads back ~270 MB of requests")
	}
	const requests = 600
	w, dir := openTest(t, Options{QueueSize: 1 << 16, QueueBytes: 1 << 40})
	conv := newConversation(42)
	rng := rand.New(rand.NewPCG(7, 7))
	var rawRequests int64
	var lastBody []byte
	start := time.Now()
	for i := range requests {
		call := fmt.Sprintf("call-%04d", i)
		body := conv.next(i)
		lastBody = body
		rawRequests += int64(len(body))
		enqueue(t, w, Record{Kind: KindRequest, Call: call, Route: "deepseek", Model: "deepseek-reasoner", Stream: true,
			Header: testHeader(), Data: body, ReasoningShaped: i * 9 / 10, ReasoningRaw: i - i*9/10})
		enqueue(t, w, Record{Kind: KindResponse, Call: call, Status: 200})
		for j := range 60 {
			enqueue(t, w, Record{Kind: KindEvent, Call: call, Seq: j, Data: sseEvent(rng, call)})
		}
		enqueue(t, w, Record{Kind: KindEnd, Call: call, Outcome: "complete", Events: 60})
		if i%50 == 0 {
			mustFlush(t, w) // frames as a proxy with pauses would write them
		}
	}
	mustFlush(t, w)
	writeTime := time.Since(start)
	st := w.Stats()
	ratio := float64(st.BytesOnDisk) / float64(st.BytesRaw)
	t.Logf("raw requests %.1f MB, raw total %.1f MB, on disk %.2f MB (%.2f%%), %d segments, written in %v",
		float64(rawRequests)/1e6, float64(st.BytesRaw)/1e6, float64(st.BytesOnDisk)/1e6, 100*ratio, st.Segments, writeTime)
	if rawRequests < 250e6 {
		t.Fatalf("raw request bytes %d, want >= 250 MB", rawRequests)
	}
	if ratio > 0.05 {
		t.Errorf("on disk %.2f%% of raw, want <= 5%%", 100*ratio)
	}

	start = time.Now()
	r := openReaderTest(t, dir)
	check := newConversation(42)
	n := 0
	err := r.Scan(func(l Located) error {
		if l.Record.Kind != KindRequest {
			return nil
		}
		want := check.next(n)
		if l.Err != nil || !bytes.Equal(l.Record.Data, want) {
			return fmt.Errorf("request %d: rebuilt %d bytes (err %v), want %d", n, len(l.Record.Data), l.Err, len(want))
		}
		n++
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if n != requests {
		t.Fatalf("read %d requests, want %d", n, requests)
	}
	t.Logf("read back and compared in %v", time.Since(start))

	// The last request found from the tail is rebuilt as well.
	last, err := r.Tail(1, Filter{Kinds: []Kind{KindRequest}})
	if err != nil || len(last) != 1 || last[0].Err != nil || !bytes.Equal(last[0].Record.Data, lastBody) {
		t.Fatalf("tail: %d records, %v", len(last), err)
	}
}

func enqueue(t testing.TB, w *Writer, r Record) {
	t.Helper()
	if !w.Enqueue(r) {
		t.Fatalf("Enqueue refused (%+v)", w.Stats())
	}
}
