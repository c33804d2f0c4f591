package demo

import (
	"fmt"
	"io"
	"strings"

	"github.com/shaperproxy/shaperproxy/conv"
	"github.com/shaperproxy/shaperproxy/internal/fakeupstream"
	"github.com/tidwall/sjson"
)

// The review's requests are recognised by their last message: the child
// ends with the review task, the continuation with the notice.
const (
	childPrefix  = "Automatic masked review, requested by the proxy"
	noticePrefix = "Automatic masked review by the proxy (not from the user)"
)

func lastContent(body []byte) string {
	v, err := conv.ParseRequest(body)
	if err != nil || len(v.Messages) == 0 {
		return ""
	}
	return v.Messages[len(v.Messages)-1].Content
}

// reviewAnswers answers the review's own requests: the first child finds
// a possible error, later ones nothing; the continuation is the revision.
func reviewAnswers(res *Result) func(fakeupstream.Recorded) (fakeupstream.Response, bool) {
	return func(r fakeupstream.Recorded) (fakeupstream.Response, bool) {
		last := lastContent(r.Body)
		switch {
		case strings.HasPrefix(last, childPrefix):
			res.Reviews++
			packet := reviewNothing
			if res.Reviews == 1 {
				packet = reviewPacket
			}
			body, _ := sjson.SetBytes([]byte(`{"id":"review","object":"chat.completion","model":"deepseek-reasoner","choices":[{"index":0,"message":{"role":"assistant","content":""},"finish_reason":"stop"}]}`), "choices.0.message.content", packet)
			return fakeupstream.Response{Status: 200, Body: body}, true
		case strings.HasPrefix(last, noticePrefix):
			res.Revisions++
			return fakeupstream.Response{Reply: &revision}, true
		}
		return fakeupstream.Response{}, false
	}
}

// showReview prints what the review did: the child it asked, the notice the
// model got, and the history the next request carried.
func showReview(out io.Writer, reqs []fakeupstream.Recorded, res *Result) {
	fmt.Fprintf(out, "\n── masked review: %d turn ends reviewed, %d revision(s)\n", res.Reviews, res.Revisions)
	for _, r := range reqs {
		last := lastContent(r.Body)
		switch {
		case strings.HasPrefix(last, childPrefix):
			v, _ := conv.ParseRequest(r.Body)
			fmt.Fprintf(out, "  child request: %d messages (the seed before the turn, byte for byte, then one snapshot with the turn's reasoning masked), %d bytes\n", len(v.Messages), len(r.Body))
		case strings.HasPrefix(last, noticePrefix):
			v, _ := conv.ParseRequest(r.Body)
			role := v.Messages[len(v.Messages)-1].Role // where the route's rendering profile puts the notice
			fmt.Fprintf(out, "  the model was told (as a %s message after the draft, where its profile renders it in place):\n    %s\n", role, strings.ReplaceAll(last, "\n", "\n    "))
		}
	}
	for _, r := range reqs {
		v, err := conv.ParseRequest(r.Body)
		if err != nil || strings.HasPrefix(lastContent(r.Body), noticePrefix) {
			continue
		}
		for i, m := range v.Messages {
			if m.Role != "assistant" && i > 0 && strings.HasPrefix(m.Content, noticePrefix) {
				res.Restored = true
				fmt.Fprintf(out, "  the next turn's request carried draft (message %d), notice (%d) and revision (%d) in their real order\n", i-1, i, i+1)
				return
			}
		}
	}
}
