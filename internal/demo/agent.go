package demo

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"

	"github.com/shaperproxy/shaperproxy/conv"
	"github.com/shaperproxy/shaperproxy/sse"
	"github.com/tidwall/sjson"
)

// Agent is a minimal agent tool: it keeps the whole history, re-sends it
// with every request (reasoning included, as DeepSeek requires across a
// tool loop), runs the tools the model calls, and loops until the model
// ends its turn. It speaks the OpenAI chat completions protocol with
// streaming, like the SDKs do.
type Agent struct {
	BaseURL string // e.g. http://127.0.0.1:8787/v1
	Model   string
	Client  *http.Client
	// Header is sent with every request (e.g. X-Shaper-Conversation).
	Header http.Header
	// Tools runs a tool call and returns its result.
	Tools func(name, args string) string
	// NonStream asks for whole responses instead of streams.
	NonStream bool
	// Effort, when set, is sent as "reasoning_effort".
	Effort string
	// ToolDefs, when set, is sent as "tools" (a raw JSON array).
	ToolDefs string
	// RawBodies keeps every response body as received in RawResponses.
	RawBodies    bool
	RawResponses [][]byte

	messages [][]byte
	lastBody []byte
}

// StepReport describes one request/response round of a turn.
type StepReport struct {
	Request  int // 1-based request number of the agent
	Messages int // messages sent
	Body     []byte
	Response conv.Response
	Status   int
}

// System adds a system message at the start of the history.
func (a *Agent) System(text string) {
	m, _ := sjson.SetBytes([]byte(`{"role":"system","content":""}`), "content", text)
	a.messages = append(a.messages, m)
}

// Turn sends a user message and runs the tool loop until the model
// stops. report is called after every step.
func (a *Agent) Turn(ctx context.Context, user string, report func(StepReport)) error {
	m, _ := sjson.SetBytes([]byte(`{"role":"user","content":""}`), "content", user)
	a.messages = append(a.messages, m)
	for step := 0; step < 16; step++ {
		rep, err := a.step(ctx)
		if err != nil {
			return err
		}
		report(rep)
		if rep.Status != http.StatusOK {
			return fmt.Errorf("upstream answered %d", rep.Status)
		}
		ch := firstChoice(rep.Response)
		a.messages = append(a.messages, assistantMessage(ch))
		if len(ch.ToolCalls) == 0 {
			return nil
		}
		for _, tc := range ch.ToolCalls {
			res, _ := sjson.SetBytes([]byte(`{"role":"tool","tool_call_id":"","content":""}`), "tool_call_id", tc.ID)
			res, _ = sjson.SetBytes(res, "content", a.Tools(tc.Name, tc.Arguments))
			a.messages = append(a.messages, res)
		}
	}
	return fmt.Errorf("turn did not end after 16 steps")
}

func (a *Agent) step(ctx context.Context) (StepReport, error) {
	body := a.requestBody()
	a.lastBody = body
	rep := StepReport{Messages: len(a.messages), Body: body}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, a.BaseURL+"/chat/completions", bytes.NewReader(body))
	if err != nil {
		return rep, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer sk-demo-not-a-real-key")
	for k, vv := range a.Header {
		req.Header[k] = vv
	}
	resp, err := a.Client.Do(req)
	if err != nil {
		return rep, err
	}
	defer resp.Body.Close()
	rep.Status = resp.StatusCode
	var src io.Reader = resp.Body
	if a.RawBodies {
		raw, err := io.ReadAll(resp.Body)
		if err != nil {
			return rep, err
		}
		a.RawResponses = append(a.RawResponses, raw)
		src = bytes.NewReader(raw)
	}
	if a.NonStream {
		body, err := io.ReadAll(src)
		if err != nil {
			return rep, err
		}
		asm := conv.NewAssembler()
		err = asm.AddBody(body)
		rep.Response = asm.Response()
		return rep, err
	}
	rep.Response, err = readStream(src)
	return rep, err
}

// LastBody returns the body of the agent's last request.
func (a *Agent) LastBody() []byte { return a.lastBody }

func (a *Agent) requestBody() []byte {
	body := []byte(`{"model":"","stream":true,"stream_options":{"include_usage":true},"messages":[]}`)
	if a.NonStream {
		body = []byte(`{"model":"","stream":false,"messages":[]}`)
	}
	body, _ = sjson.SetBytes(body, "model", a.Model)
	if a.Effort != "" {
		body, _ = sjson.SetBytes(body, "reasoning_effort", a.Effort)
	}
	if a.ToolDefs != "" {
		body, _ = sjson.SetRawBytes(body, "tools", []byte(a.ToolDefs))
	}
	msgs := append([]byte{'['}, bytes.Join(a.messages, []byte{','})...)
	body, _ = sjson.SetRawBytes(body, "messages", append(msgs, ']'))
	return body
}

// readStream assembles an SSE response with the conversation model.
func readStream(r io.Reader) (conv.Response, error) {
	asm := conv.NewAssembler()
	rd := sse.NewReader(r)
	for {
		ev, err := rd.Next()
		if ev.HasData && !ev.Partial {
			_ = asm.AddChunk(ev.Data)
		}
		if err == io.EOF {
			return asm.Response(), nil
		}
		if err != nil {
			return asm.Response(), err
		}
	}
}

func firstChoice(r conv.Response) conv.Choice {
	if len(r.Choices) == 0 {
		return conv.Choice{}
	}
	return r.Choices[0]
}

// assistantMessage is the history entry an agent tool writes for a step:
// content, the reasoning under the field it came in, and the tool calls.
func assistantMessage(ch conv.Choice) []byte {
	if ch.ReasoningField == "" {
		ch.ReasoningField = conv.ReasoningFields[0]
	}
	return ch.Message()
}
