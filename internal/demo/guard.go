package demo

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/shaperproxy/shaperproxy/conv"
	"github.com/shaperproxy/shaperproxy/internal/fakeupstream"
)

// guardNotice begins the guard's ECHO notice.
const guardNotice = "Note from the shaperproxy guard"

// showGuard runs a sub-agent whose build fails the same way every time:
// after the third failure of the same call the guard tells the model once,
// in the newest failing tool result.
func showGuard(ctx context.Context, out io.Writer, up *fakeupstream.Server, pxURL, conversation string, res *Result) error {
	const failures = 4
	for i := 0; i < failures; i++ {
		up.Push(fakeupstream.Response{Reply: &fakeupstream.Reply{
			Reasoning: "The build should work now; run it again.",
			ToolCalls: []fakeupstream.ToolCall{{Name: "run_build", Arguments: `{"target": "./cmd/report"}`}},
		}})
	}
	up.Push(fakeupstream.Response{Reply: &fakeupstream.Reply{Content: "The build keeps failing on a missing package; I need the module layout from you."}})
	sub := &Agent{BaseURL: pxURL + "/v1", Model: "deepseek-reasoner", Client: &http.Client{Timeout: 30 * time.Second},
		Header: http.Header{"X-Shaper-Review": {"off"}, "X-Shaper-Conversation": {conversation}},
		Tools:  func(string, string) string { return "Error: cannot find package ./cmd/report/internal/render" }}
	sub.System("You are a sub-agent that builds packages.")
	before := len(up.Requests())
	if err := sub.Turn(ctx, "Build ./cmd/report.", func(StepReport) {}); err != nil {
		return err
	}
	fmt.Fprintf(out, "\n── guard: a sub-agent ran the same failing build %d times\n", failures)
	for i, r := range up.Requests()[before:] {
		v, err := conv.ParseRequest(r.Body)
		if err != nil {
			continue
		}
		for _, m := range v.Messages {
			if m.Role == "tool" && strings.Contains(m.Content, guardNotice) {
				res.GuardNotices++
				if res.GuardNotices == 1 {
					fmt.Fprintf(out, "  request %d carried the notice, appended to the newest failing tool result (message %d):\n    %s\n",
						i+1, m.Index, strings.TrimSpace(m.Content[strings.Index(m.Content, guardNotice):]))
				}
			}
		}
	}
	fmt.Fprintf(out, "  the notice stays in place in every later request (%d placements over %d requests), and no second one came without three new failures\n",
		res.GuardNotices, len(up.Requests())-before)
	return nil
}
