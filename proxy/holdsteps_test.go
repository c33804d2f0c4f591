package proxy

import (
	"context"
	"math"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// slowTransform takes d and changes nothing; idleTransform changes
// nothing at once. Each is timed under its own type.
type slowTransform struct{ d time.Duration }

func (s slowTransform) TransformRequest(_ context.Context, _ *Call, body []byte) ([]byte, error) {
	time.Sleep(s.d)
	return body, nil
}

type idleTransform struct{}

func (idleTransform) TransformRequest(_ context.Context, _ *Call, body []byte) ([]byte, error) {
	return body, nil
}

// TestHoldSteps: a chat request's hold is timed by step, each transform
// under its type, over real sockets: the 100 ms a transform takes show in
// its own step and in no other, and the steps add up to the hold; a
// request that is no chat request is held but not counted by step.
func TestHoldSteps(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"choices":[{"message":{"role":"assistant","content":"ok"}}]}`))
	}))
	defer up.Close()
	const slow = 100 * time.Millisecond
	_, px := newTestProxy(t, up.URL, func(o *Options) {
		o.Transforms = []RequestTransform{idleTransform{}, slowTransform{slow}}
	})
	post := func(path, body string) {
		if resp, _ := do(t, rawClient(), "POST", px.URL+path, []byte(body), nil); resp.StatusCode != http.StatusOK {
			t.Fatalf("status %d", resp.StatusCode)
		}
	}
	step := func(page, name, what string) float64 {
		return metricValue(page, `shaperproxy_request_hold_step_seconds_`+what+`{step="`+name+`"}`)
	}
	// A call's times are recorded when it finishes, which may come just
	// after its client has the answer: the page is read until it counts
	// the requests held and the chat requests' last step, "send" (or a
	// few seconds went by, and the checks below fail).
	held := func(page string) float64 {
		n := 0.0 // under any model label
		for _, line := range strings.Split(page, "\n") {
			if rest, ok := strings.CutPrefix(line, "shaperproxy_request_hold_seconds_count{"); ok {
				v, _ := strconv.ParseFloat(rest[strings.LastIndexByte(rest, ' ')+1:], 64)
				n += v
			}
		}
		return n
	}
	heldBy := func(want float64) (string, float64) {
		page := metricsWhen(t, px.URL, func(page string) bool { return held(page) >= want && step(page, "send", "count") >= 1 })
		return page, held(page)
	}
	post("/v1/chat/completions", `{"model":"m","messages":[{"role":"user","content":"hi"}]}`)
	page, _ := heldBy(1)
	steps := []string{"parse", "proxy.idleTransform", "proxy.slowTransform", "send"}
	var sum float64
	for _, name := range steps {
		if n := step(page, name, "count"); n != 1 {
			t.Errorf("step %s counted %v requests, want 1", name, n)
		}
		s := step(page, name, "sum")
		if name == "proxy.slowTransform" && s < slow.Seconds() {
			t.Errorf("the slow transform's step took %v s, under its %v", s, slow)
		}
		if name != "proxy.slowTransform" && s >= slow.Seconds() {
			t.Errorf("step %s took %v s: the slow transform's time", name, s)
		}
		sum += s
	}
	hold := metricValue(page, `shaperproxy_request_hold_seconds_sum{model="m",route="default"}`)
	if math.Abs(sum-hold) > 1e-9 {
		t.Errorf("the steps add up to %v s, the hold is %v s", sum, hold)
	}
	post("/v1/embeddings", `{"model":"m","input":"hi"}`)
	page, n := heldBy(2)
	if n != 2 {
		t.Fatalf("%v requests held, want 2", n)
	}
	for _, name := range steps {
		if n := step(page, name, "count"); n != 1 {
			t.Errorf("step %s counted %v requests after a request that is no chat, want 1", name, n)
		}
	}
}

// TestHoldStepNames: each step has a label of its own, so each is observed
// once a request: two transforms of one type are told apart.
func TestHoldStepNames(t *testing.T) {
	vec := NewMetrics().holdStep
	obs := holdStepObservers(vec, []RequestTransform{idleTransform{}, slowTransform{}, idleTransform{}})
	for _, o := range obs {
		o.Observe(0.001)
	}
	want := map[string]bool{"parse": true, "proxy.idleTransform": true, "proxy.slowTransform": true, "proxy.idleTransform#2": true, "send": true}
	for name := range want {
		h, err := vec.GetMetricWithLabelValues(name)
		if err != nil {
			t.Fatal(err)
		}
		m := &dto.Metric{}
		if err := h.(prometheus.Metric).Write(m); err != nil {
			t.Fatal(err)
		}
		if n := m.GetHistogram().GetSampleCount(); n != 1 {
			t.Errorf("step %s observed %d times, want 1", name, n)
		}
	}
}
