package shaping

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"unicode/utf8"

	"github.com/klauspost/compress/zstd"
)

// The real corpus: 1,465 reasoning blocks from public repositories (see
// ../fixtures/corpus/PROVENANCE.md), and what the engine before issue 12
// (commit c9baa2a) made of each at the default options, to compare.
const (
	realCorpusPath = "../fixtures/corpus/reasoning.jsonl.zst"
	realBeforePath = "testdata/realcorpus_before.jsonl.zst"
)

// realBlock is one line of the corpus.
type realBlock struct {
	Source  string `json:"source"`
	Model   string `json:"model"`
	Lang    string `json:"lang"`
	Agentic bool   `json:"agentic"`
	Text    string `json:"text"`
}

// beforeResult is one line of realBeforePath.
type beforeResult struct {
	Changed bool   `json:"changed"`
	Out     string `json:"out"`
}

var (
	realOnce   sync.Once
	realBlocks []realBlock
	realBefore []beforeResult
	realErr    error
)

// loadReal reads the corpus and the earlier results once per test binary.
func loadReal(t testing.TB) ([]realBlock, []beforeResult) {
	t.Helper()
	realOnce.Do(func() {
		if realErr = readZstdJSONL(realCorpusPath, &realBlocks); realErr != nil {
			return
		}
		realErr = readZstdJSONL(realBeforePath, &realBefore)
		if realErr == nil && len(realBefore) != len(realBlocks) {
			realErr = fmt.Errorf("%d earlier results for %d blocks", len(realBefore), len(realBlocks))
		}
	})
	if realErr != nil {
		t.Fatal(realErr)
	}
	return realBlocks, realBefore
}

// readZstdJSONL decodes a zstd-compressed JSONL file into *dst.
func readZstdJSONL[T any](path string, dst *[]T) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	zr, err := zstd.NewReader(f)
	if err != nil {
		return err
	}
	defer zr.Close()
	sc := bufio.NewScanner(zr)
	sc.Buffer(nil, 16<<20)
	for sc.Scan() {
		var v T
		if err := json.Unmarshal(sc.Bytes(), &v); err != nil {
			return fmt.Errorf("%s: %w", path, err)
		}
		*dst = append(*dst, v)
	}
	return sc.Err()
}

func realTexts(blocks []realBlock) []string {
	texts := make([]string, len(blocks))
	for i, b := range blocks {
		texts[i] = b.Text
	}
	return texts
}

// Targets of issue 12, on the shaped blocks of the corpus at the default
// options.
const (
	maxDanglingColon     = 0.03
	maxShortLine         = 0.01
	maxBareFiller        = 0.01
	maxDanglingAnaphora  = 0.08
	minCompressionOver1k = 0.85
)

// TestRealCorpus shapes the real corpus at the default options, prints the
// per-band table before (the engine of commit c9baa2a) and now, and fails
// if a target of issue 12 is missed. Run it with
//
//	go test -run TestRealCorpus -v ./shaping
func TestRealCorpus(t *testing.T) {
	blocks, before := loadReal(t)
	texts := realTexts(blocks)
	o := Options{}
	outs := make([]string, len(before))
	changed := make([]bool, len(before))
	for i, r := range before {
		outs[i], changed[i] = r.Out, r.Changed
	}
	old := resultStats(texts, outs, changed, o)
	now := CorpusStats(texts, o)
	t.Logf("before (commit c9baa2a), max_chars %d:\n%s", DefaultMaxChars, statsTable(old))
	t.Logf("now:\n%s", statsTable(now))
	nowOuts := make([]string, len(texts))
	for i, x := range texts {
		nowOuts[i], _ = Shape(x, o)
	}
	t.Logf("kept, of the shaped blocks (not a target; the fault rates above are rules extraction follows, so they\n"+
		"are near zero by construction, and these say what the rules cost):\n  before: %s\n  now:    %s",
		keptSummary(texts, outs, changed), keptSummary(texts, nowOuts, changed))

	all := now.All()
	check := func(name string, got, limit float64, atMost bool) {
		if atMost && got > limit || !atMost && got < limit {
			t.Errorf("%s %.2f%%, target %s %.0f%%", name, 100*got, map[bool]string{true: "≤", false: "≥"}[atMost], 100*limit)
		}
	}
	check("dangling ':'", all.Rate(all.Faults.DanglingColon), maxDanglingColon, true)
	check("lines ≤ 3 chars", all.Rate(all.Faults.ShortLine), maxShortLine, true)
	check("bare filler", all.Rate(all.Faults.BareFiller), maxBareFiller, true)
	check("dangling anaphora", all.Rate(all.Faults.DanglingAnaphora), maxDanglingAnaphora, true)
	check("compression over 1k", now.Over(1000).Compression, minCompressionOver1k, false)
	if now.IdempotenceFailures != 0 || now.EmptyResults != 0 || now.OverBudget != 0 {
		t.Errorf("idempotence failures %d, empty results %d, over budget %d",
			now.IdempotenceFailures, now.EmptyResults, now.OverBudget)
	}
	if now.SharedOutputs > old.SharedOutputs || now.SharingInputs > old.SharingInputs {
		t.Errorf("collisions: %d results shared by %d texts, before %d by %d",
			now.SharedOutputs, now.SharingInputs, old.SharedOutputs, old.SharingInputs)
	}
}

