package accounting

import (
	"io"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/shaperproxy/shaperproxy/conv"
	"github.com/shaperproxy/shaperproxy/proxy"
	"github.com/shaperproxy/shaperproxy/sse"
)

// end runs one call through the meter: a stream whose last chunk
// carries the usage, or a body, with the usage the proxy finds in it on
// the end (conv.UsageWatcher, as the proxy runs it).
func end(m *Meter, call *proxy.Call, usage string, stream bool) {
	s := m.Request(call, &proxy.Upstream{})
	s.Response(&proxy.ResponseInfo{Status: 200, Stream: stream})
	data := `{"choices":[],"usage":` + usage + `}`
	var w conv.UsageWatcher
	if stream {
		ev := &sse.Event{Data: []byte(data), HasData: true}
		w.Event(ev.Data)
		s.Event(ev, 0, time.Millisecond)
	} else {
		w.Body([]byte(data))
		s.Body([]byte(data))
	}
	s.End(proxy.End{Outcome: proxy.OutcomeComplete, Usage: w.Raw(), UsageModel: w.Model()})
}

// scrape returns what /metrics serves for reg.
func scrape(t *testing.T, reg *prometheus.Registry) string {
	t.Helper()
	rec := httptest.NewRecorder()
	promhttp.HandlerFor(reg, promhttp.HandlerOpts{ErrorHandling: promhttp.PanicOnError}).ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	b, err := io.ReadAll(rec.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestMeter counts tokens and cost per route, model and kind, bounds the
// model label per route, and counts chat calls without a usage.
func TestMeter(t *testing.T) {
	m := NewMeter(nil, 2)
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(m.Collectors()...)
	u := `{"prompt_tokens":100,"prompt_cache_hit_tokens":60,"prompt_cache_miss_tokens":40,"completion_tokens":10,"completion_tokens_details":{"reasoning_tokens":4}}`
	for _, model := range []string{"deepseek-v4-flash", "deepseek-v4-flash", "m2", "m3", "m4"} {
		end(m, &proxy.Call{Route: "r", Model: model, Chat: true}, u, true)
	}
	end(m, &proxy.Call{Route: "r", Model: "deepseek-v4-flash", Chat: true, Internal: true, Purpose: "review-child"}, u, false)
	end(m, &proxy.Call{Route: "r", Model: "m2", Chat: true}, `null`, true)
	end(m, &proxy.Call{Route: "r2", Model: "m4", Chat: true}, u, true)     // another route names its own models
	end(m, &proxy.Call{Route: "r", Model: "", Chat: false}, `null`, false) // not chat, no usage: not counted

	got := scrape(t, reg)
	for _, line := range []string{
		`shaperproxy_usage_cache_hit_tokens_total{kind="primary",model="deepseek-v4-flash",route="r"} 120`,
		`shaperproxy_usage_cache_hit_tokens_total{kind="review-child",model="deepseek-v4-flash",route="r"} 60`,
		`shaperproxy_usage_cache_hit_tokens_total{kind="primary",model="m2",route="r"} 60`,
		`shaperproxy_usage_cache_hit_tokens_total{kind="primary",model="other",route="r"} 120`, // m3, m4: past the first two
		`shaperproxy_usage_cache_hit_tokens_total{kind="primary",model="m4",route="r2"} 60`,
		`shaperproxy_usage_cache_miss_tokens_total{kind="primary",model="deepseek-v4-flash",route="r"} 80`,
		`shaperproxy_usage_prompt_tokens_total{kind="primary",model="deepseek-v4-flash",route="r"} 200`,
		`shaperproxy_usage_completion_tokens_total{kind="primary",model="deepseek-v4-flash",route="r"} 20`,
		`shaperproxy_usage_reasoning_tokens_total{kind="primary",model="deepseek-v4-flash",route="r"} 8`,
		`shaperproxy_usage_calls_total{kind="primary",model="m2",route="r",usage="missing"} 1`,
		`shaperproxy_usage_calls_total{kind="review-child",model="deepseek-v4-flash",route="r",usage="reported"} 1`,
		// deepseek-v4's prices: $0.003 per million hits, $0.15 per million
		// misses (no output price known): (60×0.003 + 40×0.15)/1e6.
		`shaperproxy_usage_cost_dollars_total{kind="review-child",model="deepseek-v4-flash",route="r"} 6.18e-06`,
	} {
		if !strings.Contains(got, line+"\n") {
			t.Errorf("/metrics lacks %s", line)
		}
	}
	if strings.Contains(got, `model="m3"`) || strings.Contains(got, `cost_dollars_total{kind="primary",model="m2"`) || strings.Contains(got, `model=""`) {
		t.Errorf("a model past the bound, a cost without prices, or a call that is not chat is counted:\n%s", got)
	}
}

// TestMeterHostileUsage: an upstream's negative counts and cost count as
// zero (a Prometheus counter panics on a negative Add, in the request's
// goroutine), and an attempt dropped for a retry is not a call.
func TestMeterHostileUsage(t *testing.T) {
	m := NewMeter(nil, 0)
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(m.Collectors()...)
	call := &proxy.Call{Route: "r", Model: "deepseek-v4-flash", Chat: true}
	end(m, call, `{"prompt_tokens":-5,"prompt_cache_hit_tokens":-1,"prompt_cache_miss_tokens":-4,"completion_tokens":-9,"cost":-1}`, false)
	end(m, call, `{"input_tokens":-3,"output_tokens":-2,"cache_read_input_tokens":-7}`, true)
	s := m.Request(call, &proxy.Upstream{})
	s.End(proxy.End{Outcome: proxy.OutcomeRetried, Usage: []byte(`{"prompt_tokens":1000,"completion_tokens":1}`)})

	got := scrape(t, reg)
	for _, line := range []string{
		`shaperproxy_usage_calls_total{kind="primary",model="deepseek-v4-flash",route="r",usage="reported"} 2`,
		`shaperproxy_usage_prompt_tokens_total{kind="primary",model="deepseek-v4-flash",route="r"} 0`,
		`shaperproxy_usage_completion_tokens_total{kind="primary",model="deepseek-v4-flash",route="r"} 0`,
	} {
		if !strings.Contains(got, line+"\n") {
			t.Errorf("missing %s in:\n%s", line, got)
		}
	}
	if strings.Contains(got, "reported_cost") && !strings.Contains(got, `shaperproxy_usage_reported_cost_dollars_total{kind="primary",model="deepseek-v4-flash",route="r"} 0`) {
		t.Errorf("a negative reported cost was added:\n%s", got)
	}
}
