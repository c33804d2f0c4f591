package main

import (
	"bufio"
	"encoding/json"
	"io"
	"maps"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil/promlint"
	"github.com/shaperproxy/shaperproxy/internal/config"
	"github.com/shaperproxy/shaperproxy/internal/fakeupstream"
	"gopkg.in/yaml.v3"
)

var metricName = regexp.MustCompile(`\bshaperproxy_[a-z0-9_]*[a-z0-9]\b`)

// servedMetrics runs traffic through the whole stack (a tool turn with a
// stall, a review that fails, a refused CONNECT) so that every family the
// contrib files use has a sample, and returns the /metrics page.
func servedMetrics(t *testing.T) string {
	t.Helper()
	r := newReviewRig(t, "error", nil, func(c *config.Config) { c.Deliberate.Routes = []string{"default"} })
	long := strings.Repeat("Let me think about the schema once more. ", 400)
	r.up.Push(fakeupstream.Response{Reply: &fakeupstream.Reply{Reasoning: long, ToolCalls: []fakeupstream.ToolCall{{Name: "read_file", Arguments: `{"path":"a"}`}}}})
	r.up.Push(fakeupstream.Response{Reply: &fakeupstream.Reply{Reasoning: "Done reading.", Content: "Fixed."}})
	collect(t, r.agent("sys"), "fix it")
	base := strings.TrimSuffix(r.url, "/v1")
	conn, err := net.Dial("tcp", strings.TrimPrefix(base, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_, _ = io.WriteString(conn, "CONNECT elsewhere.example:443 HTTP/1.1\r\nHost: elsewhere.example:443\r\n\r\n")
	if resp, err := http.ReadResponse(bufio.NewReader(conn), nil); err != nil || resp.StatusCode != http.StatusForbidden {
		t.Fatalf("refused CONNECT: %v %v", resp, err)
	}
	resp, err := http.Get(base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}

// servedFamilies returns the metric names a /metrics page serves, with the
// series names of its histograms (_bucket, _sum, _count).
func servedFamilies(page string) map[string]bool {
	out := map[string]bool{}
	for _, m := range regexp.MustCompile(`(?m)^# TYPE (\S+) (\S+)$`).FindAllStringSubmatch(page, -1) {
		out[m[1]] = true
		if m[2] == "histogram" {
			out[m[1]+"_bucket"], out[m[1]+"_sum"], out[m[1]+"_count"] = true, true, true
		}
	}
	return out
}

// dashboardExprs returns the queries of a Grafana dashboard: every
// "expr", and the template variables' queries.
func dashboardExprs(t *testing.T, path string) []string {
	t.Helper()
	var doc any
	if err := json.Unmarshal([]byte(readFileT(t, path)), &doc); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	var out []string
	var walk func(v any)
	walk = func(v any) {
		switch v := v.(type) {
		case map[string]any:
			for k, x := range v {
				if s, ok := x.(string); ok && (k == "expr" || k == "definition") {
					out = append(out, s)
				}
				walk(x)
			}
		case []any:
			for _, x := range v {
				walk(x)
			}
		}
	}
	walk(doc)
	return out
}

// alertExprs returns the expressions of a Prometheus rules file, checking
// that each rule has a name and a severity.
func alertExprs(t *testing.T, path string) []string {
	t.Helper()
	var doc struct {
		Groups []struct {
			Rules []struct {
				Alert  string            `yaml:"alert"`
				Expr   string            `yaml:"expr"`
				Labels map[string]string `yaml:"labels"`
			} `yaml:"rules"`
		} `yaml:"groups"`
	}
	if err := yaml.Unmarshal([]byte(readFileT(t, path)), &doc); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	var out []string
	for _, g := range doc.Groups {
		for _, r := range g.Rules {
			if r.Alert == "" || r.Expr == "" || r.Labels["severity"] == "" {
				t.Errorf("%s: rule %q lacks a name, an expression or a severity", path, r.Alert)
			}
			out = append(out, r.Expr)
		}
	}
	return out
}

// TestContribMetricNames: every metric the Grafana dashboard and the
// alert rules in contrib/ use is served at /metrics by a built proxy, and
// what it serves follows Prometheus' naming conventions (promlint).
func TestContribMetricNames(t *testing.T) {
	page := servedMetrics(t)
	served := servedFamilies(page)
	problems, err := promlint.New(strings.NewReader(page)).Lint()
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("promlint: %s: %s", p.Metric, p.Text)
	}
	contrib := filepath.Join("..", "..", "contrib")
	exprs := map[string][]string{
		"grafana-dashboard.json": dashboardExprs(t, filepath.Join(contrib, "grafana-dashboard.json")),
		"prometheus-alerts.yml":  alertExprs(t, filepath.Join(contrib, "prometheus-alerts.yml")),
	}
	for file, list := range exprs {
		if len(list) < 5 {
			t.Errorf("%s: only %d queries", file, len(list))
		}
		for _, e := range list {
			for _, name := range metricName.FindAllString(e, -1) {
				if !served[name] {
					t.Errorf("%s uses %s, which /metrics does not serve", file, name)
				}
			}
		}
	}
	for _, want := range []string{"shaperproxy_time_to_first_token_seconds", "shaperproxy_tunnels_total", "shaperproxy_capture_dropped_total", "shaperproxy_review_total", "shaperproxy_originals_refused_total"} {
		if !strings.Contains(readFileT(t, filepath.Join(contrib, "prometheus-alerts.yml")), want) {
			t.Errorf("no alert on %s", want)
		}
	}
}

// definedMetrics returns the metric names the program's source defines
// (string literals "shaperproxy_…" outside tests), and those of the proxy
// package alone.
func definedMetrics(t *testing.T) (all, proxyOwn map[string]bool) {
	t.Helper()
	all, proxyOwn = map[string]bool{}, map[string]bool{}
	literal := regexp.MustCompile(`"(shaperproxy_[a-z0-9_]+)"`)
	root := filepath.Join("..", "..")
	err := filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") || strings.Contains(path, "testdata") {
			return err
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for _, m := range literal.FindAllStringSubmatch(string(b), -1) {
			if m[1] == "shaperproxy_error" { // the error type of the proxy's own answers
				continue
			}
			all[m[1]] = true
			if filepath.Base(filepath.Dir(path)) == "proxy" {
				proxyOwn[m[1]] = true
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return all, proxyOwn
}

// TestReadmeMetricNames: every metric the README names is one the program
// defines (in its source, or served at /metrics), and every metric of the
// proxy itself is in the README's list.
func TestReadmeMetricNames(t *testing.T) {
	readme := readFileT(t, filepath.Join("..", "..", "README.md"))
	named := map[string]bool{}
	for _, loc := range metricName.FindAllStringIndex(readme, -1) {
		if loc[1] < len(readme) && readme[loc[1]] == '*' {
			continue // a prefix: shaperproxy_review_*
		}
		named[readme[loc[0]:loc[1]]] = true
	}
	all, proxyOwn := definedMetrics(t)
	for n := range servedFamilies(servedMetrics(t)) { // names built at run time
		all[n] = true
	}
	if len(proxyOwn) < 15 {
		t.Fatalf("found only %d metrics of the proxy package", len(proxyOwn))
	}
	for _, n := range slices.Sorted(maps.Keys(named)) {
		if !all[n] {
			t.Errorf("the README names %s, which the program does not define", n)
		}
	}
	for _, n := range slices.Sorted(maps.Keys(proxyOwn)) {
		if !named[n] {
			t.Errorf("the README's metrics list lacks %s", n)
		}
	}
}
