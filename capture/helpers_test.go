package capture

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// openTest opens a Writer on a new directory under t.TempDir and closes it
// at the end of the test.
func openTest(t testing.TB, opts Options) (*Writer, string) {
	t.Helper()
	if opts.Dir == "" {
		opts.Dir = filepath.Join(t.TempDir(), "capture")
	}
	w, err := Open(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = w.Close() })
	return w, opts.Dir
}

func openReaderTest(t testing.TB, dir string) *Reader {
	t.Helper()
	r, err := OpenReader(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = r.Close() })
	return r
}

func mustFlush(t testing.TB, w *Writer) {
	t.Helper()
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
}

// scanAll reads every record.
func scanAll(t testing.TB, r *Reader) []Located {
	t.Helper()
	var out []Located
	if err := r.Scan(func(l Located) error { out = append(out, l); return nil }); err != nil {
		t.Fatal(err)
	}
	return out
}

// words is a small vocabulary for deterministic, realistic text.
var words = strings.Fields(`the a to of and in is that for it on with as this be are
function return error value file line test call tool result we should check
first then next because so but if not need let me look at read write go build
reasoning model request response stream event chunk message content assistant
user system proxy capture segment frame offset tail index blob hash byte json
param string int error nil context time duration config route upstream client`)

// text returns n bytes of pseudo-random prose.
func text(rng *rand.Rand, n int) string {
	var b strings.Builder
	for b.Len() < n {
		b.WriteString(words[rng.IntN(len(words))])
		if rng.IntN(12) == 0 {
			b.WriteString(". ")
		} else {
			b.WriteByte(' ')
		}
	}
	return b.String()[:n]
}

// jsonString quotes s as a JSON string (s holds no characters that need
// escaping beyond quotes).
func jsonString(s string) string {
	return `"` + strings.ReplaceAll(s, `"`, `\"`) + `"`
}

// conversation generates the request bodies of an agent conversation whose
// history grows by a few messages every request.
type conversation struct {
	rng      *rand.Rand
	messages []string
	tools    string
}

func newConversation(seed uint64) *conversation {
	c := &conversation{rng: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))}
	var tools []string
	for i := range 12 {
		tools = append(tools, fmt.Sprintf(`{"type":"function","function":{"name":"tool_%d","description":%s,"parameters":{"type":"object","properties":{"path":{"type":"string"}}}}}`,
			i, jsonString(text(c.rng, 400))))
	}
	c.tools = "[" + strings.Join(tools, ",") + "]"
	c.messages = []string{
		`{"role":"system","content":` + jsonString(text(c.rng, 6000)) + `}`,
		`{"role":"user","content":` + jsonString(text(c.rng, 300)) + `}`,
	}
	return c
}

// next adds a step (assistant with reasoning and a tool call, tool result)
// and returns the request body.
func (c *conversation) next(i int) []byte {
	if i > 0 {
		id := fmt.Sprintf("call_%d", i)
		c.messages = append(c.messages,
			`{"role":"assistant","content":null,"reasoning_content":`+jsonString(text(c.rng, 200+c.rng.IntN(800)))+
				`,"tool_calls":[{"id":"`+id+`","type":"function","function":{"name":"tool_1","arguments":"{\"path\":\"a.go\"}"}}]}`,
			`{"role":"tool","tool_call_id":"`+id+`","content":`+jsonString(text(c.rng, 100+c.rng.IntN(1100)))+`}`)
	}
	return []byte(`{"model":"deepseek-reasoner","messages":[` + strings.Join(c.messages, ",") +
		`],"tools":` + c.tools + `,"stream":true,"stream_options":{"include_usage":true}}`)
}

// sseEvent returns a realistic ~300-byte stream chunk.
func sseEvent(rng *rand.Rand, call string) []byte {
	return []byte(`data: {"id":"` + call + `","object":"chat.completion.chunk","created":1760000000,"model":"deepseek-reasoner","system_fingerprint":"fp_1","choices":[{"index":0,"delta":{"content":null,"reasoning_content":` +
		jsonString(text(rng, 8+rng.IntN(24))) + `},"logprobs":null,"finish_reason":null}]}` + "\n\n")
}

// decompressedFiles returns the decompressed content of every segment,
// for looking for bytes that must not be there.
func decompressedFiles(t testing.TB, dir string) []byte {
	t.Helper()
	r := openReaderTest(t, dir)
	if err := r.refresh(); err != nil {
		t.Fatal(err)
	}
	var all bytes.Buffer
	for _, s := range r.segs {
		if !r.open(s) {
			continue
		}
		for off := s.start; ; {
			fi, ok := s.nextFrame(off)
			if !ok {
				break
			}
			fd, err := decodeFrame(r.dec, s, fi)
			if err != nil {
				t.Fatal(err)
			}
			all.Write(fd.raw)
			off = fi.next()
		}
	}
	return all.Bytes()
}

func testHeader() http.Header {
	return http.Header{"Content-Type": {"application/json"}, "Authorization": {"Bearer sk-TESTSECRET-0123456789"}}
}

func fileMode(t testing.TB, path string) os.FileMode {
	t.Helper()
	info, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return info.Mode().Perm()
}

var t0 = time.Date(2026, 10, 13, 12, 0, 0, 0, time.UTC)
