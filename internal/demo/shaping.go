package demo

import (
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"

	"github.com/shaperproxy/shaperproxy/originals"

	"github.com/shaperproxy/shaperproxy/conv"
	"github.com/shaperproxy/shaperproxy/internal/fakeupstream"
	"github.com/shaperproxy/shaperproxy/shaping"
)

// primaries are the requests the agent made, as the upstream received
// them (the review's own requests left out).
func primaries(reqs []fakeupstream.Recorded) []fakeupstream.Recorded {
	var out []fakeupstream.Recorded
	for _, r := range reqs {
		last := lastContent(r.Body)
		if !strings.HasPrefix(last, childPrefix) && !strings.HasPrefix(last, noticePrefix) {
			out = append(out, r)
		}
	}
	return out
}

// scriptedOriginal returns the scripted reasoning that went out as text:
// itself, or the one that shapes to it.
func scriptedOriginal(text string) (string, bool) {
	all := []string{revision.Reasoning}
	for _, r := range replies {
		all = append(all, r.Reasoning)
	}
	for _, o := range all {
		if o == text {
			return o, false
		}
		if s, changed := shaping.Shape(o, shaping.Options{}); changed && s == text {
			return o, true
		}
	}
	return text, false
}

// showShaping shows the reasoning of the agent's last request as the
// upstream received it, and looks one shaped block up in the originals table.
func showShaping(out io.Writer, sent []byte, reqs []fakeupstream.Recorded, pxURL, conversation string, res *Result) error {
	prim := primaries(reqs)
	if len(prim) == 0 {
		return nil
	}
	after, err := conv.ParseRequest(prim[len(prim)-1].Body)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "\n── shaping: the agent's last request (%d bytes) reached the upstream as %d bytes\n", len(sent), len(after.Body))
	var example *conv.Message
	var exampleOrig string
	for i, m := range after.Messages {
		if m.Role != "assistant" || m.Reasoning == "" {
			continue
		}
		orig, shaped := scriptedOriginal(m.Reasoning)
		state := "as sent (latest step, or within max_chars)"
		if shaped {
			state = "shaped"
			res.Shaped++
			example, exampleOrig = &after.Messages[i], orig // the last shaped block: of the current turn
		} else {
			res.Raw++
		}
		fmt.Fprintf(out, "  message %2d: reasoning %4d -> %4d chars, %s\n", i, len([]rune(orig)), len([]rune(m.Reasoning)), state)
	}
	if example == nil {
		return nil
	}
	fmt.Fprintf(out, "\n  message %d as the agent sent it:\n    %s\n  as the upstream received it (no marker added):\n    %s\n", example.Index, exampleOrig, example.Reasoning)
	entries, err := lookupOriginal(pxURL, example.Reasoning, conversation)
	if err != nil {
		return err
	}
	if len(entries) != 1 {
		return fmt.Errorf("originals lookup found %d entries", len(entries))
	}
	res.LookupOK = entries[0].Original == exampleOrig
	fmt.Fprintf(out, "\n  originals lookup of that shaped text: 1 entry (conversation %s, turn %d), original matches: %v\n",
		entries[0].Conversation, entries[0].Turn, res.LookupOK)
	return nil
}

// lookupOriginal asks the running proxy for the original of a shaped text,
// as `shaperproxy originals lookup` does while the proxy holds the table,
// and returns the entries of this run's conversation (a kept data
// directory holds earlier runs' too).
func lookupOriginal(pxURL, shaped, conversation string) ([]originals.Entry, error) {
	sum := originals.Sum(shaped)
	resp, err := http.Get(pxURL + originals.AdminPath + "lookup?sha256=" + hex.EncodeToString(sum[:]))
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("originals lookup: %s", resp.Status)
	}
	var es []originals.Entry
	if err := json.NewDecoder(resp.Body).Decode(&es); err != nil {
		return nil, err
	}
	return slices.DeleteFunc(es, func(e originals.Entry) bool { return e.Conversation != conversation }), nil
}
