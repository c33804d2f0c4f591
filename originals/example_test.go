package originals_test

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/shaperproxy/shaperproxy/originals"
)

func Example() {
	dir, _ := os.MkdirTemp("", "originals-example")
	defer os.RemoveAll(dir)

	st, err := originals.Open(filepath.Join(dir, originals.FileName), originals.Options{})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer st.Close()
	w := st.Async(1024)

	// Turn 1 of a conversation: one block was shaped.
	w.BeginTurn("conv-1", 1)
	w.Put([]originals.Entry{{Shaped: "decided: read config", Original: "Hmm, where is the config? Let me read it first.", Conversation: "conv-1", Turn: 1}})
	w.Flush()
	found, _ := st.Lookup("decided: read config")
	fmt.Printf("turn 1: %d original: %q\n", len(found), found[0].Original)

	// A new user message starts turn 2: turn 1's originals are cleared.
	w.BeginTurn("conv-1", 2)
	w.Close()
	found, _ = st.Lookup("decided: read config")
	fmt.Printf("turn 2: %d originals\n", len(found))
	// Output:
	// turn 1: 1 original: "Hmm, where is the config? Let me read it first."
	// turn 2: 0 originals
}
