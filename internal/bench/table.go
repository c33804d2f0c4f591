package bench

import (
	"fmt"
	"io"
	"slices"
	"strings"
	"time"
)

// table collects the rows of the report, and the tables of sections
// that need more columns.
type table struct {
	rows  [][5]string
	wides []*wideTable
}

// wideTable is a table with its own columns.
type wideTable struct {
	title  string
	header []string
	rows   [][]string
}

func (w *wideTable) add(cells ...string) { w.rows = append(w.rows, cells) }

func (w *wideTable) print(out io.Writer) {
	fmt.Fprintf(out, "%s\n\n| %s |\n|", w.title, strings.Join(w.header, " | "))
	for i := range w.header {
		if i < 2 {
			fmt.Fprint(out, "---|")
		} else {
			fmt.Fprint(out, "---:|")
		}
	}
	fmt.Fprintln(out)
	for _, r := range w.rows {
		fmt.Fprintf(out, "| %s |\n", strings.Join(r, " | "))
	}
}

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
	if len(t.rows) > 0 {
		t.printMain(w)
	}
	for _, wt := range t.wides {
		if len(t.rows) > 0 {
			fmt.Fprintln(w)
		}
		wt.print(w)
	}
}

func (t *table) printMain(w io.Writer) {
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
