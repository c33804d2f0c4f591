package proxy

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
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
