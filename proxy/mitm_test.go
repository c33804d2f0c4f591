package proxy

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/shaperproxy/shaperproxy/sse"
	"github.com/tidwall/gjson"
)

// TestMITMFlushAndCancel: in HTTPS_PROXY mode too, each event reaches the
// client before the upstream writes the next, and a client that leaves
// cancels the upstream request.
func TestMITMFlushAndCancel(t *testing.T) {
	got := make(chan int, 16)
	gone := make(chan struct{}, 1)
	c, upURL := mitmRig(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		rc := http.NewResponseController(w)
		for k := 0; ; k++ {
			fmt.Fprintf(w, "data: {\"k\":%d}\n\n", k)
			_ = rc.Flush()
			select {
			case <-got:
			case <-r.Context().Done():
				gone <- struct{}{}
				return
			case <-time.After(3 * time.Second):
				t.Errorf("event %d not received before the next was due", k)
				return
			}
		}
	}), testCA(t), nil)
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, "POST", upURL+"/v1/chat/completions", strings.NewReader(chatBody))
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	rd := sse.NewReader(resp.Body)
	for i := 0; i < 5; i++ {
		ev, err := rd.Next()
		if err != nil || gjson.GetBytes(ev.Data, "k").Int() != int64(i) {
			t.Fatalf("event %d: %q, %v", i, ev.Data, err)
		}
		got <- i
	}
	cancel()
	resp.Body.Close()
	select {
	case <-gone:
	case <-time.After(3 * time.Second):
		t.Fatal("the upstream never saw the client go away")
	}
}
