package demo

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/shaperproxy/shaperproxy/conv"
	"github.com/shaperproxy/shaperproxy/internal/fakeupstream"
	"github.com/tidwall/gjson"
	"github.com/tidwall/sjson"
)

// The deliberation the demo shows: an agent that declares a tool asks,
// through the deliberate tool the proxy adds, for an audit of its plan and
// an independent alternative before it commits.
const (
	deliberationArgs = `{"goal":"choose how to make ParseDate accept both date formats","incumbent":"Try the ISO layout first, then fall back to the old layout.",` +
		`"context":"Go project; ParseDate is called from cmd/report and cmd/import.","branches":[{"role":"trajectory-audit"},{"role":"independent-alternative"}]}`
	auditPrefix       = "Trajectory audit, requested by the proxy"
	alternativePrefix = "Independent second opinion, requested by the proxy"
	auditPacket       = `{"role":"trajectory-audit","status":"update","items":[{"kind":"possible_error","certainty":"likely","content":"A fallback hides malformed dates as the old format; log which layout matched."}]}`
	alternativePacket = `{"role":"independent-alternative","status":"update","items":[{"kind":"suggestion","certainty":"likely","content":"Detect the format by its separator before parsing instead of trying both."}]}`
	deliberatedAnswer = "I'll detect the format by its separator and log which layout matched."
)

// deliberateAnswers answers the deliberate tool's branches by role. The
// branches arrive in parallel, on the upstream's handler goroutines.
func deliberateAnswers(res *Result) func(fakeupstream.Recorded) (fakeupstream.Response, bool) {
	var mu sync.Mutex
	return func(r fakeupstream.Recorded) (fakeupstream.Response, bool) {
		last := lastContent(r.Body)
		packet := ""
		switch {
		case strings.HasPrefix(last, auditPrefix):
			packet = auditPacket
		case strings.HasPrefix(last, alternativePrefix):
			packet = alternativePacket
		default:
			return fakeupstream.Response{}, false
		}
		mu.Lock()
		res.Branches++
		mu.Unlock()
		body, _ := sjson.SetBytes([]byte(`{"id":"branch","object":"chat.completion","model":"deepseek-reasoner","choices":[{"index":0,"message":{"role":"assistant","content":""},"finish_reason":"stop"}]}`), "choices.0.message.content", packet)
		return fakeupstream.Response{Status: 200, Body: body}, true
	}
}

// showDeliberate runs an agent whose model calls deliberate alone: the
// proxy runs the branches, streams the model's continuation into the same
// response, and puts the hidden call and result back in the next request.
func showDeliberate(ctx context.Context, out io.Writer, up *fakeupstream.Server, pxURL, conversation string, res *Result) error {
	up.Push(fakeupstream.Response{Reply: &fakeupstream.Reply{
		Reasoning: "Two ways to accept both formats; a second opinion is worth it before I change a shared parser.",
		ToolCalls: []fakeupstream.ToolCall{{ID: "call_deliberate_demo", Name: "deliberate", Arguments: deliberationArgs}},
	}})
	up.Push(fakeupstream.Response{Reply: &fakeupstream.Reply{Reasoning: "The audit and the alternative agree on detecting the format.", Content: deliberatedAnswer}})
	up.Push(fakeupstream.Response{Reply: &fakeupstream.Reply{Content: "Done."}})
	a := &Agent{BaseURL: pxURL + "/v1", Model: "deepseek-reasoner", Client: &http.Client{Timeout: 30 * time.Second}, RawBodies: true,
		Header:   http.Header{"X-Shaper-Review": {"off"}, "X-Shaper-Conversation": {conversation}},
		ToolDefs: `[{"type":"function","function":{"name":"read_file","parameters":{"type":"object","properties":{"path":{"type":"string"}}}}}]`,
		Tools:    func(string, string) string { return "" }}
	a.System("You are a coding agent.")
	before := len(up.Requests())
	var answer string
	if err := a.Turn(ctx, "ParseDate must accept 2024-03-05 and 05.03.2024. Plan it first.", func(r StepReport) {
		answer = firstChoice(r.Response).Content
	}); err != nil {
		return err
	}
	if err := a.Turn(ctx, "Go ahead.", func(StepReport) {}); err != nil {
		return err
	}
	reqs := up.Requests()[before:]
	fmt.Fprintf(out, "\n── deliberate: the proxy added the tool to a request that declared tools; the model called it\n")
	for _, r := range reqs {
		switch last := lastContent(r.Body); {
		case strings.HasPrefix(last, auditPrefix):
			fmt.Fprintf(out, "  branch trajectory-audit: %d messages (the whole conversation, then the plan to audit)\n", len(mustMessages(r.Body)))
		case strings.HasPrefix(last, alternativePrefix):
			fmt.Fprintf(out, "  branch independent-alternative: %d message (the goal and context only)\n", len(mustMessages(r.Body)))
		}
	}
	for _, raw := range a.RawResponses {
		if bytes.Contains(raw, []byte("deliberate")) {
			res.DeliberateSeen = true
		}
	}
	fmt.Fprintf(out, "  the client got, in the same response: %q (the deliberate call in any byte it received: %v)\n", answer, res.DeliberateSeen)
	if result, ok := hiddenResult(reqs[len(reqs)-1].Body); ok {
		res.DeliberateRestored = true
		fmt.Fprintf(out, "  the next request carried the hidden call and its result back:\n    %s\n", clip(result, 300))
	}
	return nil
}

// hiddenResult returns the deliberate tool result a request carries.
func hiddenResult(body []byte) (string, bool) {
	v, err := conv.ParseRequest(body)
	if err != nil {
		return "", false
	}
	for _, m := range v.Messages {
		if m.Role == "tool" && m.ToolCallID == "call_deliberate_demo" && gjson.Get(m.Content, "branches").IsArray() {
			return m.Content, true
		}
	}
	return "", false
}

func mustMessages(body []byte) []conv.Message {
	v, err := conv.ParseRequest(body)
	if err != nil {
		return nil
	}
	return v.Messages
}
