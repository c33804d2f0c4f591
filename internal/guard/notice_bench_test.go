package guard

import (
	"strings"
	"testing"

	"github.com/shaperproxy/shaperproxy/conv"
	"github.com/tidwall/gjson"
	"github.com/tidwall/sjson"
)

// BenchmarkNoticeAgain is the guard's per-request work for a notice placed
// earlier on a 40 KB tool result (a compiler's output), which every later
// request of the conversation carries again: check that the message is
// still the one it was placed on and can take it, and make the edit. The
// edit's application (a copy of the body) is not in it.
func BenchmarkNoticeAgain(b *testing.B) {
	req := compilerOutput(b)
	g, err := New(DefaultConfig())
	if err != nil {
		b.Fatal(err)
	}
	n := notice{Kind: echoNotice, Message: 2, Hash: messageHash(req, 2), Text: "note"}
	b.Run("view", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if !g.anchored(req, n) || !placeable(req, 2) {
				b.Fatal("not placed again")
			}
			if _, err := placementEdits(req, []placement{{2, n.Text}}); err != nil {
				b.Fatal(err)
			}
		}
	})
	// What the same work cost when the message was hashed on every request
	// and its content decoded three times: to tell its kind when deciding,
	// again when making the edits, and to make the edit.
	b.Run("decoded", func(b *testing.B) {
		b.ReportAllocs()
		m := req.Messages[2]
		raw := req.Body[m.Start:m.End]
		for b.Loop() {
			if messageHash(req, 2) != n.Hash || gjson.GetBytes(raw, "content").Type != gjson.String ||
				gjson.GetBytes(raw, "content").Type != gjson.String || gjson.GetBytes(raw, "content").Str == "" {
				b.Fatal("not placed again")
			}
		}
	})
}

// compilerOutput is a request whose last message is a 40 KB tool result.
func compilerOutput(b *testing.B) *conv.Request {
	out := "Error: build failed\n" + strings.Repeat("main.go:12:3: undefined: foo (compile output line)\n", 40000/52)
	body := []byte(`{"model":"m","messages":[{"role":"user","content":"hi"},{"role":"assistant","content":"","tool_calls":[{"id":"c1","type":"function","function":{"name":"bash","arguments":"{}"}}]},{"role":"tool","tool_call_id":"c1","content":""}]}`)
	body, _ = sjson.SetBytes(body, "messages.2.content", out)
	return mustParse(b, body)
}

// BenchmarkNoticeApplied is the notice's edit applied to that request and
// its view derived (conv.Request.Apply), as the guard hands it on: the
// body's copy, the message's text extended and keyed again (appended),
// against the message read again, as Apply did before it knew an append
// to a content string (read-again: an empty edit beside it makes Apply
// read the message, as any other edit inside it does).
func BenchmarkNoticeApplied(b *testing.B) {
	req := compilerOutput(b)
	edits, err := placementEdits(req, []placement{{2, "note"}})
	if err != nil {
		b.Fatal(err)
	}
	reread := append([]conv.Edit{{Start: req.Messages[2].Start + 1, End: req.Messages[2].Start + 1}}, edits...)
	for _, c := range []struct {
		name  string
		edits []conv.Edit
	}{{"appended", edits}, {"read-again", reread}} {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				v, err := req.Apply(append([]conv.Edit(nil), c.edits...))
				if err != nil || !strings.HasSuffix(v.Messages[2].Content, "\n\nnote") {
					b.Fatal("not applied", err)
				}
			}
		})
	}
}
