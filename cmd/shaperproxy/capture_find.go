package main

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/shaperproxy/shaperproxy/capture"
)

// findOptions configure findCmd.
type findOptions struct {
	captureOptions
	Query capture.Query
}

// findCmd prints the calls that match o.Query, oldest first; a note on
// stderr says when --limit stopped the search.
func findCmd(stdout, stderr io.Writer, o findOptions) error {
	r, err := capture.OpenReader(o.Dir)
	if err != nil {
		return err
	}
	defer r.Close()
	if bar := newBar(o.Progress, 0, "searching"); bar != nil {
		defer bar.Finish()
		o.Query.Progress = func(done, total int64) {
			bar.ChangeMax64(total)
			_ = bar.Set64(done)
		}
	}
	res, err := capture.Find(r, o.Query)
	if err != nil {
		return err
	}
	if o.JSON {
		err = writeFindJSON(stdout, res.Matches)
	} else {
		err = printFind(stdout, res.Matches)
	}
	if err == nil && res.Truncated {
		fmt.Fprintf(stderr, "shaperproxy: capture find: stopped at --limit %d; later calls may match too (--limit 0 for all, or narrow --since/--until)\n", o.Query.Limit)
	}
	return err
}

func writeFindJSON(w io.Writer, matches []capture.Match) error {
	out := newJSONLines(w)
	for _, m := range matches {
		if err := out.write(toFindJSON(m)); err != nil {
			return err
		}
	}
	return nil
}

// printFind prints one line per call, and under it where the text was.
func printFind(w io.Writer, matches []capture.Match) error {
	if len(matches) == 0 {
		_, err := fmt.Fprintln(w, "no call matches.")
		return err
	}
	var table strings.Builder
	tw := tabwriter.NewWriter(&table, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "TIME\tCALL\tROUTE\tMODEL\tSTATUS\tOUTCOME\tDURATION\tREQUEST")
	for _, m := range matches {
		call := m.Call
		if m.Internal {
			call += " (internal)"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s %s\n", fmtTime(m.Time), call, dash(m.Route), dash(m.Model),
			dash(statusText(m.Status)), dash(m.Outcome), durationOrDash(m.Duration, m.Outcome != ""), m.Method, m.URL)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	rows := strings.SplitAfter(table.String(), "\n")
	var b strings.Builder
	b.WriteString(rows[0])
	for i, m := range matches {
		b.WriteString(rows[i+1])
		if m.Parent != "" {
			fmt.Fprintf(&b, "    made by the proxy for call %s\n", m.Parent)
		}
		for _, h := range m.Hits {
			fmt.Fprintf(&b, "    %s %s: %s%s\n", h.In, h.Field, h.Snippet, moreFields(h.Fields))
		}
	}
	fmt.Fprintf(&b, "%d call(s); shaperproxy capture show CALL [--chunks] shows one.\n", len(matches))
	_, err := io.WriteString(w, b.String())
	return err
}

func statusText(s int) string {
	if s == 0 {
		return ""
	}
	return fmt.Sprint(s)
}

func dash(s string) string {
	if strings.TrimSpace(s) == "" {
		return "-"
	}
	return s
}

func moreFields(n int) string {
	if n <= 1 {
		return ""
	}
	return fmt.Sprintf(" (and %d more fields)", n-1)
}
