package main

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/shaperproxy/shaperproxy/conv"
	"github.com/shaperproxy/shaperproxy/internal/config"
	"github.com/shaperproxy/shaperproxy/internal/demo"
	"github.com/shaperproxy/shaperproxy/internal/fakeupstream"
	"github.com/shaperproxy/shaperproxy/internal/review"
	"github.com/tidwall/sjson"
)

const (
	packetUpdate   = `{"role":"masked-review","status":"update","items":[{"kind":"possible_error","certainty":"likely","content":"The fix was never checked against cmd/report, which also calls ParseDate."}]}`
	packetNoUpdate = `{"role":"masked-review","status":"no_update"}`
	revised        = "Also checked cmd/report: it passes ISO dates, so the new layout fits it too."
)

// isChild and isContinuation recognise the review's own requests by
// their last message (later requests carry the restored notice inside).
func isChild(body []byte) bool {
	return strings.HasPrefix(lastMessage(body), "Automatic masked review, requested by the proxy")
}

func isContinuation(body []byte) bool {
	return strings.HasPrefix(lastMessage(body), "Automatic masked review by the proxy (not from the user)")
}

func lastMessage(body []byte) string {
	v, err := conv.ParseRequest(body)
	if err != nil || len(v.Messages) == 0 {
		return ""
	}
	return v.Messages[len(v.Messages)-1].Content
}

// chatAnswer is a non-stream chat completion whose content is text.
func chatAnswer(text string) fakeupstream.Response {
	body, _ := sjson.SetBytes([]byte(`{"id":"rv","object":"chat.completion","model":"deepseek-reasoner","choices":[{"index":0,"message":{"role":"assistant","content":""},"finish_reason":"stop"}]}`), "choices.0.message.content", text)
	return fakeupstream.Response{Status: 200, Body: body}
}

// reviewRig is a rig with the review on and an upstream that answers the
// child with packet and the continuation with cont.
type reviewRig struct {
	*rig
	children, continuations atomic.Int32
	childCtxDone            chan struct{}
}

func newReviewRig(t *testing.T, packet string, cont *fakeupstream.Reply, mod func(*config.Config)) *reviewRig {
	r := &reviewRig{childCtxDone: make(chan struct{}, 1)}
	r.rig = newRig(t, func(c *config.Config) {
		c.Review.Routes = []string{"default"}
		if mod != nil {
			mod(c)
		}
	})
	r.up.Handle(func(req fakeupstream.Recorded) (fakeupstream.Response, bool) {
		switch {
		case isChild(req.Body):
			r.children.Add(1)
			if packet == "stall" {
				return fakeupstream.Response{Status: 200, Body: []byte("{}"), Stall: 30 * time.Second}, true
			}
			if packet == "error" {
				return fakeupstream.ErrorResponse(500, "overloaded"), true
			}
			return chatAnswer(packet), true
		case isContinuation(req.Body):
			r.continuations.Add(1)
			return fakeupstream.Response{Reply: cont}, true
		}
		return fakeupstream.Response{}, false
	})
	return r
}

// toolTurn scripts a turn with one tool call, then the draft.
func (r *reviewRig) toolTurn(draft string) {
	r.up.Push(fakeupstream.Response{Reply: &fakeupstream.Reply{
		Reasoning: "SECRET-REASONING-ONE: read the file first.",
		ToolCalls: []fakeupstream.ToolCall{{Name: "read_file", Arguments: `{"path":"dates.go"}`}},
	}})
	r.up.Push(fakeupstream.Response{Reply: &fakeupstream.Reply{Reasoning: "SECRET-REASONING-TWO: the layout is wrong, fixed.", Content: draft}})
}

