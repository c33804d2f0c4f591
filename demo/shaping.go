package demo

import (
	"fmt"
	"io"

	"github.com/shaperproxy/shaperproxy/app"
	"github.com/shaperproxy/shaperproxy/conv"
	"github.com/shaperproxy/shaperproxy/fakeupstream"
)

// showShaping compares the agent's last request with what the upstream
// received, and looks one shaped block up in the originals table.
func showShaping(out io.Writer, sent []byte, reqs []fakeupstream.Recorded, a *app.App, res *Result) error {
	if len(reqs) == 0 {
		return nil
	}
	before, err := conv.ParseRequest(sent)
	if err != nil {
		return err
	}
	after, err := conv.ParseRequest(reqs[len(reqs)-1].Body)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "\n── shaping: the agent's last request (%d bytes) reached the upstream as %d bytes\n", len(sent), len(after.Body))
	var example *conv.Message
	for i, m := range before.Messages {
		if m.Role != "assistant" || m.Reasoning == "" {
			continue
		}
		got := after.Messages[i].Reasoning
		state := "kept (latest step)"
		if got != m.Reasoning {
			state = "shaped"
			res.Shaped++
			example = &after.Messages[i] // the last shaped block: of the current turn
		} else {
			res.Raw++
		}
		fmt.Fprintf(out, "  message %2d: reasoning %4d -> %4d chars, %s\n", i, len([]rune(m.Reasoning)), len([]rune(got)), state)
	}
	if example == nil {
		return nil
	}
	orig := before.Messages[example.Index].Reasoning
	fmt.Fprintf(out, "\n  message %d as the agent sent it:\n    %s\n  as the upstream received it (no marker added):\n    %s\n", example.Index, orig, example.Reasoning)
	a.Originals.Flush()
	entries, err := a.Store.Lookup(example.Reasoning)
	if err != nil {
		return err
	}
	if len(entries) != 1 {
		return fmt.Errorf("originals lookup found %d entries", len(entries))
	}
	res.LookupOK = entries[0].Original == orig
	fmt.Fprintf(out, "\n  originals lookup of that shaped text: 1 entry (conversation %s, turn %d), original matches: %v\n",
		entries[0].Conversation, entries[0].Turn, res.LookupOK)
	return nil
}
