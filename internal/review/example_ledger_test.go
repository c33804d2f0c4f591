package review

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/shaperproxy/shaperproxy/conv"
	"github.com/shaperproxy/shaperproxy/internal/ledger"
)

// Example records a revised turn and restores it in the conversation's
// next request; Insertion and Insertion convert directly.
func Example() {
	dir, _ := os.MkdirTemp("", "ledger")
	defer os.RemoveAll(dir)
	st, err := ledger.Open(filepath.Join(dir, "state.db"), ledger.Options{})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer st.Close()
	const c = "c:0123456789abcdef"

	first, _ := st.MarkReviewed(c, "t:1")
	again, _ := st.MarkReviewed(c, "t:1")
	fmt.Println("first mark:", first, "second mark:", again)

	draft := Draft{ReasoningField: "reasoning_content", Reasoning: "r1", Content: "42."}
	cont := Draft{ReasoningField: "reasoning_content", Reasoning: "r2", Content: "Correction: 41."}
	notice := []byte(`{"role":"system","content":"Automatic masked review ..."}`)
	if err := st.PutInsertion(c, ledger.Insertion(NewInsertion(draft, notice, cont))); err != nil {
		fmt.Println(err)
		return
	}

	merged := MergedContent(draft.Content, cont.Content)
	body := fmt.Appendf(nil, `{"messages":[{"role":"user","content":"6*7?"},{"role":"assistant","content":%q},{"role":"user","content":"sure?"}]}`, merged)
	req, _ := conv.ParseRequest(body)
	restored, n, err := Restore(req, func(k [32]byte) (Insertion, bool) {
		ins, ok, err := st.Insertion(c, k)
		return Insertion(ins), ok && err == nil
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	out, _ := conv.ParseRequest(restored)
	fmt.Println("restored:", n)
	for _, m := range out.Messages {
		fmt.Printf("%s: %q\n", m.Role, m.Content)
	}
	// Output:
	// first mark: true second mark: false
	// restored: 1
	// user: "6*7?"
	// assistant: "42."
	// system: "Automatic masked review ..."
	// assistant: "Correction: 41."
	// user: "sure?"
}
