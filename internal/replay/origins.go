package replay

import (
	"cmp"
	"slices"

	"github.com/shaperproxy/shaperproxy/conv"
	"github.com/shaperproxy/shaperproxy/internal/jsonstr"
)

// origin is a reply as the upstream sent it: what message i of the
// conversation's later requests holds, before any shaping.
type origin struct {
	reasoning, content string
	callIDs            []string
}

// origins maps conversation → message index → the reply that became that
// message: the response to the conversation's request of that many
// messages (agents append each reply to the history they send next).
type origins map[string]map[int]origin

// learn records the reply to a request of n messages.
func (o origins) learn(key string, n int, resp conv.Response) {
	if len(resp.Choices) == 0 || resp.Choices[0].Reasoning == "" {
		return
	}
	c := resp.Choices[0]
	m := o[key]
	if m == nil {
		m = map[int]origin{}
		o[key] = m
	}
	og := origin{reasoning: c.Reasoning, content: c.Content}
	for _, tc := range c.ToolCalls {
		og.callIDs = append(og.callIDs, tc.ID)
	}
	m[n] = og
}

// restore returns the request with the reasoning of each assistant
// message that is a known reply put back as the reply had it, how many
// blocks it changed, and how many reasoning blocks are no known reply.
func (o origins) restore(key string, view *conv.Request) (body []byte, restored, unmatched int) {
	var edits []conv.Edit
	for i, msg := range view.Messages {
		if msg.Role != "assistant" || msg.Reasoning == "" || msg.Signed || msg.ReasoningStart < 0 {
			continue
		}
		og, ok := o[key][i]
		switch {
		case !ok || !og.same(msg):
			unmatched++
		case og.reasoning != msg.Reasoning:
			edits = append(edits, conv.Edit{Start: msg.ReasoningStart, End: msg.ReasoningEnd, Repl: jsonstr.Append(nil, og.reasoning)})
			restored++
		}
	}
	if len(edits) == 0 {
		return view.Body, 0, unmatched
	}
	return conv.ApplyEdits(view.Body, edits), restored, unmatched
}

// same reports whether msg is this reply sent back: the same visible
// text and tool call ids.
func (og origin) same(msg conv.Message) bool {
	if og.content != msg.Content || len(og.callIDs) != len(msg.ToolCalls) {
		return false
	}
	for i, tc := range msg.ToolCalls {
		if tc.ID != og.callIDs[i] {
			return false
		}
	}
	return true
}

// replyMessage returns the first choice of a response as the assistant
// message a client sends back, for the simulated cache's "end of the
// model output" unit; nil for an empty response.
func replyMessage(resp conv.Response) []byte {
	if len(resp.Choices) == 0 {
		return nil
	}
	c := resp.Choices[0]
	if c.ReasoningField == "" {
		c.ReasoningField = "reasoning_content"
	}
	return c.Message()
}

func sortGroups(gs []*Group) {
	slices.SortFunc(gs, func(a, b *Group) int {
		return cmp.Or(cmp.Compare(a.Route, b.Route), cmp.Compare(a.Model, b.Model))
	})
}
