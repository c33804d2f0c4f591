package proxy

import (
	"fmt"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// The hold of a chat request (from its body's last byte to its hand-off
// upstream) is timed by step, for /metrics
// (shaperproxy_request_hold_step_seconds): the parse, each transform in
// its order, and the send (the upstream request built and handed to the
// transport). A step's end is noted as the call runs (Call.steps); the
// durations are observed when the call ends, with its other times.

// maxHoldSteps bounds the steps a call notes: the parse and up to
// maxHoldSteps-1 transforms (a proxy with more times the last ones as
// one step, under the last's name).
const maxHoldSteps = 8

// holdStepObservers resolves the histograms of the steps once: "parse",
// each transform's type without its package path ("reqshape.Shaper"; a
// second transform of one type "reqshape.Shaper#2": each step is observed
// once a request), "send".
func holdStepObservers(vec *prometheus.HistogramVec, ts []RequestTransform) []prometheus.Observer {
	names := []string{"parse"}
	seen := map[string]int{}
	for i, t := range ts {
		name := strings.TrimPrefix(fmt.Sprintf("%T", t), "*")
		if seen[name]++; seen[name] > 1 {
			name = fmt.Sprintf("%s#%d", name, seen[name])
		}
		if i+1 < maxHoldSteps {
			names = append(names, name)
		} else {
			names[maxHoldSteps-1] = name
		}
	}
	names = append(names, "send")
	out := make([]prometheus.Observer, len(names))
	for i, n := range names {
		out[i] = vec.WithLabelValues(n)
	}
	return out
}

// stepDone notes the end of step i of the call's hold (0 the parse, i the
// transform i-1), for a first attempt whose body was read whole.
func (c *Call) stepDone(i int) {
	if c.read > 0 && !c.Retry {
		c.steps[min(i, maxHoldSteps-1)] = c.Since() - c.read
	}
}

// observeSteps records the steps of a chat request's hold, whose whole
// is hold: each noted step from the end of the one before, and the send
// from the last to the hand-off.
func (p *Proxy) observeSteps(call *Call, hold time.Duration) {
	n := len(p.holdSteps) - 1 // the noted steps; the send is the last observer
	var end time.Duration
	for i := range n {
		at := max(call.steps[i], end) // a step not noted (a transform skipped at once) took nothing
		p.holdSteps[i].Observe((at - end).Seconds())
		end = at
	}
	p.holdSteps[n].Observe(max(hold-end, 0).Seconds())
}