// collect runs one user turn and returns the agent's final answer.
func collect(t *testing.T, a *demo.Agent, user string) conv.Choice {
	t.Helper()
	var last conv.Choice
	err := a.Turn(context.Background(), user, func(rep demo.StepReport) {
		if len(rep.Response.Choices) > 0 {
			last = rep.Response.Choices[0]
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	return last
}

func TestReviewPublishesUpdate(t *testing.T) {
	for _, stream := range []bool{true, false} {
		r := newReviewRig(t, packetUpdate, &fakeupstream.Reply{Reasoning: "The reviewer is right; checking.", Content: revised}, nil)
		r.toolTurn("Fixed the layout.")
		a := r.agent("sys")
		a.NonStream = !stream
		got := collect(t, a, "fix ParseDate")
		want := review.MergedContent("Fixed the layout.", revised)
		if got.Content != want || got.FinishReason != "stop" {
			t.Fatalf("stream=%v: client got %q (%s), want %q", stream, got.Content, got.FinishReason, want)
		}
		if r.children.Load() != 1 || r.continuations.Load() != 1 {
			t.Fatalf("children %d, continuations %d", r.children.Load(), r.continuations.Load())
		}
		// The child holds no reasoning of the open turn and starts with the
		// primary's seed bytes.
		var child, primary []byte
		for _, rq := range r.up.Requests() {
			if isChild(rq.Body) {
				child = rq.Body
			} else if !isContinuation(rq.Body) {
				primary = rq.Body
			}
		}
		if bytes.Contains(child, []byte("SECRET-REASONING")) || !bytes.Contains(child, []byte("read_file")) || !bytes.Contains(child, []byte("Fixed the layout.")) {
			t.Fatalf("child snapshot: %s", child)
		}
		pv, cv := mustView(t, primary), mustView(t, child)
		for i := 0; i < 2; i++ { // system and nothing else before the open turn: the seed is the system message
			if i < len(cv.Messages) && cv.Messages[i].Role == "system" && !bytes.Equal(child[cv.Messages[i].Start:cv.Messages[i].End], primary[pv.Messages[i].Start:pv.Messages[i].End]) {
				t.Fatalf("seed message %d differs", i)
			}
		}
		// The next request restores draft, notice and continuation.
		r.up.Push(fakeupstream.Response{Reply: &fakeupstream.Reply{Content: "ok"}})
		collect(t, a, "thanks")
		reqs := r.up.Requests()
		next := mustView(t, reqs[len(reqs)-1].Body)
		roles := ""
		for _, m := range next.Messages {
			roles += m.Role[:1]
		}
		// s u a t a(draft) u(notice) a(continuation) u: deepseek-reasoner
		// resolves to the DeepSeek V4 profile, whose notice is a user
		// message (RENDERING.md §4.3).
		if !strings.HasSuffix(roles, "uatauau") {
			t.Fatalf("stream=%v: restored roles %q", stream, roles)
		}
		n := next.Messages[len(next.Messages)-3]
		if !strings.Contains(n.Content, "cmd/report") || next.Messages[len(next.Messages)-4].Content != "Fixed the layout." || next.Messages[len(next.Messages)-2].Content != revised {
			t.Fatalf("restored history wrong: %s", reqs[len(reqs)-1].Body)
		}
	}
}

func TestReviewContinuationWithToolCalls(t *testing.T) {
	r := newReviewRig(t, packetUpdate, &fakeupstream.Reply{Content: "Let me check.", ToolCalls: []fakeupstream.ToolCall{{Name: "grep", Arguments: `{"q":"ParseDate"}`}}}, nil)
	r.toolTurn("Fixed.")
	r.up.Push(fakeupstream.Response{Reply: &fakeupstream.Reply{Content: "cmd/report is fine."}})
	a := r.agent("sys")
	var reports []demo.StepReport
	if err := a.Turn(context.Background(), "fix it", func(rep demo.StepReport) { reports = append(reports, rep) }); err != nil {
		t.Fatal(err)
	}
	// draft+continuation came back as a tool call; the agent ran it and the turn went on.
	if len(reports) != 3 || reports[1].Response.Choices[0].FinishReason != "tool_calls" || reports[1].Response.Choices[0].ToolCalls[0].Name != "grep" {
		t.Fatalf("reports: %+v", reports)
	}
	if r.children.Load() != 1 {
		t.Fatalf("%d children: the second stop of the turn was reviewed again", r.children.Load())
	}
}

// TestReviewLeavesDraft: no_update, invalid packets and upstream errors
// leave the draft as the upstream sent it; observe-only never changes it.
func TestReviewLeavesDraft(t *testing.T) {
	cases := []struct {
		name, packet, policy string
	}{
		{"no_update", packetNoUpdate, "updates-only"},
		{"invalid", `{"role":"masked-review","status":"maybe"}`, "updates-only"},
		{"error", "error", "updates-only"},
		{"observe-only", packetUpdate, "observe-only"},
	}
	for _, tc := range cases {
		for _, stream := range []bool{true, false} {
			r := newReviewRig(t, tc.packet, &fakeupstream.Reply{Content: revised}, func(c *config.Config) { c.Review.Policy = review.Policy(tc.policy) })
			r.toolTurn("Fixed.")
			a := r.agent("sys")
			a.RawBodies, a.NonStream = true, !stream
			collect(t, a, "fix it")
			if r.children.Load() != 1 || r.continuations.Load() != 0 {
				t.Fatalf("%s stream=%v: children %d continuations %d", tc.name, stream, r.children.Load(), r.continuations.Load())
			}
			got := a.RawResponses[len(a.RawResponses)-1]
			want := upstreamEvents(t, r.rig, 1)
			if !bytes.Equal(got, want) || len(want) == 0 {
				t.Fatalf("%s stream=%v: client bytes differ from the upstream's draft:\n%q\n%q", tc.name, stream, got, want)
			}
		}
	}
}

// upstreamEvents returns the captured upstream events (or body) of the
// k-th primary call.
func upstreamEvents(t *testing.T, r *rig, k int) []byte {
	t.Helper()
	var calls []string
	byCall := map[string][]byte{}
	internal := map[string]bool{}
	for _, rec := range records(t, r) {
		switch rec.Kind.String() {
		case "request":
			if rec.Internal {
				internal[rec.Call] = true
			} else {
				calls = append(calls, rec.Call)
			}
		case "event", "body":
			byCall[rec.Call] = append(byCall[rec.Call], rec.Data...)
		}
	}
	return byCall[calls[k]]
}

func TestReviewSkips(t *testing.T) {
	t.Run("no tool in the turn", func(t *testing.T) {
		r := newReviewRig(t, packetUpdate, &fakeupstream.Reply{Content: revised}, nil)
		r.up.Push(fakeupstream.Response{Reply: &fakeupstream.Reply{Content: "hello"}})
		collect(t, r.agent("sys"), "hi")
		if r.children.Load() != 0 {
			t.Fatal("a turn without tools was reviewed")
		}
	})
	t.Run("all-turns scope", func(t *testing.T) {
		r := newReviewRig(t, packetNoUpdate, nil, func(c *config.Config) { c.Review.Scope = "all-turns" })
		r.up.Push(fakeupstream.Response{Reply: &fakeupstream.Reply{Content: "hello"}})
		collect(t, r.agent("sys"), "hi")
		if r.children.Load() != 1 {
			t.Fatal("all-turns did not review")
		}
	})
	t.Run("oversize", func(t *testing.T) {
		r := newReviewRig(t, packetUpdate, &fakeupstream.Reply{Content: revised}, func(c *config.Config) { c.Review.MaxSnapshotChars = 50 })
		r.toolTurn("Fixed.")
		got := collect(t, r.agent("sys"), "fix it")
		if r.children.Load() != 0 || got.Content != "Fixed." {
			t.Fatalf("oversize snapshot reviewed (%d) or draft changed: %q", r.children.Load(), got.Content)
		}
	})
	t.Run("opt-out header", func(t *testing.T) {
		r := newReviewRig(t, packetUpdate, &fakeupstream.Reply{Content: revised}, nil)
		r.toolTurn("Fixed.")
		a := r.agent("sys")
		a.Header = http.Header{"X-Shaper-Review": {"off"}}
		collect(t, a, "fix it")
		if r.children.Load() != 0 {
			t.Fatal("opted-out request reviewed")
		}
	})
	t.Run("timeout", func(t *testing.T) {
		r := newReviewRig(t, "stall", &fakeupstream.Reply{Content: revised}, func(c *config.Config) {
			c.Review.Timeout = 200 * time.Millisecond
		})
		r.toolTurn("Fixed.")
		got := collect(t, r.agent("sys"), "fix it")
		if got.Content != "Fixed." || r.continuations.Load() != 0 {
			t.Fatalf("timeout: draft changed to %q", got.Content)
		}
	})
}

// TestReviewOncePerTurnAcrossRestarts: the same turn is not reviewed
// twice, even by a new process on the same data directory.
func TestReviewOncePerTurnAcrossRestarts(t *testing.T) {
	r := newReviewRig(t, packetNoUpdate, nil, nil)
	r.toolTurn("Fixed.")
	a := r.agent("sys")
	collect(t, a, "fix it")
	if r.children.Load() != 1 {
		t.Fatal("not reviewed")
	}
	// The client sends the same stopping request again (a regenerate).
	body := a.LastBody()
	r.up.Push(fakeupstream.Response{Reply: &fakeupstream.Reply{Content: "Fixed again."}})
	post(t, r.url, body)
	if r.children.Load() != 1 {
		t.Fatal("second stop of the same turn reviewed")
	}
	// A restart: a new app on the same data directory.
	dir := r.dataDir
	r.app.Close()
	r2 := newReviewRig(t, packetNoUpdate, nil, func(c *config.Config) { c.DataDir = dir })
	r2.up.Push(fakeupstream.Response{Reply: &fakeupstream.Reply{Content: "Fixed a third time."}})
	post(t, r2.url, body)
	if r2.children.Load() != 0 {
		t.Fatal("the same turn was reviewed again after a restart")
	}
}

func post(t *testing.T, url string, body []byte) []byte {
	t.Helper()
	resp, err := http.Post(url+"/chat/completions", "application/json", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return b
}

// TestReviewCancelledWithClient: a client that leaves during the hold-back
// cancels the child request.
func TestReviewCancelledWithClient(t *testing.T) {
	r := newReviewRig(t, "stall", nil, nil)
	r.toolTurn("Fixed.")
	a := r.agent("sys")
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = a.Turn(ctx, "fix it", func(demo.StepReport) {})
	}()
	deadline := time.Now().Add(5 * time.Second)
	for r.children.Load() == 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if r.children.Load() == 0 {
		t.Fatal("no child request")
	}
	cancel()
	<-done
	// The child's upstream handler stalls 30 s unless its request is cancelled.
	deadline = time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		if ended := childEnded(t, r.rig); ended {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatal("the child request was not cancelled when the client left")
}

// childEnded reports whether the capture shows the internal call ended.
func childEnded(t *testing.T, r *rig) bool {
	internal := map[string]bool{}
	for _, rec := range records(t, r) {
		if rec.Internal && rec.Kind.String() == "request" {
			internal[rec.Call] = true
		}
		if internal[rec.Call] && rec.Kind.String() == "end" {
			return rec.Outcome != "complete"
		}
	}
	return false
}

// TestReviewKeepsTextOfTheFinishChunk: an upstream that sends the last
// piece of text in the chunk carrying finish_reason (vLLM, Gemini) loses
// nothing when a revision is published, and the later request is restored.
func TestReviewKeepsTextOfTheFinishChunk(t *testing.T) {
	r := newReviewRig(t, packetUpdate, &fakeupstream.Reply{Content: revised}, func(c *config.Config) { c.Review.Scope = "all-turns" })
	draft := "data: {\"id\":\"p\",\"object\":\"chat.completion.chunk\",\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"Hello \"},\"finish_reason\":null}]}\n\n" +
		"data: {\"id\":\"p\",\"object\":\"chat.completion.chunk\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"world.\"},\"finish_reason\":\"stop\"}]}\n\ndata: [DONE]\n\n"
	r.up.Push(fakeupstream.Response{Status: 200, ContentType: "text/event-stream", Body: []byte(draft)})
	got := collect(t, r.agent("sys"), "say hello")
	if want := review.MergedContent("Hello world.", revised); got.Content != want {
		t.Fatalf("client got %q, want %q", got.Content, want)
	}
}

// TestReviewSkipsSignedReasoning: a draft carrying signed reasoning
// (OpenRouter reasoning_details) is never revised: that would rewrite it.
func TestReviewSkipsSignedReasoning(t *testing.T) {
	r := newReviewRig(t, packetUpdate, &fakeupstream.Reply{Content: revised}, func(c *config.Config) { c.Review.Scope = "all-turns" })
	draft := "data: {\"id\":\"p\",\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"Hi.\",\"reasoning_details\":[{\"type\":\"reasoning.encrypted\",\"data\":\"gAAA\"}]},\"finish_reason\":null}]}\n\n" +
		"data: {\"id\":\"p\",\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}]}\n\ndata: [DONE]\n\n"
	r.up.Push(fakeupstream.Response{Status: 200, ContentType: "text/event-stream", Body: []byte(draft)})
	got := collect(t, r.agent("sys"), "hi")
	if got.Content != "Hi." || r.children.Load() != 0 {
		t.Fatalf("signed draft reviewed (%d children) or changed: %q", r.children.Load(), got.Content)
	}
}
