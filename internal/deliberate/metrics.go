package deliberate

import (
	"strings"

	"github.com/prometheus/client_golang/prometheus"
)

type metrics struct {
	calls    *prometheus.CounterVec
	branches *prometheus.CounterVec
	seconds  *prometheus.HistogramVec
	tokensC  *prometheus.CounterVec
}

func newMetrics() *metrics {
	return &metrics{
		calls: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "shaperproxy_deliberate_calls_total", Help: "Deliberate calls the proxy took out of responses, by mode (alone, mixed: beside the client's calls, invalid: arguments refused, busy: refused past the deliberations running at once).",
		}, []string{"mode"}),
		branches: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "shaperproxy_deliberate_branches_total", Help: "Deliberate branches by role and outcome (update, no_update, error).",
		}, []string{"role", "outcome"}),
		seconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "shaperproxy_deliberate_branch_seconds", Help: "Time a deliberate branch took, by role.",
			Buckets: prometheus.ExponentialBuckets(0.05, 2, 14),
		}, []string{"role"}),
		tokensC: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "shaperproxy_deliberate_tokens_total", Help: "Tokens the deliberate branches cost, by role and kind (prompt, completion), as the upstream reported them.",
		}, []string{"role", "kind"}),
	}
}

func (m *metrics) collectors() []prometheus.Collector {
	return []prometheus.Collector{m.calls, m.branches, m.seconds, m.tokensC}
}

// branch counts one branch's outcome, time and tokens.
func (m *metrics) branch(o outcome) {
	role := string(o.Branch.Role)
	result := "error"
	if o.Packet != nil {
		result = strings.ReplaceAll(o.Packet.Status, "-", "_")
	}
	m.branches.WithLabelValues(role, result).Inc()
	if o.Took > 0 {
		m.seconds.WithLabelValues(role).Observe(o.Took.Seconds())
	}
	for _, k := range []string{"prompt", "completion"} {
		if n := o.Usage.Get(k + "_tokens").Int(); n > 0 {
			m.tokensC.WithLabelValues(role, k).Add(float64(n))
		}
	}
}
