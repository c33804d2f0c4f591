package proxy

import (
	"bytes"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/shaperproxy/shaperproxy/conv"
	"github.com/shaperproxy/shaperproxy/fixtures"
)

// TestHistoryMetrics: /metrics counts a conversation's next request as
// read against its previous one, and its repeated messages as reused —
// over real sockets, as an agent sends its history twice.
func TestHistoryMetrics(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"choices":[{"message":{"role":"assistant","content":"ok"}}]}`))
	}))
	defer up.Close()
	_, px := newTestProxy(t, up.URL, nil)
	// A system prompt over the 2 KB by which a request finds the earlier
	// ones of its beginning.
	history := `{"role":"system","content":"` + strings.Repeat("Be brief. ", 300) + `"},{"role":"user","content":"hello"},{"role":"assistant","reasoning_content":"Say hi.","content":"hi"}`
	for _, msgs := range []string{history, history + `,{"role":"user","content":"more"},{"role":"assistant","content":"sure"}`} {
		resp, _ := do(t, rawClient(), "POST", px.URL+"/v1/chat/completions", []byte(`{"model":"m","messages":[`+msgs+`]}`), nil)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("status %d", resp.StatusCode)
		}
	}
	resp, _ := do(t, rawClient(), "POST", px.URL+"/v1/chat/completions", []byte(`{"model":"m","input":"not chat"}`), nil)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("status %d", resp.StatusCode)
	}
	page := metricsText(t, px.URL)
	for sample, want := range map[string]float64{
		`shaperproxy_history_requests_total{how="new"}`:       2, // the first, and the body that is no chat request
		`shaperproxy_history_requests_total{how="repeated"}`:  1,
		`shaperproxy_history_messages_total{how="reused"}`:    3,
		`shaperproxy_history_messages_total{how="parsed"}`:    5,
		`shaperproxy_history_keyed_messages_total`:            0, // no body a block long
		`shaperproxy_edited_bodies_total{how="written_over"}`: 0,
		`shaperproxy_edited_bodies_total{how="fresh"}`:        0,
		`shaperproxy_edited_bytes_total{how="kept"}`:          0,
		`shaperproxy_edited_bytes_total{how="written"}`:       0,
	} {
		if got := metricValue(page, sample); got != want {
			t.Errorf("%s = %v, want %v", sample, got, want)
		}
	}
}

// TestHistoryKeyed: a long history sent again is taken on the keys of
// the blocks its body was read in, over real sockets; the upstream gets
// the bytes the client sent both times; a body sent without its length
// (read another way) is compared, and its view is still right.
func TestHistoryKeyed(t *testing.T) {
	var got [][]byte
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		got = append(got, b)
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"choices":[{"message":{"role":"assistant","content":"ok"}}]}`))
	}))
	defer up.Close()
	_, px := newTestProxy(t, up.URL, nil)
	seed := fixtures.SeedHistory()
	view, err := conv.ParseRequest(bytes.Clone(seed))
	if err != nil {
		t.Fatal(err)
	}
	last := view.Messages[len(view.Messages)-1]
	grown := append(bytes.Clone(seed[:last.End]), `,{"role":"user","content":"go on"}`...)
	grown = append(grown, seed[last.End:]...)
	bodies := [][]byte{seed, grown}
	for _, b := range bodies {
		resp, _ := do(t, rawClient(), "POST", px.URL+"/v1/chat/completions", b, nil)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("status %d", resp.StatusCode)
		}
	}
	page := metricsText(t, px.URL)
	keyed, reused := metricValue(page, `shaperproxy_history_keyed_messages_total`), metricValue(page, `shaperproxy_history_messages_total{how="reused"}`)
	// Every message of the first request ends in a whole block of both
	// bodies but those in its last partial block.
	want := 0
	for _, m := range view.Messages {
		if m.End <= len(seed)/(16<<10)*(16<<10) {
			want++
		}
	}
	if keyed != float64(want) || reused != float64(len(view.Messages)) {
		t.Fatalf("%v messages keyed and %v reused, want %d and %d", keyed, reused, want, len(view.Messages))
	}
	// Without its length: read whole another way, not keyed, compared.
	req, err := http.NewRequest("POST", px.URL+"/v1/chat/completions", io.MultiReader(bytes.NewReader(grown), strings.NewReader(" ")))
	if err != nil {
		t.Fatal(err)
	}
	resp, err := rawClient().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	bodies = append(bodies, append(bytes.Clone(grown), ' '))
	page = metricsText(t, px.URL)
	if k := metricValue(page, `shaperproxy_history_keyed_messages_total`); k != keyed {
		t.Fatalf("a body read without its length keyed %v messages", k-keyed)
	}
	if r := metricValue(page, `shaperproxy_history_messages_total{how="reused"}`); r != reused+float64(len(view.Messages)+1) {
		t.Fatalf("%v messages reused of the third request, want %d", r-reused, len(view.Messages)+1)
	}
	if len(got) != len(bodies) {
		t.Fatalf("upstream got %d requests", len(got))
	}
	for i := range bodies {
		if !bytes.Equal(got[i], bodies[i]) {
			t.Fatalf("request %d changed on its way", i)
		}
	}
}

// TestHistoryMetricsShared: two proxies made with one Metrics both start,
// and its counters are the sums of their parses.
func TestHistoryMetricsShared(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"choices":[{"message":{"role":"assistant","content":"ok"}}]}`))
	}))
	defer up.Close()
	m := NewMetrics()
	_, a := newTestProxy(t, up.URL, func(o *Options) { o.Metrics = m })
	_, b := newTestProxy(t, up.URL, func(o *Options) { o.Metrics = m })
	for _, px := range []string{a.URL, b.URL} {
		resp, _ := do(t, rawClient(), "POST", px+"/v1/chat/completions", []byte(`{"model":"m","messages":[{"role":"user","content":"hi"}]}`), nil)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("status %d", resp.StatusCode)
		}
	}
	page := metricsText(t, a.URL)
	if got := metricValue(page, `shaperproxy_history_requests_total{how="new"}`); got != 2 {
		t.Fatalf("%v new requests counted, want both proxies' 2", got)
	}
	if got := metricValue(page, `shaperproxy_history_messages_total{how="parsed"}`); got != 2 {
		t.Fatalf("%v messages parsed, want 2", got)
	}
}
