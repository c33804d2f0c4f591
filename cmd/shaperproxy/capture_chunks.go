package main

// Text output of a stream's events: what each carried (capture show
// --chunks, and the event lines of capture tail and read).

import (
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/shaperproxy/shaperproxy/capture"
	"github.com/shaperproxy/shaperproxy/internal/runecut"
)

// deltaClip is how many bytes of one text a delta shows without --full.
const deltaClip = 200

// printChunks lists a call's stream events: offset since the request,
// gap since the previous event, size and the delta.
func printChunks(w io.Writer, chunks []capture.Chunk, full bool) error {
	if len(chunks) == 0 {
		_, err := fmt.Fprintln(w, "\nchunks: none (the response was not a stream, or no event was captured)")
		return err
	}
	n := deltaClip
	if full {
		n = -1
	}
	var b strings.Builder
	fmt.Fprintf(&b, "\nchunks: %d events (%s)\n", len(chunks), chunks[0].Where)
	fmt.Fprintf(&b, "  %5s %11s %11s %7s  %s\n", "SEQ", "OFFSET", "GAP", "BYTES", "DELTA")
	for _, c := range chunks {
		fmt.Fprintf(&b, "  %5d %9.1fms %9.1fms %7d  %s\n", c.Seq, ms(c.Offset), ms(c.Gap), c.Size, describeDelta(c.EventDelta, n))
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// describeDelta is one line saying what an event carried; each text is
// quoted and cut to n bytes (n < 0: whole).
func describeDelta(d capture.EventDelta, n int) string {
	var p []string
	if d.Name != "" {
		p = append(p, "event="+d.Name)
	}
	switch {
	case d.Done:
		p = append(p, "[DONE]")
	case d.Comment:
		p = append(p, "comment "+quote(string(d.Other), n))
	case d.Invalid:
		p = append(p, "not JSON "+quote(string(d.Other), n))
	case d.Other != nil:
		p = append(p, "data "+quote(string(d.Other), n))
	}
	for _, c := range d.Choices {
		p = append(p, describeChoice(c, len(d.Choices) > 1, n)...)
	}
	if d.Usage != nil {
		p = append(p, "usage "+clipN(d.Usage, n))
	}
	if d.Error != nil {
		p = append(p, "error "+clipN(d.Error, n))
	}
	if len(p) == 0 {
		return "(empty delta)"
	}
	return strings.Join(p, " ")
}

// describeChoice lists the fields one choice's delta set.
func describeChoice(c capture.ChoiceDelta, many bool, n int) []string {
	var p []string
	if many {
		p = append(p, fmt.Sprintf("[choice %d]", c.Index))
	}
	if c.Role != "" {
		p = append(p, "role="+c.Role)
	}
	if c.ReasoningField != "" {
		p = append(p, c.ReasoningField+" "+quote(c.Reasoning, n))
	}
	if c.Content != "" {
		p = append(p, "content "+quote(c.Content, n))
	}
	for _, tc := range c.ToolCalls {
		s := fmt.Sprintf("tool_calls[%d]", tc.Index)
		for _, kv := range [][2]string{{"id", tc.ID}, {"type", tc.Type}, {"name", tc.Name}} {
			if kv[1] != "" {
				s += " " + kv[0] + "=" + kv[1]
			}
		}
		p = append(p, s+" arguments "+quote(tc.Arguments, n))
	}
	if c.FinishReason != "" {
		p = append(p, "finish_reason="+c.FinishReason)
	}
	return p
}

// quote returns s as a Go string literal, cut to n bytes first (n < 0:
// whole) with the number of bytes left out.
func quote(s string, n int) string {
	if n < 0 || len(s) <= n {
		return strconv.Quote(s)
	}
	kept := runecut.Prefix(s, n)
	return fmt.Sprintf("%s… (+%d bytes)", strconv.Quote(kept), len(s)-len(kept))
}

// clipN is clip with n < 0 meaning whole.
func clipN(b []byte, n int) string {
	if n < 0 {
		n = len(b)
	}
	return clip(b, n)
}
