package proxy

import (
	"net/http"
	"reflect"
	"testing"
)

// TestUpstreamHeader: the header sent upstream is the client's less what
// must not pass, and the client's map is never changed to make it; it is
// the client's map itself only when nothing had to go.
func TestUpstreamHeader(t *testing.T) {
	base := func() http.Header {
		return http.Header{"User-Agent": {"agent/1"}, "Content-Type": {"application/json"}, "Accept-Encoding": {"gzip"}}
	}
	cases := []struct {
		name        string
		add         http.Header
		key         string
		readsAnswer bool
		want        http.Header // nil: the client's map itself
	}{
		{name: "nothing to change", want: nil},
		{name: "hop header", add: http.Header{"Connection": {"keep-alive, X-Hop"}, "X-Hop": {"1"}},
			want: base()},
		{name: "own header", add: http.Header{"X-Shaper-Conversation": {"c1"}}, want: base()},
		{name: "expect", add: http.Header{"Expect": {"100-continue"}}, want: base()},
		{name: "reads the answer", readsAnswer: true,
			want: http.Header{"User-Agent": {"agent/1"}, "Content-Type": {"application/json"}}},
		{name: "route key", key: "k1",
			want: http.Header{"User-Agent": {"agent/1"}, "Content-Type": {"application/json"}, "Accept-Encoding": {"gzip"}, "Authorization": {"Bearer k1"}}},
	}
	for _, c := range cases {
		in := base()
		for k, v := range c.add {
			in[k] = v
		}
		before := in.Clone()
		got := upstreamHeader(in, c.key, c.readsAnswer)
		if !reflect.DeepEqual(in, before) {
			t.Errorf("%s: the client's header changed: %v", c.name, in)
		}
		shared := reflect.ValueOf(got).UnsafePointer() == reflect.ValueOf(in).UnsafePointer()
		switch {
		case c.want == nil && !shared:
			t.Errorf("%s: copied although nothing changes", c.name)
		case c.want != nil && shared:
			t.Errorf("%s: the client's map sent although it changes", c.name)
		case c.want != nil && !reflect.DeepEqual(got, c.want):
			t.Errorf("%s: sent %v, want %v", c.name, got, c.want)
		}
	}
	noAgent := http.Header{"Content-Type": {"application/json"}}
	if got := upstreamHeader(noAgent, "", false); len(got["User-Agent"]) != 1 || got["User-Agent"][0] != "" || len(noAgent) != 1 {
		t.Errorf("no User-Agent: sent %v (client's %v), want an empty one on a copy", got, noAgent)
	}
}