// keptSummary counts, over the changed texts, the results that keep the
// task (the first unit that is not filler or code), keep the last decisive
// unit, and keep at least one decisive unit, compared as text with leading
// filler and case of the first letter ignored.
func keptSummary(texts, outs []string, changed []bool) string {
	var n, task, last, some int
	for i, text := range texts {
		if !changed[i] {
			continue
		}
		n++
		first, lastDec := "", ""
		for _, s := range Sentences(text) {
			if first == "" && s.Kind != KindFiller && s.Kind != KindCode {
				first = s.Text
			}
			if s.Kind == KindDecisive {
				lastDec = s.Text
			}
		}
		if keeps(outs[i], first) {
			task++
		}
		if keeps(outs[i], lastDec) {
			last++
		}
		for _, s := range Sentences(outs[i]) {
			if s.Kind == KindDecisive {
				some++
				break
			}
		}
	}
	return fmt.Sprintf("%d blocks: task %d, last decision %d, some decision %d", n, task, last, some)
}

// keeps reports whether out holds unit s, maybe without its leading filler
// and with its first letter in upper case.
func keeps(out, s string) bool {
	if s == "" {
		return false
	}
	s = s[leadFiller(s):]
	if _, n := utf8.DecodeRuneInString(s); len(s) > n+8 {
		s = s[n:]
	}
	return strings.Contains(out, s)
}

// statsTable formats s per band and overall, rates over the shaped blocks.
func statsTable(s Stats) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%-8s %6s %6s %7s %8s %8s %8s %8s %7s\n",
		"band", "blocks", "shaped", "compr", "colon:", "short", "filler", "anaph", "markers")
	row := func(x BandStats) {
		fmt.Fprintf(&b, "%-8s %6d %6d %6.2f%% %7.2f%% %7.2f%% %7.2f%% %7.2f%% %7d\n",
			x.Name, x.Blocks, x.Changed, 100*x.Compression, 100*x.Rate(x.Faults.DanglingColon),
			100*x.Rate(x.Faults.ShortLine), 100*x.Rate(x.Faults.BareFiller),
			100*x.Rate(x.Faults.DanglingAnaphora), x.MarkersFound)
	}
	for _, x := range s.Bands {
		row(x)
	}
	row(s.Over(1000))
	row(s.All())
	fmt.Fprintf(&b, "collisions: %d results shared by %d distinct texts (max fan-out %d); "+
		"idempotence failures %d, empty %d, over budget %d\n",
		s.SharedOutputs, s.SharingInputs, s.MaxFanout, s.IdempotenceFailures, s.EmptyResults, s.OverBudget)
	return b.String()
}

// pairsSeed picks the before/after pairs of TestRealCorpusPairs.
const pairsSeed = 12

// TestRealCorpusPairs prints, with -v, ten blocks of more than 2,000
// characters picked with rng(pairsSeed): the start of the original, the
// result before (commit c9baa2a) and now, for reading.
//
//	go test -run TestRealCorpusPairs -v ./shaping
func TestRealCorpusPairs(t *testing.T) {
	blocks, before := loadReal(t)
	var long []int
	for i, b := range blocks {
		if utf8.RuneCountInString(b.Text) > 2000 {
			long = append(long, i)
		}
	}
	r := rng(pairsSeed)
	for k := 0; k < 10 && len(long) > 0; k++ {
		j := r.intn(len(long))
		i := long[j]
		long = append(long[:j], long[j+1:]...)
		b := blocks[i]
		out, _ := Shape(b.Text, Options{})
		if !testing.Verbose() {
			continue
		}
		t.Logf("\n### pair %d: block %d, %s, %d chars\n--- original (start):\n%s\n--- before:\n%s\n--- now:\n%s\n",
			k+1, i, b.Model, utf8.RuneCountInString(b.Text), truncate(b.Text, 400), before[i].Out, out)
	}
}

// truncate returns the first n runes of s, with "…" when it cut.
func truncate(s string, n int) string {
	i := 0
	for p := range s {
		if i == n {
			return s[:p] + "…"
		}
		i++
	}
	return s
}

// BenchmarkRealCorpus shapes the whole real corpus per iteration and
// reports millions of characters (runes) per second; the target is 20 on
// one core:
//
//	GOMAXPROCS=1 go test -run=^$ -bench=RealCorpus ./shaping
func BenchmarkRealCorpus(b *testing.B) {
	blocks, _ := loadReal(b)
	texts := realTexts(blocks)
	n := runes(texts)
	b.SetBytes(int64(bytesOf(texts)))
	for b.Loop() {
		for _, t := range texts {
			Shape(t, Options{})
		}
	}
	b.ReportMetric(float64(n)*float64(b.N)/b.Elapsed().Seconds()/1e6, "Mchars/s")
}
