package capture

import (
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/shaperproxy/shaperproxy/internal/testenv"
)

// sum adds up one integer attribute over lines.
func sum(lines []map[string]slog.Value, key string) int64 {
	var n int64
	for _, l := range lines {
		n += l[key].Int64()
	}
	return n
}

const (
	lossLine     = "capture: records not written"
	recoveryLine = "capture: writing again"
)

// TestLossesAreLogged: a failing disk loses thousands of records and
// says so in one warning per period, with the counts (nothing was logged
// before); the next frame written says the writer works again, and the
// warnings add up to what the stats count.
func TestLossesAreLogged(t *testing.T) {
	ffs := &faultFS{}
	rec := &testenv.Log{}
	w, _ := openTest(t, Options{FS: ffs, FrameBytes: 4 << 10, QueueSize: 64, Logger: slog.New(rec)})
	w.maxBackoff = 10 * time.Millisecond
	ev := Record{Kind: KindEvent, Call: "c", Data: []byte("data: {}\n\n")}
	ffs.fail.Store(true)
	w.Enqueue(ev)
	_ = w.Flush() // the first loss: told at once
	for range 5000 {
		w.Enqueue(ev)
	}
	_ = w.Flush()
	st := w.Stats()
	if st.Lost == 0 || st.Dropped == 0 {
		t.Fatalf("the test wants both losses and drops: %+v", st)
	}
	warned := rec.Lines(lossLine)
	if len(warned) != 1 {
		t.Fatalf("%d warnings for one burst of losses, want 1 (one per %v)", len(warned), ReportEvery)
	}
	if warned[0]["lost"].Int64() == 0 || !strings.Contains(warned[0]["last_err"].String(), "read-only file system") {
		t.Errorf("first warning: %v", warned[0])
	}

	ffs.fail.Store(false)
	time.Sleep(20 * time.Millisecond) // let the backoff pass
	enqueue(t, w, ev)
	mustFlush(t, w)
	if n := len(rec.Lines(recoveryLine)); n != 1 {
		t.Errorf("%d recovery notes, want 1", n)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	st = w.Stats()
	warned = rec.Lines(lossLine) // Close tells the rest at once
	if len(warned) != 2 || sum(warned, "lost") != st.Lost || sum(warned, "dropped") != st.Dropped || sum(warned, "write_errors") != st.WriteErrors {
		t.Errorf("warnings %v do not add up to %+v", warned, st)
	}
}

// TestLossReportPeriod: past the period, the next loss is told again;
// within it, never.
func TestLossReportPeriod(t *testing.T) {
	ffs := &faultFS{}
	rec := &testenv.Log{}
	w, _ := openTest(t, Options{FS: ffs, Logger: slog.New(rec)})
	w.maxBackoff = time.Millisecond
	w.report.every = 30 * time.Millisecond
	ffs.fail.Store(true)
	for range 3 {
		w.Enqueue(Record{Kind: KindNote, Data: []byte(`{}`)})
		_ = w.Flush()
		time.Sleep(40 * time.Millisecond)
	}
	_ = w.Flush()
	warned := rec.Lines(lossLine)
	if len(warned) < 3 {
		t.Errorf("%d warnings for three losses a period apart, want 3 or more", len(warned))
	}
	for _, l := range warned[1:] {
		if l["since"].Duration() < w.report.every {
			t.Errorf("two warnings %v apart, within the period", l["since"])
		}
	}
}
