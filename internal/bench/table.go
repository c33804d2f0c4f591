package bench

import (
	"fmt"
	"io"
	"slices"
	"time"
)

// table collects the rows of the report.
type table struct{ rows [][5]string }

func (t *table) add(section, metric string, direct, proxied time.Duration, target string) {
	t.rows = append(t.rows, [5]string{section, metric, fmtDur(direct), fmtDur(proxied), fmtDur(proxied-direct) + targetNote(target)})
}

func (t *table) addCount(section, metric string, direct, proxied int, target string) {
	t.rows = append(t.rows, [5]string{section, metric, fmt.Sprint(direct), fmt.Sprint(proxied), fmt.Sprint(proxied-direct) + targetNote(target)})
}

func (t *table) addBytes(section, metric string, direct, proxied int64, target string) {
	mb := func(b int64) string { return fmt.Sprintf("%.1f MB", float64(b)/1e6) }
	t.rows = append(t.rows, [5]string{section, metric, mb(direct), mb(proxied), mb(proxied) + targetNote(target)})
}

func (t *table) ratio(section, metric string, r float64, target string) {
	t.rows = append(t.rows, [5]string{section, metric, "", "", fmt.Sprintf("%+.0f%%", 100*r) + targetNote(target)})
}

// note adds a row whose value is text.
func (t *table) note(section, metric, value string) {
	t.rows = append(t.rows, [5]string{section, metric, "", "", value})
}

func targetNote(target string) string {
	if target == "" {
		return ""
	}
	return " (target " + target + ")"
}

func (t *table) print(w io.Writer) {
	fmt.Fprintln(w, "| workload | metric | direct | via proxy | difference |")
	fmt.Fprintln(w, "|---|---|---:|---:|---|")
	for _, r := range t.rows {
		fmt.Fprintf(w, "| %s | %s | %s | %s | %s |\n", r[0], r[1], r[2], r[3], r[4])
	}
}

// pct returns the p-th percentile (nearest rank) of ds.
func pct(ds []time.Duration, p float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	i := int(float64(len(s))*p/100+0.5) - 1
	return s[min(max(i, 0), len(s)-1)]
}
