package guard

import (
	"fmt"

	"github.com/shaperproxy/shaperproxy/conv"
)

// Example shows the wiring of one request: fold, decide, apply.
func Example() {
	g, err := New(DefaultConfig())
	if err != nil {
		panic(err)
	}
	body := []byte(`{"model":"deepseek-v4","messages":[
{"role":"user","content":"build it"},
{"role":"assistant","content":"","reasoning_content":"run make","tool_calls":[{"id":"c1","type":"function","function":{"name":"bash","arguments":"{\"cmd\":\"make\"}"}}]},
{"role":"tool","tool_call_id":"c1","content":"make: *** [all] Error 2\nexit status 2"},
{"role":"assistant","content":"","reasoning_content":"again","tool_calls":[{"id":"c2","type":"function","function":{"name":"bash","arguments":"{ \"cmd\": \"make\" }"}}]},
{"role":"tool","tool_call_id":"c2","content":"make: *** [all] Error 2\nexit status 2"},
{"role":"assistant","content":"","reasoning_content":"once more","tool_calls":[{"id":"c3","type":"function","function":{"name":"bash","arguments":"{\"cmd\":\"make\"}"}}]},
{"role":"tool","tool_call_id":"c3","content":"make: *** [all] Error 2\nexit status 2"}]}`)
	req, err := conv.ParseRequest(body)
	if err != nil {
		panic(err)
	}
	proj := g.NewProjection() // kept per conversation key
	var state state           // loaded per conversation key

	sig, stats := proj.Update(req)
	dec, state := g.Decide(state, req, sig)
	out, err := applyPlacements(req, dec.Placements)
	if err != nil {
		panic(err)
	}
	sent, _ := conv.ParseRequest(out)

	fmt.Println("folded:", stats.Processed)
	for _, e := range dec.Events {
		fmt.Println("event:", e.Kind, e.Tool, e.Count)
	}
	fmt.Println("acknowledged up to:", state.AckCallID)
	fmt.Printf("last tool result sent:\n%s\n", sent.Messages[6].Content)
	// Output:
	// folded: 7
	// event: echo bash 3
	// acknowledged up to: c3
	// last tool result sent:
	// make: *** [all] Error 2
	// exit status 2
	//
	// Note from the shaperproxy guard: the same call to the tool "bash", with the same arguments, has now failed 3 times in a row. Repeating it unchanged is unlikely to help; change the arguments or the approach.
}
