package bench

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/shaperproxy/shaperproxy/conv"
	"github.com/shaperproxy/shaperproxy/fixtures"
	"github.com/shaperproxy/shaperproxy/internal/fakeupstream"
	"github.com/tidwall/sjson"
)

// benchReview measures what the masked review adds to the end of a turn:
// the same stopping request (a 60-message agent history with tool calls)
// without review, with a review that finds nothing (one child call), and
// with one that publishes (child call and the model's revision). Every
// request is a new turn, so each is reviewed.
func benchReview(ctx context.Context, e *env, sz sizes, t *table) error {
	const (
		update   = `{"role":"masked-review","status":"update","items":[{"kind":"possible_error","certainty":"likely","content":"The tests of cmd/report were not run."}]}`
		noUpdate = `{"role":"masked-review","status":"no_update"}`
	)
	packet := noUpdate
	var childBytes, primaryBytes []int
	e.fake.Handle(func(r fakeupstream.Recorded) (fakeupstream.Response, bool) {
		last := lastContent(r.Body)
		switch {
		case strings.HasPrefix(last, "Automatic masked review, requested by the proxy"):
			childBytes = append(childBytes, len(r.Body))
			body, _ := sjson.SetBytes([]byte(`{"id":"r","object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":""},"finish_reason":"stop"}]}`), "choices.0.message.content", packet)
			return fakeupstream.Response{Status: 200, Body: body}, true
		case strings.HasPrefix(last, "Automatic masked review by the proxy"):
			return fakeupstream.Response{Reply: &fakeupstream.Reply{Content: "Ran them too: they pass."}}, true
		}
		primaryBytes = append(primaryBytes, len(r.Body))
		return fakeupstream.Response{Reply: &fakeupstream.Reply{Reasoning: "All green.", Content: "Done: the flaky test is fixed."}}, true
	})
	defer e.fake.Reset()
	history, _ := sjson.SetBytes(fixtures.AgentHistory(60, 1200, 400), "stream", false)
	c := newClient()
	n := 0
	send := func(url string) (time.Duration, error) {
		n++ // a new user message: a new turn, reviewed once
		body, _ := sjson.SetBytes(history, "messages.1.content", fmt.Sprintf("Fix the flaky proxy test (#%d).", n))
		return timedPost(c, url, body)
	}
	lat := map[string][]time.Duration{}
	for i := 0; i < sz.reviewRequests; i++ {
		for _, k := range []string{"off", noUpdate, update} {
			url := e.proxyURL[reviewed] + "/fake/v1/chat/completions"
			if k == "off" {
				url = e.proxyURL[bare] + "/fake/v1/chat/completions"
			}
			packet = k
			d, err := send(url)
			if err != nil {
				return err
			}
			lat[k] = append(lat[k], d)
		}
	}
	title := fmt.Sprintf("masked review, %d stopping requests of a 60-message history", sz.reviewRequests)
	t.add(title, "turn end p50: review finds nothing (child call)", pct(lat["off"], 50), pct(lat[noUpdate], 50), "")
	t.add(title, "turn end p50: review publishes (child call + revision)", pct(lat["off"], 50), pct(lat[update], 50), "")
	if len(childBytes) > 0 && len(primaryBytes) > 0 {
		t.ratio(title, "child prompt bytes vs the primary's", float64(avg(childBytes))/float64(avg(primaryBytes))-1, "")
	}
	return nil
}

func avg(xs []int) int {
	s := 0
	for _, x := range xs {
		s += x
	}
	return s / max(len(xs), 1)
}

// lastContent is the visible text of a request's last message.
func lastContent(body []byte) string {
	v, err := conv.ParseRequest(body)
	if err != nil || len(v.Messages) == 0 {
		return ""
	}
	return v.Messages[len(v.Messages)-1].Content
}
