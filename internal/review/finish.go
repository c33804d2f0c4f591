package review

import (
	"bytes"

	"github.com/shaperproxy/shaperproxy/conv"

	"github.com/shaperproxy/shaperproxy/sse"
	"github.com/tidwall/gjson"
	"github.com/tidwall/sjson"
)

// splitFinish splits the draft's finish chunk, one raw SSE event: some
// upstreams (vLLM, Gemini, Ollama) put the last piece of text in the chunk
// that carries finish_reason. text is that chunk with finish_reason null
// and no usage, to go out before a revision so the client loses nothing
// (nil when the chunk carried no text). Edits are made with sjson;
// nothing is re-marshalled.
func splitFinish(raw []byte) (text []byte) {
	ev, err := sse.NewReader(bytes.NewReader(raw)).Next()
	if err != nil || !ev.HasData || ev.IsDone() {
		return nil
	}
	data := bytes.Clone(ev.Data)
	if !conv.DeltaHasText(gjson.GetBytes(data, "choices.0.delta")) {
		return nil
	}
	t, err1 := sjson.SetRawBytes(data, "choices.0.finish_reason", []byte("null"))
	t, err2 := sjson.DeleteBytes(t, "usage")
	if err1 != nil || err2 != nil {
		return nil
	}
	return dataEvent(t)
}

func dataEvent(data []byte) []byte {
	return append(append([]byte("data: "), data...), '\n', '\n')
}
