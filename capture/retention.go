package capture

import (
	"path/filepath"
	"slices"
	"time"
)

// enforceRetention removes the oldest segments while the total size is
// above RetainBytes, and every segment last written before RetainAge. The
// segment being written is never removed. Errors are counted, not returned:
// retention is retried on the next rotation and every minute.
func (w *Writer) enforceRetention() {
	entries, err := w.opts.FS.ReadDir(w.opts.Dir)
	if err != nil {
		w.writeErrors.Add(1)
		return
	}
	type seg struct {
		num  uint64
		size int64
		mod  time.Time
	}
	var segs []seg
	var total int64
	for _, e := range entries {
		num, ok := parseSegName(e.Name())
		if !ok || (w.seg.f != nil && num == w.seg.num) {
			continue
		}
		info, err := e.Info()
		if err != nil {
			continue // removed meanwhile
		}
		segs = append(segs, seg{num, info.Size(), info.ModTime()})
		total += info.Size()
	}
	total += w.seg.size
	slices.SortFunc(segs, func(a, b seg) int { return cmpUint(a.num, b.num) })
	cutoff := time.Now().Add(-w.opts.RetainAge)
	for _, s := range segs {
		overSize := w.opts.RetainBytes > 0 && total > w.opts.RetainBytes
		tooOld := w.opts.RetainAge > 0 && s.mod.Before(cutoff)
		if !overSize && !tooOld {
			continue
		}
		if err := w.opts.FS.Remove(filepath.Join(w.opts.Dir, segName(s.num))); err != nil {
			w.writeErrors.Add(1)
			continue
		}
		total -= s.size
	}
}

func cmpUint(a, b uint64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}
