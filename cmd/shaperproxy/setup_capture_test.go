package main

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"testing"

	"github.com/shaperproxy/shaperproxy/capture"
	"github.com/shaperproxy/shaperproxy/conv"
	"github.com/shaperproxy/shaperproxy/fixtures"
	"github.com/shaperproxy/shaperproxy/internal/config"
	"github.com/shaperproxy/shaperproxy/internal/fakeupstream"
	"github.com/shaperproxy/shaperproxy/sse"
)

// records reads the whole capture log of a rig.
func records(t *testing.T, r *rig) []capture.Record {
	t.Helper()
	if err := r.app.capture.Flush(); err != nil {
		t.Fatal(err)
	}
	rd, err := capture.OpenReader(filepath.Join(r.dataDir, capture.Dir))
	if err != nil {
		t.Fatal(err)
	}
	defer rd.Close()
	var out []capture.Record
	err = rd.Scan(func(l capture.Located) error {
		if l.Err != nil {
			t.Errorf("record at %s: %v", l.Pos, l.Err)
		}
		out = append(out, l.Record)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// TestCaptureStreamByteIdentical replays the real DeepSeek tool-call
// stream: the captured events are byte-identical to what the upstream
// sent and what the client received, in order, with times; the log
// rebuilds reasoning, content and tool calls exactly.
func TestCaptureStreamByteIdentical(t *testing.T) {
	exs, err := fixtures.Load("deepseek-reasoner_tool-call_stream.vercel-ai.chunks.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	ex := exs[0]
	r := newRig(t, nil)
	r.up.Push(fakeupstream.Response{Exchange: &ex})
	resp, err := http.Post(r.url+"/chat/completions", "application/json", bytes.NewReader(ex.RequestBody))
	if err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil || !bytes.Equal(got, ex.ResponseBody) {
		t.Fatalf("client body differs (%v)", err)
	}
	recs := records(t, r)
	var events []byte
	var last int64 = -1
	var reqRec *capture.Record
	asm := conv.NewAssembler()
	for i, rec := range recs {
		switch rec.Kind {
		case capture.KindRequest:
			reqRec = &recs[i]
		case capture.KindEvent:
			events = append(events, rec.Data...)
			if int64(rec.Offset) < last {
				t.Errorf("event %d offset went back", rec.Seq)
			}
			last = int64(rec.Offset)
			ev, err := sse.NewReader(bytes.NewReader(rec.Data)).Next()
			if err == nil && ev.HasData {
				_ = asm.AddChunk(ev.Data)
			}
		}
	}
	if reqRec == nil || !bytes.Equal(reqRec.Data, ex.RequestBody) || reqRec.Where != "upstream-wire" {
		t.Fatal("request not captured as sent")
	}
	if !bytes.Equal(events, ex.ResponseBody) {
		t.Fatalf("captured events differ from the upstream's bytes (%d vs %d)", len(events), len(ex.ResponseBody))
	}
	want := conv.NewAssembler()
	chunks, _ := fixtures.Chunks("deepseek-reasoner_tool-call_stream.vercel-ai.chunks.jsonl")
	for _, c := range chunks {
		_ = want.AddChunk(c)
	}
	g, w := asm.Response().Choices[0], want.Response().Choices[0]
	if g.Reasoning != w.Reasoning || g.Content != w.Content || len(g.ToolCalls) != 1 || g.ToolCalls[0] != w.ToolCalls[0] || w.Reasoning == "" {
		t.Fatalf("rebuilt response differs:\n%+v\n%+v", g, w)
	}
	// `capture show` gives the same, per field.
	var out bytes.Buffer
	dir := filepath.Join(r.dataDir, capture.Dir)
	if err := showCmd(&out, showOptions{captureOptions: captureOptions{Dir: dir, JSON: true}, Call: reqCall(recs)}); err != nil {
		t.Fatal(err)
	}
	var view callJSON
	if err := json.Unmarshal(out.Bytes(), &view); err != nil {
		t.Fatalf("show --json: %v\n%s", err, out.Bytes())
	}
	sc, wc := view.Response.Choices[0], w.ToolCalls[0]
	if sc.Reasoning != w.Reasoning || sc.Content != w.Content || sc.ToolCalls[0] != (toolCallJSON{wc.Index, wc.ID, wc.Type, wc.Name, wc.Arguments}) || sc.FinishReason != w.FinishReason || view.Response.Chunks != len(chunks) {
		t.Fatalf("capture show differs: %+v (%d chunks)", sc, view.Response.Chunks)
	}
}

func reqCall(recs []capture.Record) string {
	for _, r := range recs {
		if r.Kind == capture.KindRequest {
			return r.Call
		}
	}
	return ""
}

// TestCaptureCountsShapedBlocks: on a scripted conversation where the
// numbers are known, the request records carry the shaped and raw counts.
func TestCaptureCountsShapedBlocks(t *testing.T) {
	r := newRig(t, keepRecent)
	r.pushTurn("cfg", 3) // 4 requests: 0, 1, 2, 3 earlier steps in history
	turn(t, r.agent("sys"), "go")
	var shaped, raw []int
	for _, rec := range records(t, r) {
		if rec.Kind == capture.KindRequest {
			shaped = append(shaped, rec.ReasoningShaped)
			raw = append(raw, rec.ReasoningRaw)
		}
	}
	// Request k carries k earlier steps: the latest is kept raw, the rest
	// are longer than max_chars and get shaped.
	wantShaped, wantRaw := []int{0, 0, 1, 2}, []int{0, 1, 1, 1}
	if len(shaped) != 4 || !equal(shaped, wantShaped) || !equal(raw, wantRaw) {
		t.Fatalf("shaped %v raw %v, want %v %v", shaped, raw, wantShaped, wantRaw)
	}
}

func equal(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// TestCaptureRedactsSecrets: no key reaches a capture file.
func TestCaptureRedactsSecrets(t *testing.T) {
	r := newRig(t, nil)
	req, _ := http.NewRequest("POST", r.url+"/chat/completions?api_key=sk-query-secret-9", strings.NewReader(`{"model":"m","messages":[{"role":"user","content":"x"}]}`))
	req.Header.Set("Authorization", "Bearer sk-header-secret-7")
	req.Header.Set("X-Api-Key", "sk-other-secret-8")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	for _, rec := range records(t, r) {
		all := rec.URL + " " + strings.Join(flatten(rec.Header), " ")
		for _, secret := range []string{"sk-query-secret-9", "sk-header-secret-7", "sk-other-secret-8"} {
			if strings.Contains(all, secret) {
				t.Fatalf("%s reached the capture in a %s record", secret, rec.Kind)
			}
		}
		if rec.Kind == capture.KindRequest && !strings.Contains(rec.Header.Get("Authorization"), "REDACTED") {
			t.Fatalf("authorization not marked as redacted: %q", rec.Header.Get("Authorization"))
		}
	}
}

func flatten(h http.Header) []string {
	var out []string
	for k, vv := range h {
		out = append(out, k)
		out = append(out, vv...)
	}
	return out
}

// TestCaptureFullQueueNeverHoldsTraffic: with a queue of one record every
// request still succeeds at once; what the queue could not take is counted
// (in the writer's stats, /metrics and a drops record in the log).
func TestCaptureFullQueueNeverHoldsTraffic(t *testing.T) {
	r := newRig(t, func(c *config.Config) { c.Capture.Queue = 1 })
	for i := 0; i < 20; i++ {
		r.up.Push(fakeupstream.Response{Reply: &fakeupstream.Reply{Reasoning: strings.Repeat("r", 400), Content: "ok"}})
		body := []byte(`{"model":"m","stream":true,"messages":[{"role":"user","content":"q` + string(rune('a'+i)) + `"}]}`)
		if got := post(t, r.url, body); !bytes.Contains(got, []byte("[DONE]")) {
			t.Fatalf("request %d: %q", i, got)
		}
	}
	_ = r.app.capture.Flush()
	if st := r.app.capture.Stats(); st.Dropped == 0 {
		t.Fatalf("no record dropped with a queue of one: %+v", st)
	}
	resp, err := http.Get(strings.TrimSuffix(r.url, "/v1") + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	m, _ := io.ReadAll(resp.Body)
	if !bytes.Contains(m, []byte("shaperproxy_capture_dropped_total")) || bytes.Contains(m, []byte("shaperproxy_capture_dropped_total 0\n")) {
		t.Fatal("drops not exported")
	}
}
