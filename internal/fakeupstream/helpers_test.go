package fakeupstream_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/tidwall/gjson"

	"github.com/shaperproxy/shaperproxy/internal/fakeupstream"
	"github.com/shaperproxy/shaperproxy/sse"
)

// streamReq asks for a stream with usage.
const streamReq = `{"model":"deepseek-reasoner","messages":[{"role":"user","content":"hi"}],"stream":true,"stream_options":{"include_usage":true}}`

// plainReq asks for a non-streamed completion.
const plainReq = `{"model":"deepseek-reasoner","messages":[{"role":"user","content":"hi"}]}`

// event is a copy of one sse.Event.
type event struct {
	name, data, raw string
	comment, done   bool
	partial         bool
}

// newServer starts a fakeupstream Server behind httptest on loopback.
func newServer(t *testing.T) (*fakeupstream.Server, *httptest.Server) {
	t.Helper()
	s := fakeupstream.New()
	ts := httptest.NewServer(s)
	t.Cleanup(ts.Close)
	return s, ts
}

// post sends body to url with an optional context and client.
func post(t *testing.T, ctx context.Context, c *http.Client, url, body string) *http.Response {
	t.Helper()
	if ctx == nil {
		ctx = t.Context()
	}
	if c == nil {
		c = http.DefaultClient
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	return resp
}

// readBody reads a whole body, failing the test on error.
func readBody(t *testing.T, r io.Reader) []byte {
	t.Helper()
	b, err := io.ReadAll(r)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// readEvents reads SSE events until the end; the error is nil at a clean
// end of stream.
func readEvents(r io.Reader) ([]event, error) {
	rd := sse.NewReader(r)
	var evs []event
	for {
		ev, err := rd.Next()
		if errors.Is(err, io.EOF) {
			return evs, nil
		}
		if err != nil {
			return evs, err
		}
		evs = append(evs, event{
			name: string(ev.Name), data: string(ev.Data), raw: string(ev.Raw),
			comment: ev.Comment, done: ev.IsDone(), partial: ev.Partial,
		})
	}
}

// mustEvents reads a complete stream.
func mustEvents(t *testing.T, r io.Reader) []event {
	t.Helper()
	evs, err := readEvents(r)
	if err != nil {
		t.Fatalf("reading events: %v", err)
	}
	return evs
}

// dataOf returns the data of the non-comment, non-[DONE] events.
func dataOf(evs []event) []string {
	var out []string
	for _, e := range evs {
		if !e.comment && !e.done {
			out = append(out, e.data)
		}
	}
	return out
}

// shape lists the key paths of a JSON value in order, each with its type
// (arrays contribute their first element only).
func shape(raw string) []string {
	var out []string
	var walk func(r gjson.Result, prefix string)
	walk = func(r gjson.Result, prefix string) {
		switch {
		case r.IsObject():
			r.ForEach(func(k, v gjson.Result) bool {
				p := prefix + "." + k.String()
				out = append(out, p+":"+typeName(v))
				walk(v, p)
				return true
			})
		case r.IsArray():
			if a := r.Array(); len(a) > 0 {
				walk(a[0], prefix+"[]")
			}
		}
	}
	walk(gjson.Parse(raw), "")
	return out
}

func typeName(r gjson.Result) string {
	switch {
	case r.IsObject():
		return "object"
	case r.IsArray():
		return "array"
	}
	return r.Type.String()
}
