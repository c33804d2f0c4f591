package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"text/tabwriter"
	"time"

	"github.com/shaperproxy/shaperproxy/conv"
	"github.com/shaperproxy/shaperproxy/internal/config"
	"github.com/shaperproxy/shaperproxy/shaping"
	"github.com/tidwall/gjson"
)

// runShape runs the configured default shaping rule over a corpus: a JSONL
// file whose lines are reasoning strings, objects with a "reasoning" (or
// "reasoning_content" or "text") string, or chat request bodies (every
// assistant reasoning block of the request is taken).
func runShape(_ context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("shape", `usage: shaperproxy shape [--config FILE] [--stats] [--json] CORPUS.jsonl

Run the configured [shaping] default rule over a corpus: a JSONL file whose
lines are reasoning strings, objects with a "reasoning" (or
"reasoning_content" or "text") string, or chat request bodies (every
unsigned assistant reasoning block is taken). Prints each block shaped,
then a summary; --stats prints the summary only. With --json: one object
per block, or with --stats the summary as one object.
`, stdout)
	cfgPath := fs.String("config", "", "TOML configuration `file` (the [shaping] default rule is used)")
	statsOnly := fs.Bool("stats", false, "print only the summary, not each shaped block")
	asJSON := fs.Bool("json", false, "print JSON, one object per line (shapes in the README)")
	pos, err := fs.parseInterspersed(args)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		return fs.usageErr("want one CORPUS.jsonl, got %d arguments", len(pos))
	}
	c := config.Default()
	if *cfgPath != "" {
		if c, err = config.Load(*cfgPath); err != nil {
			return err
		}
	}
	opts := shaping.Options{Op: shaping.Op(c.Shaping.Op), MaxChars: c.Shaping.MaxChars, Marker: c.Shaping.Marker}
	texts, err := readCorpus(pos[0])
	if err != nil {
		return err
	}
	if !*statsOnly {
		if err := printShaped(stdout, texts, opts, *asJSON); err != nil {
			return err
		}
		if *asJSON {
			return nil // one shape per output: the blocks; --stats gives the summary
		}
	}
	start := time.Now()
	for _, t := range texts {
		shaping.Shape(t, opts)
	}
	perBlock := time.Duration(0)
	if len(texts) > 0 {
		perBlock = time.Since(start) / time.Duration(len(texts))
	}
	return printShapeStats(stdout, shaping.CorpusStats(texts, opts), opts, perBlock, *asJSON)
}

// readCorpus reads the reasoning texts of a JSONL corpus.
func readCorpus(path string) ([]string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	br := bufio.NewReaderSize(f, 1<<20)
	var texts []string
	for n := 1; ; n++ {
		line, err := br.ReadBytes('\n')
		if len(line) > 0 {
			got, perr := corpusLine(line)
			if perr != nil {
				return nil, fmt.Errorf("%s:%d: %w", path, n, perr)
			}
			texts = append(texts, got...)
		}
		if errors.Is(err, io.EOF) {
			return texts, nil
		}
		if err != nil {
			return nil, err
		}
	}
}

func corpusLine(line []byte) ([]string, error) {
	if len(bytes.TrimSpace(line)) == 0 {
		return nil, nil
	}
	if !conv.ValidJSON(line) {
		return nil, errors.New("not valid JSON")
	}
	v := gjson.ParseBytes(line)
	switch {
	case v.Type == gjson.String:
		return []string{v.String()}, nil
	case v.Get("messages").IsArray():
		req, err := conv.ParseRequest(line)
		if err != nil {
			return nil, err
		}
		var out []string
		for _, m := range req.Messages {
			if m.Role == "assistant" && m.Reasoning != "" && !m.Signed {
				out = append(out, m.Reasoning)
			}
		}
		return out, nil
	}
	for _, k := range append(conv.ReasoningFields[:], "text") { // a corpus record's text, under a wire name or "text"
		if s := v.Get(k); s.Type == gjson.String {
			return []string{s.String()}, nil
		}
	}
	return nil, errors.New("not a string, a request body, or an object with a reasoning string")
}

// shapedJSON is one block of shape --json.
type shapedJSON struct {
	N           int    `json:"n"`
	CharsBefore int    `json:"chars_before"`
	CharsAfter  int    `json:"chars_after"`
	Changed     bool   `json:"changed"`
	Shaped      string `json:"shaped"`
}

func printShaped(w io.Writer, texts []string, opts shaping.Options, asJSON bool) error {
	out := newJSONLines(w)
	for i, t := range texts {
		shaped, changed := shaping.Shape(t, opts)
		row := shapedJSON{i + 1, len([]rune(t)), len([]rune(shaped)), changed, shaped}
		if asJSON {
			if err := out.write(row); err != nil {
				return err
			}
			continue
		}
		fmt.Fprintf(w, "#%d  %d -> %d chars\n  %s\n", row.N, row.CharsBefore, row.CharsAfter, shaped)
	}
	return nil
}

// shapeStatsJSON is the summary of shape --stats --json.
type shapeStatsJSON struct {
	Op                  string  `json:"op"`
	MaxChars            int     `json:"max_chars"`
	Blocks              int     `json:"blocks"`
	Changed             int     `json:"changed"`
	CharsBefore         int     `json:"chars_before"`
	CharsAfter          int     `json:"chars_after"`
	Compression         float64 `json:"compression"`
	IdempotenceFailures int     `json:"idempotence_failures"`
	OverBudget          int     `json:"over_budget"`
	EmptyResults        int     `json:"empty_results"`
	DistinctInputs      int     `json:"distinct_inputs"`
	DistinctOutputs     int     `json:"distinct_outputs"`
	Collisions          int     `json:"collisions"`
	MaxFanout           int     `json:"max_fan_out"`
	PerBlockMS          float64 `json:"per_block_ms"`
	// MarkersFound counts the shaping markers in the corpus (pollution
	// extraction strips); Bands splits the run by the length of the
	// blocks, Over1k merges the bands over 1,000 characters and All every
	// band.
	MarkersFound int             `json:"markers_found"`
	Bands        []shapeBandJSON `json:"bands"`
	Over1k       shapeBandJSON   `json:"over_1k"`
	All          shapeBandJSON   `json:"all"`
}

