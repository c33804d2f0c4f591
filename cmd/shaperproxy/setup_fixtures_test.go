package main

import (
	"bytes"
	"io"
	"net/http"
	"testing"

	"github.com/shaperproxy/shaperproxy/conv"
	"github.com/shaperproxy/shaperproxy/fixtures"
	"github.com/shaperproxy/shaperproxy/internal/config"
	"github.com/shaperproxy/shaperproxy/internal/fakeupstream"
)

// TestFixturesThroughDefaultConfig sends every recorded exchange through
// the proxy as a user runs it (shaping, originals, guard and capture on):
// responses reach the client byte for byte, and a request goes upstream
// unchanged unless it carries unsigned reasoning the proxy may shape.
func TestFixturesThroughDefaultConfig(t *testing.T) {
	exs, err := fixtures.All()
	if err != nil {
		t.Fatal(err)
	}
	r := newRig(t, func(c *config.Config) {})
	for _, ex := range exs {
		r.up.Push(fakeupstream.Response{Exchange: &ex})
		req, _ := http.NewRequest(ex.Method, r.url[:len(r.url)-len("/v1")]+ex.Path, bytes.NewReader(ex.RequestBody))
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		got, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != ex.Status || !bytes.Equal(got, ex.ResponseBody) {
			t.Errorf("%s: client got %d and %d bytes, want %d and %d", ex.Name, resp.StatusCode, len(got), ex.Status, len(ex.ResponseBody))
		}
		reqs := r.up.Requests()
		sent := reqs[len(reqs)-1].Body
		if !shapeable(ex.RequestBody) && !bytes.Equal(sent, ex.RequestBody) {
			t.Errorf("%s: request changed though it had nothing to shape", ex.Name)
		}
	}
}

// shapeable reports whether a body has unsigned reasoning longer than
// max_chars in an assistant message before the latest one.
func shapeable(body []byte) bool {
	v, err := conv.ParseRequest(body)
	if err != nil {
		return false
	}
	last := v.LastAssistant()
	for _, m := range v.Messages {
		if m.Role == "assistant" && m.Index != last && !m.Signed && len([]rune(m.Reasoning)) > 240 {
			return true
		}
	}
	return false
}
