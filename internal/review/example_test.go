package review

import (
	"fmt"
)

func Example_parsePacket() {
	body := []byte(`{"choices":[{"index":0,"message":{"role":"assistant","content":"{\"role\":\"masked-review\",\"status\":\"update\",\"items\":[{\"kind\":\"possible_error\",\"certainty\":\"likely\",\"content\":\"go vet failed, yet the answer says the tests pass.\"}]}"},"finish_reason":"stop"}]}`)
	p, err := parsePacket(body)
	if err != nil {
		fmt.Println("invalid:", err)
		return
	}
	fmt.Println(notice(p))
	// Output:
	// Automatic masked review by the proxy (not from the user): a second look at this turn with your reasoning hidden found:
	// 1. [possible_error, likely] go vet failed, yet the answer says the tests pass.
	// The reviewer saw only your visible text, tool calls and results; its points may be wrong. Revise your answer if these hold; otherwise say briefly why not.
}
