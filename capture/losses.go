package capture

import "time"

// lossReport is the writer goroutine's memory of what it last told the
// log about lost and dropped records.
type lossReport struct {
	every time.Duration
	at    time.Time // when the last warning was written
	// The counters as of the last warning.
	lost, dropped, errors int64
	err                   error // the latest write error since then
	// warned is true from a warning until the next frame written: that
	// frame's success is worth a line too.
	warned bool
}

// reportLosses warns about the records lost or dropped since the last
// warning when there are some and the last warning is at least every old
// (or at once when force, at Close). The first loss after a quiet period
// is told at once; the ones that follow are summed into the next line.
func (w *Writer) reportLosses(force bool) {
	r := &w.report
	lost, dropped, errs := w.lost.Load(), w.dropped.Load(), w.writeErrors.Load()
	if lost == r.lost && dropped == r.dropped && errs == r.errors {
		return
	}
	now := time.Now()
	if !force && !r.at.IsZero() && now.Sub(r.at) < r.every {
		return
	}
	args := []any{"lost", lost - r.lost, "dropped", dropped - r.dropped, "write_errors", errs - r.errors,
		"lost_total", lost, "dropped_total", dropped}
	if !r.at.IsZero() {
		args = append(args, "since", now.Sub(r.at).Round(time.Millisecond))
	}
	if r.err != nil {
		args = append(args, "last_err", r.err)
	}
	w.opts.Logger.Warn("capture: records not written (a drops record keeps the counts)", args...)
	r.at, r.lost, r.dropped, r.errors, r.err = now, lost, dropped, errs, nil
	r.warned = lost > 0 || errs > 0
}

// noteRecovery tells the log once that a frame was written after a
// warning about write errors.
func (w *Writer) noteRecovery() {
	if !w.report.warned {
		return
	}
	w.report.warned = false
	w.opts.Logger.Info("capture: writing again", "lost_total", w.lost.Load(), "dropped_total", w.dropped.Load())
}