// shapeBandJSON is one length band of shape --stats --json: the fault
// counts are of changed blocks with the fault, the rates their share of
// the changed blocks.
type shapeBandJSON struct {
	Band        string          `json:"band"`
	Blocks      int             `json:"blocks"`
	Changed     int             `json:"changed"`
	CharsBefore int             `json:"chars_before"`
	CharsAfter  int             `json:"chars_after"`
	Compression float64         `json:"compression"`
	Faults      shapeFaultsJSON `json:"faults"`
	FaultRates  faultRatesJSON  `json:"fault_rates"`
	Markers     int             `json:"markers_found"`
}

type shapeFaultsJSON struct {
	DanglingColon    int `json:"dangling_colon"`
	ShortLine        int `json:"short_line"`
	BareFiller       int `json:"bare_filler"`
	DanglingAnaphora int `json:"dangling_anaphora"`
}

type faultRatesJSON struct {
	DanglingColon    float64 `json:"dangling_colon"`
	ShortLine        float64 `json:"short_line"`
	BareFiller       float64 `json:"bare_filler"`
	DanglingAnaphora float64 `json:"dangling_anaphora"`
}

func toShapeBandJSON(b shaping.BandStats) shapeBandJSON {
	f := b.Faults
	return shapeBandJSON{
		Band: b.Name, Blocks: b.Blocks, Changed: b.Changed, CharsBefore: b.CharsBefore, CharsAfter: b.CharsAfter,
		Compression: b.Compression, Markers: b.MarkersFound,
		Faults:     shapeFaultsJSON{f.DanglingColon, f.ShortLine, f.BareFiller, f.DanglingAnaphora},
		FaultRates: faultRatesJSON{b.Rate(f.DanglingColon), b.Rate(f.ShortLine), b.Rate(f.BareFiller), b.Rate(f.DanglingAnaphora)},
	}
}

func printShapeStats(w io.Writer, st shaping.Stats, opts shaping.Options, perBlock time.Duration, asJSON bool) error {
	if asJSON {
		o := opts.WithDefaults()
		j := shapeStatsJSON{
			Op: string(o.Op), MaxChars: o.MaxChars, Blocks: st.Blocks, Changed: st.Changed,
			CharsBefore: st.CharsBefore, CharsAfter: st.CharsAfter, Compression: st.Compression,
			IdempotenceFailures: st.IdempotenceFailures, OverBudget: st.OverBudget, EmptyResults: st.EmptyResults,
			DistinctInputs: st.DistinctInputs, DistinctOutputs: st.DistinctOutputs, Collisions: st.Collisions,
			MaxFanout: st.MaxFanout, PerBlockMS: ms(perBlock), MarkersFound: st.MarkersFound,
			Bands: []shapeBandJSON{}, Over1k: toShapeBandJSON(st.Over(1000)), All: toShapeBandJSON(st.All()),
		}
		for _, b := range st.Bands {
			j.Bands = append(j.Bands, toShapeBandJSON(b))
		}
		return newJSONLines(w).write(j)
	}
	o := opts.WithDefaults()
	fmt.Fprintf(w, `
shaping %s, max_chars %d, marker %v
  blocks                 %d (%d changed)
  characters             %d -> %d
  compression            %.2f%%
  collisions             %d (distinct inputs %d, distinct outputs %d, max fan-out %d)
  idempotence failures   %d
  over budget            %d
  markers found          %d (stripped: pollution from an earlier shaper or a model that copied one)
  time per block         %s
`, o.Op, o.MaxChars, o.Marker, st.Blocks, st.Changed, st.CharsBefore, st.CharsAfter, 100*st.Compression,
		st.Collisions, st.DistinctInputs, st.DistinctOutputs, st.MaxFanout, st.IdempotenceFailures, st.OverBudget,
		st.MarkersFound, perBlock)
	return printBands(w, st)
}

// printBands writes compression and the reading faults per length band
// (characters of the original), over 1k and overall; fault rates are
// shares of the blocks shaping changed (see shaping.Faults).
func printBands(w io.Writer, st shaping.Stats) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(w, "\nper length band (fault rates over the changed blocks):\n")
	fmt.Fprintf(tw, "band\tblocks\tchanged\tcompression\tdangling ':'\tlines <= 3 chars\tbare filler\tdangling anaphora\tmarkers\t\n")
	row := func(b shaping.BandStats) {
		f := b.Faults
		fmt.Fprintf(tw, "%s\t%d\t%d\t%.1f%%\t%.1f%%\t%.1f%%\t%.1f%%\t%.1f%%\t%d\t\n", b.Name, b.Blocks, b.Changed, 100*b.Compression,
			100*b.Rate(f.DanglingColon), 100*b.Rate(f.ShortLine), 100*b.Rate(f.BareFiller), 100*b.Rate(f.DanglingAnaphora), b.MarkersFound)
	}
	for _, b := range st.Bands {
		row(b)
	}
	row(st.Over(1000))
	row(st.All())
	return tw.Flush()
}
