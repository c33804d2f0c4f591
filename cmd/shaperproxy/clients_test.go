package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/shared"
)

// The real client libraries behind the proxy with the deliberate tool on:
// they see ordinary responses (the accumulators accept every chunk, no
// deliberate call, the continuation in the same message).

func newClient(r *deliberateRig) openai.Client {
	return openai.NewClient(option.WithBaseURL(r.url+"/"), option.WithAPIKey("sk-test-not-a-key"), option.WithMaxRetries(0))
}

func clientParams() openai.ChatCompletionNewParams {
	return openai.ChatCompletionNewParams{
		Model: "deepseek-reasoner",
		Messages: []openai.ChatCompletionMessageParamUnion{
			openai.SystemMessage("You are a coding agent."),
			openai.UserMessage("fix the date test"),
		},
		Tools: []openai.ChatCompletionToolUnionParam{openai.ChatCompletionFunctionTool(shared.FunctionDefinitionParam{
			Name: "read_file", Parameters: shared.FunctionParameters{"type": "object", "properties": map[string]any{"path": map[string]any{"type": "string"}}},
		})},
	}
}

func TestOpenAIGoClient(t *testing.T) {
	for _, stream := range []bool{true, false} {
		r := newDeliberateRig(t, packetFor, nil)
		r.scriptStep3(deliberateArgs, false)
		client := newClient(r)
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		var msg openai.ChatCompletionMessage
		var finish string
		if stream {
			s := client.Chat.Completions.NewStreaming(ctx, clientParams())
			acc := openai.ChatCompletionAccumulator{}
			for s.Next() {
				chunk := s.Current()
				if !acc.AddChunk(chunk) {
					t.Fatalf("the accumulator rejected a chunk: %s", chunk.RawJSON())
				}
				if strings.Contains(chunk.RawJSON(), "deliberate") {
					t.Fatalf("chunk carries the deliberate call: %s", chunk.RawJSON())
				}
			}
			if err := s.Err(); err != nil {
				t.Fatal(err)
			}
			msg, finish = acc.Choices[0].Message, acc.Choices[0].FinishReason
		} else {
			res, err := client.Chat.Completions.New(ctx, clientParams())
			if err != nil {
				t.Fatal(err)
			}
			if strings.Contains(res.RawJSON(), "deliberate") {
				t.Fatalf("response carries the deliberate call: %s", res.RawJSON())
			}
			msg, finish = res.Choices[0].Message, res.Choices[0].FinishReason
		}
		cancel()
		if msg.Content != finalAnswer || finish != "stop" || len(msg.ToolCalls) != 0 {
			t.Errorf("stream=%v: message %q, finish %q, %d tool calls", stream, msg.Content, finish, len(msg.ToolCalls))
		}
	}
}

// TestOpenAINodeClient runs the OpenAI Node SDK (bundled in testdata with
// its licence) behind the proxy, when node is installed.
func TestOpenAINodeClient(t *testing.T) {
	node, err := exec.LookPath("node")
	if err != nil {
		t.Skip("node is not installed")
	}
	for _, mode := range []string{"stream", "create"} {
		r := newDeliberateRig(t, packetFor, nil)
		r.scriptStep3(deliberateArgs, false)
		cmd := exec.Command(node, filepath.Join("testdata", "openai-node", "client.cjs"), r.url, mode)
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("%s: %v\n%s", mode, err, stderr.String())
		}
		var got struct {
			Content   string   `json:"content"`
			Finish    string   `json:"finish_reason"`
			ToolCalls []string `json:"tool_calls"`
			Saw       bool     `json:"saw_deliberate"`
		}
		if err := json.Unmarshal(out, &got); err != nil {
			t.Fatalf("%s: %v: %s", mode, err, out)
		}
		if got.Content != finalAnswer || got.Finish != "stop" || len(got.ToolCalls) != 0 || got.Saw {
			t.Errorf("%s: node client got %+v", mode, got)
		}
	}
}
