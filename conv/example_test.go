package conv_test

import (
	"fmt"

	"github.com/shaperproxy/shaperproxy/conv"
)

func Example() {
	body := []byte(`{"model":"deepseek-chat","messages":[
		{"role":"system","content":"You are a coding agent."},
		{"role":"user","content":"Fix the test."},
		{"role":"assistant","content":null,"reasoning_content":"Run it first.",
		 "tool_calls":[{"id":"c1","type":"function","function":{"name":"bash","arguments":"{\"cmd\":\"go test\"}"}}]},
		{"role":"tool","tool_call_id":"c1","content":"FAIL"},
		{"role":"user","content":"(the user typed while the tool ran)"}]}`)
	req, err := conv.ParseRequest(body)
	if err != nil {
		panic(err)
	}
	a := req.Messages[2]
	fmt.Printf("%s %s=%q at %s\n", a.Role, a.ReasoningField, a.Reasoning, body[a.ReasoningStart:a.ReasoningEnd])
	for _, t := range req.Turns() {
		fmt.Printf("turn %d: messages [%d,%d) inputs %v steps %+v\n", t.Ordinal, t.Start, t.End, t.Inputs, t.Steps)
	}
	fmt.Println("starts new turn:", req.StartsNewTurn(), "pending:", req.ToolCallsPending())

	asm := conv.NewAssembler()
	for _, data := range []string{
		`{"id":"r1","choices":[{"index":0,"delta":{"role":"assistant","content":null,"reasoning_content":"Read "}}]}`,
		`{"id":"r1","choices":[{"index":0,"delta":{"content":null,"reasoning_content":"the log."}}]}`,
		`{"id":"r1","choices":[{"index":0,"delta":{"content":"Fixed.","reasoning_content":null},"finish_reason":"stop"}],"usage":{"total_tokens":9}}`,
		`[DONE]`,
	} {
		if err := asm.AddChunk([]byte(data)); err != nil {
			panic(err)
		}
	}
	resp := asm.Response()
	c := resp.Choices[0]
	fmt.Printf("%s: reasoning %q content %q finish %s usage %s\n", resp.ID, c.Reasoning, c.Content, c.FinishReason, resp.Usage)
	// Output:
	// assistant reasoning_content="Run it first." at "Run it first."
	// turn 1: messages [1,5) inputs [1 4] steps [{Assistant:2 ToolResults:[3]}]
	// starts new turn: false pending: false
	// r1: reasoning "Read the log." content "Fixed." finish stop usage {"total_tokens":9}
}
