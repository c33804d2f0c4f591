package originals

import (
	"log/slog"
	"sync"
	"time"
)

// ReportEvery is the shortest time between two warnings about what the
// table could not record: a full or failing disk gives one line per
// period with the counts, not one per failed write.
const ReportEvery = 10 * time.Second

// losses count what the table could not do since the previous report.
type losses struct {
	dropped int64 // entries a Writer refused: its queue was full, or it was closed
	refused int64 // entries not recorded: the table was full even after making room
	failed  int64 // entries lost to write errors (a full or failing disk)
	evicted int64 // conversations removed before their TTL to make room
	errors  int64 // failed transactions, purges and compactions
}

func (l losses) plus(o losses) losses {
	return losses{l.dropped + o.dropped, l.refused + o.refused, l.failed + o.failed, l.evicted + o.evicted, l.errors + o.errors}
}

// lossLog turns losses into log lines, at most one per period: the first
// loss after a quiet period is told at once, the ones that follow are
// summed into the next line. It is safe for concurrent use.
type lossLog struct {
	log   *slog.Logger
	every time.Duration

	mu      sync.Mutex
	pending losses    // since the last line
	err     error     // the latest error since the last line
	at      time.Time // when the last line was written
}

func newLossLog(log *slog.Logger) *lossLog {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &lossLog{log: log, every: ReportEvery}
}

// add counts d (and err, when not nil) and writes a line if one is due.
func (l *lossLog) add(d losses, err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.pending = l.pending.plus(d)
	if err != nil {
		l.err = err
	}
	l.emit(time.Now(), false)
}

// flush writes what is pending when a line is due, or at once when force.
func (l *lossLog) flush(force bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.emit(time.Now(), force)
}

func (l *lossLog) emit(now time.Time, force bool) {
	if l.pending == (losses{}) || (!force && !l.at.IsZero() && now.Sub(l.at) < l.every) {
		return
	}
	p := l.pending
	args := []any{"dropped", p.dropped, "refused_full", p.refused, "lost_write_errors", p.failed,
		"evicted_conversations", p.evicted, "errors", p.errors}
	if !l.at.IsZero() {
		args = append(args, "since", now.Sub(l.at).Round(time.Millisecond))
	}
	if l.err != nil {
		args = append(args, "last_err", l.err)
	}
	msg := "originals table: entries not recorded"
	if p == (losses{evicted: p.evicted}) {
		msg = "originals table: full; the conversations idle longest were removed to make room"
	}
	l.log.Warn(msg, args...)
	l.pending, l.err, l.at = losses{}, nil, now
}
