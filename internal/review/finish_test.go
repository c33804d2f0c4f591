package review

import (
	"testing"

	"github.com/tidwall/gjson"
)

func TestSplitFinish(t *testing.T) {
	withText := []byte("data: {\"id\":\"p\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"world.\"},\"finish_reason\":\"stop\"}],\"usage\":{\"total_tokens\":9}}\n\n")
	td := payload(t, splitFinish(withText))
	if gjson.GetBytes(td, "choices.0.delta.content").String() != "world." || gjson.GetBytes(td, "choices.0.finish_reason").Type != gjson.Null || gjson.GetBytes(td, "usage").Exists() {
		t.Errorf("text chunk: %s", td)
	}
	for _, raw := range []string{
		"data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"\"},\"finish_reason\":\"stop\"}]}\n\n",
		"data: [DONE]\n\n",
		": keep-alive\n\n",
	} {
		if text := splitFinish([]byte(raw)); text != nil {
			t.Errorf("%q: text %q, want none", raw, text)
		}
	}
}

func payload(t *testing.T, ev []byte) []byte {
	t.Helper()
	if len(ev) < 8 || string(ev[:6]) != "data: " || string(ev[len(ev)-2:]) != "\n\n" {
		t.Fatalf("not one data event: %q", ev)
	}
	return ev[6 : len(ev)-2]
}
