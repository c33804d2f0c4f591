package main

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/shaperproxy/shaperproxy/conv"
	"github.com/shaperproxy/shaperproxy/fixtures"
	"github.com/shaperproxy/shaperproxy/internal/config"
	"github.com/shaperproxy/shaperproxy/internal/demo"
	"github.com/shaperproxy/shaperproxy/internal/fakeupstream"
	"github.com/shaperproxy/shaperproxy/internal/reqshape"
	"github.com/shaperproxy/shaperproxy/originals"
	"github.com/tidwall/sjson"
)

// reasoning returns a long reasoning text with filler and a decision.
func reasoning(topic string) string {
	return "Hmm, let me think about " + topic + ". Wait, I am not sure the file exists. " +
		"Let me reconsider the whole thing from the start, step by step, carefully. " +
		"Actually the error message mentions " + topic + " twice, which is odd. " +
		"Okay so maybe the path is relative. " +
		"So the fix is to resolve " + topic + " against the module root."
}

type rig struct {
	up      *fakeupstream.Server
	app     *stack
	url     string
	dataDir string
}

func newRig(t *testing.T, mod func(*config.Config)) *rig {
	t.Helper()
	r := &rig{up: fakeupstream.New()}
	upURL, closeUp, err := r.up.Start("")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(closeUp)
	c := config.Default()
	c.DataDir = t.TempDir()
	c.Routes = c.WithDefaultRoute(upURL)
	if mod != nil {
		mod(&c)
	}
	r.dataDir = c.DataDir
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	if r.app, err = build(c, slog.New(slog.DiscardHandler)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.app.Close() })
	srv := httptest.NewServer(r.app)
	t.Cleanup(srv.Close)
	r.url = srv.URL + "/v1"
	return r
}

func (r *rig) agent(system string) *demo.Agent {
	a := &demo.Agent{BaseURL: r.url, Model: "deepseek-reasoner", Client: &http.Client{Timeout: 20 * time.Second},
		Tools: func(name, args string) string { return "ok: " + name }}
	a.System(system)
	return a
}

// pushTurn scripts one turn: steps tool-call replies, then a final answer.
func (r *rig) pushTurn(topic string, steps int) {
	for i := 0; i < steps; i++ {
		r.up.Push(fakeupstream.Response{Reply: &fakeupstream.Reply{
			Reasoning: reasoning(topic + string(rune('A'+i))),
			ToolCalls: []fakeupstream.ToolCall{{Name: "read_file", Arguments: `{"path":"x"}`}},
		}})
	}
	r.up.Push(fakeupstream.Response{Reply: &fakeupstream.Reply{Reasoning: reasoning(topic + " final"), Content: "done"}})
}

func turn(t *testing.T, a *demo.Agent, user string) {
	t.Helper()
	if err := a.Turn(context.Background(), user, func(demo.StepReport) {}); err != nil {
		t.Fatal(err)
	}
}

// keepRecent selects the keep-recent shaping policy (every step but the
// latest shaped), whose effects these tests count; the default policy is
// tested in internal/reqshape and setup_profiles_test.go.
func keepRecent(c *config.Config) { c.Shaping.Policy = reqshape.PolicyKeepRecent }

// TestShapingThroughProxy: the upstream receives shaped history without a
// marker, the same block is shaped to the same bytes in every later
// request, the originals table gives the original back, and a new turn
// clears only its own conversation.
func TestShapingThroughProxy(t *testing.T) {
	r := newRig(t, keepRecent)
	main, sub := r.agent("You are the main agent."), r.agent("You are a sub-agent that greps.")
	r.pushTurn("config", 3)
	turn(t, main, "fix the config loader")
	r.pushTurn("grep", 2)
	turn(t, sub, "find uses of LoadConfig")

	reqs := r.up.Requests()
	first := map[string]string{} // original reasoning -> the shaped text first sent for it
	shapedSeen := 0
	for _, rq := range reqs {
		v, err := conv.ParseRequest(rq.Body)
		if err != nil {
			t.Fatal(err)
		}
		last := v.LastAssistant()
		for _, m := range v.Messages {
			if m.Role != "assistant" || m.Reasoning == "" {
				continue
			}
			if strings.Contains(m.Reasoning, "[reasoning extract") || strings.Contains(m.Reasoning, "omitted") {
				t.Fatalf("marker in outgoing reasoning: %q", m.Reasoning)
			}
			isOriginal := isScripted(m.Reasoning)
			if m.Index == last {
				if !isOriginal {
					t.Errorf("latest step was shaped: %q", m.Reasoning)
				}
				continue
			}
			if isOriginal {
				t.Errorf("old step went out unshaped: %q", m.Reasoning)
				continue
			}
			shapedSeen++
			// The same block (same position) must go out as the same bytes in every later request.
			key := rq.Path + string(rune(m.Index)) + conv.ConversationKey(v, "")
			if prev, ok := first[key]; ok && prev != m.Reasoning {
				t.Errorf("same block shaped differently in a later request: %q vs %q", prev, m.Reasoning)
			}
			first[key] = m.Reasoning
		}
	}
	if shapedSeen < 3 {
		t.Fatalf("only %d shaped blocks seen", shapedSeen)
	}
	// Every shaped block of each conversation's current turn looks up to its original.
	r.app.originals.Flush()
	for _, rq := range []fakeupstream.Recorded{reqs[3], reqs[len(reqs)-1]} {
		v := mustView(t, rq.Body)
		for _, m := range v.Messages[:v.LastAssistant()] {
			if m.Role != "assistant" || isScripted(m.Reasoning) {
				continue
			}
			got, err := r.app.store.Lookup(m.Reasoning)
			if err != nil || len(got) != 1 || !strings.HasSuffix(got[0].Original, "against the module root.") || isScripted(got[0].Shaped) {
				t.Fatalf("lookup of %q: %v, %+v", m.Reasoning, err, got)
			}
		}
	}
	mainKey := conv.ConversationKey(mustView(t, reqs[0].Body), "")
	subKey := conv.ConversationKey(mustView(t, reqs[len(reqs)-1].Body), "")
	if n := len(list(t, r, mainKey)); n == 0 {
		t.Fatal("main conversation has no originals")
	}
	subBefore := list(t, r, subKey)
	if len(subBefore) == 0 {
		t.Fatal("sub conversation has no originals")
	}
	// The next user message of the main conversation clears its earlier turn.
	r.up.Push(fakeupstream.Response{Reply: &fakeupstream.Reply{Reasoning: "short", Content: "ok"}})
	turn(t, main, "thanks, and the tests?")
	if n := len(list(t, r, mainKey)); n != 0 {
		t.Errorf("%d entries of the earlier turn survived the new turn", n)
	}
	if after := list(t, r, subKey); len(after) != len(subBefore) {
		t.Errorf("the sub-agent's entries changed: %d -> %d", len(subBefore), len(after))
	}
}

// isScripted reports whether s is a reasoning text as the upstream sent
// it (longer than max_chars = 240), not a shaped one.
func isScripted(s string) bool { return len([]rune(s)) > 240 }

// shapedBlocks counts the assistant reasoning blocks of body that went out
// shaped.
func shapedBlocks(t *testing.T, body []byte) int {
	n := 0
	for _, m := range mustView(t, body).Messages {
		if m.Role == "assistant" && m.Reasoning != "" && !isScripted(m.Reasoning) {
			n++
		}
	}
	return n
}

func mustView(t *testing.T, b []byte) *conv.Request {
	v, err := conv.ParseRequest(b)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func list(t *testing.T, r *rig, key string) []originals.Entry {
	t.Helper()
	r.app.originals.Flush()
	es, err := r.app.store.List(key)
	if err != nil {
		t.Fatal(err)
	}
	return es
}

// TestBreaker: an upstream that rejects shaped requests sees exactly one
// unshaped retry, then unshaped requests until the cool-down ends; the
// client always sees success.
func TestBreaker(t *testing.T) {
	r := newRig(t, func(c *config.Config) {
		keepRecent(c)
		c.Shaping.Breaker.Cooldown = 400 * time.Millisecond
	})
	r.up.Handle(func(req fakeupstream.Recorded) (fakeupstream.Response, bool) {
		if shapedBlocks(t, req.Body) > 0 {
			return fakeupstream.ErrorResponse(400, "Missing `reasoning_content` field in the assistant message at message index 1"), true
		}
		return fakeupstream.Response{}, false // unshaped: answer from the queue
	})
	r.pushTurn("db", 3)
	a := r.agent("sys")
	// The agent sends 4 requests. #1 has no history and #2 only the latest
	// step (kept raw); #3 is the first with an old step: shaped, rejected,
	// retried unshaped; #4 goes out unshaped while shaping is paused.
	turn(t, a, "migrate the db")
	reqs := r.up.Requests()
	if len(reqs) != 5 {
		t.Fatalf("upstream saw %d requests, want 5 (4 + one retry)", len(reqs))
	}
	shaped := func(b []byte) bool { return shapedBlocks(t, b) > 0 }
	if shaped(reqs[1].Body) || !shaped(reqs[2].Body) || shaped(reqs[3].Body) || shaped(reqs[4].Body) {
		t.Fatalf("want raw, shaped (rejected), retry unshaped, unshaped while paused: %v %v %v %v", shaped(reqs[1].Body), shaped(reqs[2].Body), shaped(reqs[3].Body), shaped(reqs[4].Body))
	}
	time.Sleep(450 * time.Millisecond)
	r.up.Handle(nil)
	r.pushTurn("db2", 1)
	turn(t, a, "next")
	reqs = r.up.Requests()
	if !shaped(reqs[len(reqs)-1].Body) {
		t.Fatal("shaping did not resume after the cool-down")
	}
}

// TestSeedResent: the seed's request (631 messages, as the cost section
// sends it) through the default configuration, three times: it goes up
// shorter than it came (its history's reasoning outside the rendered
// prompt, cut) and still a chat request, and the same bytes every time,
// so a provider's cached prefix holds. `go test -run TestSeedResent -v
// ./cmd/shaperproxy` prints the sizes.
func TestSeedResent(t *testing.T) {
	body, _ := sjson.SetBytes(fixtures.SeedHistory(), "stream", false)
	r := newRig(t, nil)
	for range 3 {
		resp, err := http.Post(r.url+"/v1/chat/completions", "application/json", bytes.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	got := r.up.Requests()
	if len(got) != 3 {
		t.Fatalf("the upstream got %d requests, want 3", len(got))
	}
	t.Logf("the seed's request: %d bytes from the client, %d upstream", len(body), len(got[0].Body))
	if len(got[0].Body) >= len(body) {
		t.Fatalf("the seed went up %d bytes, not shorter than its %d", len(got[0].Body), len(body))
	}
	if v := mustView(t, got[0].Body); len(v.Messages) != 631 {
		t.Fatalf("the shaped request has %d messages, want 631", len(v.Messages))
	}
	for i := 1; i < len(got); i++ {
		if !bytes.Equal(got[i].Body, got[0].Body) {
			t.Fatalf("request %d went up other bytes than the first (%d against %d bytes)", i+1, len(got[i].Body), len(got[0].Body))
		}
	}
}
