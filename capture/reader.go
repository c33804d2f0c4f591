package capture

import (
	"container/list"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/klauspost/compress/zstd"
)

// Filter selects records. The zero Filter selects every record.
type Filter struct {
	Kinds []Kind    // any of these kinds; empty: all
	Call  string    // only this call
	Since time.Time // only records at or after this time
}

func (f *Filter) kindOK(k Kind) bool {
	return len(f.Kinds) == 0 || slices.Contains(f.Kinds, k)
}

// Match reports whether r passes the filter's kinds and call (Since is
// applied when reading, by segment and record time).
func (f *Filter) Match(r *Record) bool {
	return f.kindOK(r.Kind) && (f.Call == "" || r.Call == f.Call)
}

// Located is a record and where it is in the log.
type Located struct {
	Pos    Pos
	Record Record
	// Size is the length of the record's Data as it was on the wire, also
	// when the body was not rebuilt.
	Size int
	// Err is set when a request body could not be rebuilt (a blob is
	// missing or corrupt); Record.Data is nil then.
	Err error
}

// ErrCorrupt reports a frame whose checksum or contents are wrong.
var ErrCorrupt = errors.New("capture: corrupt frame")

// Reader reads the segments of a capture directory. Record.Data of the
// records it returns shares memory with other records: treat it as
// read-only. A Reader is not safe for concurrent use; Close releases its
// files.
type Reader struct {
	dir   string
	dec   *zstd.Decoder
	segs  []*segment // ascending
	cache frameCache
	// PollInterval is how often Follow looks for new records (default
	// 250 ms).
	PollInterval time.Duration
}

// OpenReader opens a capture directory for reading.
func OpenReader(dir string) (*Reader, error) {
	if _, err := os.Stat(dir); err != nil {
		return nil, fmt.Errorf("capture dir: %w", err)
	}
	dec, err := zstd.NewReader(nil, zstd.WithDecoderConcurrency(1),
		zstd.WithDecoderMaxMemory(maxFrameLen), zstd.WithDecoderMaxWindow(maxFrameLen))
	if err != nil {
		return nil, fmt.Errorf("capture: %w", err)
	}
	r := &Reader{dir: dir, dec: dec, PollInterval: 250 * time.Millisecond}
	r.cache.init(256 << 20)
	return r, nil
}

// Close closes the Reader's files.
func (r *Reader) Close() error {
	for _, s := range r.segs {
		s.closeFile()
	}
	r.segs = nil
	r.dec.Close()
	return nil
}

func (s *segment) closeFile() {
	if s.close != nil {
		_ = s.close()
		s.close = nil
	}
}

// SegmentInfo describes one segment file.
type SegmentInfo struct {
	Num     uint64
	Path    string
	Size    int64
	ModTime time.Time
}

// Segments lists the segment files, oldest first.
func (r *Reader) Segments() ([]SegmentInfo, error) {
	entries, err := os.ReadDir(r.dir)
	if err != nil {
		return nil, fmt.Errorf("capture dir: %w", err)
	}
	var out []SegmentInfo
	for _, e := range entries {
		num, ok := parseSegName(e.Name())
		if !ok {
			continue
		}
		info, err := e.Info()
		if err != nil {
			continue
		}
		out = append(out, SegmentInfo{num, filepath.Join(r.dir, e.Name()), info.Size(), info.ModTime()})
	}
	slices.SortFunc(out, func(a, b SegmentInfo) int { return cmpUint(a.Num, b.Num) })
	return out, nil
}

// refresh lists the segments again and takes the growth of the newest into
// account. Segments are opened when first read.
func (r *Reader) refresh() error {
	infos, err := r.Segments()
	if err != nil {
		return err
	}
	old := make(map[uint64]*segment, len(r.segs))
	for _, s := range r.segs {
		old[s.num] = s
	}
	segs := make([]*segment, 0, len(infos))
	for _, in := range infos {
		s, ok := old[in.Num]
		delete(old, in.Num)
		if !ok {
			s = &segment{num: in.Num, path: in.Path, size: -1}
		} else if s.ra != nil {
			s.grow(in.Size)
		}
		segs = append(segs, s)
	}
	for _, s := range old {
		s.closeFile()
	}
	r.segs = segs
	return nil
}

// open makes sure s is open; it returns false when the file is gone.
func (r *Reader) open(s *segment) bool {
	if s.ra != nil {
		return true
	}
	f, err := os.Open(s.path)
	if err != nil {
		return false
	}
	info, err := f.Stat()
	if err != nil {
		f.Close()
		return false
	}
	ns := newSegment(s.num, f, info.Size())
	ns.path, ns.close = s.path, f.Close
	*s = *ns
	return true
}

// Tail returns the last n records that match f, oldest first. It reads
// frames backwards from the end of the newest segment, so its cost depends
// on n (and on how rare the matches are) and on the frames of the newest
// segment (opening it walks their chain once, to tell a torn tail from
// damage), not on the size of the log. Requests are returned rebuilt.
func (r *Reader) Tail(n int, f Filter) ([]Located, error) {
	if n <= 0 {
		return nil, nil
	}
	if err := r.refresh(); err != nil {
		return nil, err
	}
	var out []Located
	err := r.backward(&f, func(loc Located) bool {
		out = append(out, loc)
		return len(out) < n
	}, true)
	slices.Reverse(out)
	return out, err
}

// backward calls fn with the records matching f from the newest to the
// oldest, until fn returns false. fn may move f.Since forward: frames older
// than it end the walk.
func (r *Reader) backward(f *Filter, fn func(Located) bool, resolve bool) error {
	for i := len(r.segs) - 1; i >= 0; i-- {
		s := r.segs[i]
		if !r.open(s) {
			continue
		}
		for end := s.end; ; {
			fi, ok := s.prevFrame(end)
			if !ok {
				break
			}
			end = fi.off
			if !f.Since.IsZero() && fi.t.MaxTime < f.Since.UnixNano() {
				return nil
			}
			fd, err := r.loadFrame(s, fi)
			if err != nil {
				continue
			}
			for j := len(fd.recs) - 1; j >= 0; j-- {
				if loc, ok := r.locate(s, fd, j, f, resolve); ok && !fn(loc) {
					return nil
				}
			}
		}
	}
	return nil
}

// CallRecords returns every record of a call, oldest first. It walks back
// from the end of the log until the call's upstream request, and a minute
// before the call's start (for the client request, timed at the start,
// however long the body's upload and the transforms took), so a recent
// call is found quickly and a missing one costs a read of the whole log.
func (r *Reader) CallRecords(call string) ([]Located, error) {
	if err := r.refresh(); err != nil {
		return nil, err
	}
	f := Filter{Call: call}
	var out []Located
	err := r.backward(&f, func(l Located) bool {
		out = append(out, l)
		if l.Record.Kind == KindRequest && f.Since.IsZero() {
			f.Since = l.Record.Time.Add(-l.Record.Offset - time.Minute)
		}
		return true
	}, true)
	slices.Reverse(out)
	return out, err
}

// ReadFrom calls fn with up to limit records (all when limit <= 0) from
// pos on, in log order, and returns the position to continue from. A pos
// in a removed segment starts at the oldest remaining one; an offset that
// is not a frame start starts at the next frame. An error from fn stops
// the read and is returned.
func (r *Reader) ReadFrom(pos Pos, limit int, fn func(Located) error) (Pos, error) {
	if err := r.refresh(); err != nil {
		return pos, err
	}
	return r.forward(pos, readOpts{limit: limit, resolve: true}, fn)
}

// Scan calls fn with every record in log order.
func (r *Reader) Scan(fn func(Located) error) error {
	if err := r.refresh(); err != nil {
		return err
	}
	_, err := r.forward(Pos{}, readOpts{resolve: true}, fn)
	return err
}

// Follow calls fn with every record from pos on, then waits for new ones,
// polling every PollInterval, until ctx is done (it returns ctx.Err()) or
// fn fails.
func (r *Reader) Follow(ctx context.Context, pos Pos, fn func(Located) error) error {
	for {
		next, err := r.ReadFrom(pos, 0, fn)
		if err != nil {
			return err
		}
		pos = next
		t := time.NewTimer(r.PollInterval)
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C:
		}
	}
}

// EndPos returns the position after the last record.
func (r *Reader) EndPos() (Pos, error) {
	if err := r.refresh(); err != nil {
		return Pos{}, err
	}
	for i := len(r.segs) - 1; i >= 0; i-- {
		if s := r.segs[i]; r.open(s) {
			return Pos{Segment: s.num, Offset: s.end}, nil
		}
	}
	return Pos{}, nil
}

type readOpts struct {
	limit    int
	filter   Filter
	resolve  bool
	progress func(done int64) // compressed bytes read so far
	damage   *Damage          // when set, counts what could not be read
}

// Damage is what a read of the log skipped: frames whose checksums or
// encoding failed (their records lost), and bytes between whole frames
// that are none (garbage, or a frame too broken to be found).
type Damage struct {
	Frames int64 `json:"frames"`
	Bytes  int64 `json:"bytes"`
}

// forward reads records in log order from pos.
func (r *Reader) forward(pos Pos, o readOpts, fn func(Located) error) (Pos, error) {
	count, done := 0, int64(0)
	since := int64(0)
	if !o.filter.Since.IsZero() {
		since = o.filter.Since.UnixNano()
	}
	next := pos
	for _, s := range r.segs {
		if s.num < pos.Segment || !r.open(s) {
			continue
		}
		off, idx := int64(0), 0
		if s.num == pos.Segment {
			off, idx = pos.Offset, pos.Index
		}
		chained := off <= s.start // off is where a frame should begin
		for {
			if o.limit > 0 && count >= o.limit {
				return Pos{s.num, off, idx}, nil
			}
			fi, ok := s.nextFrame(off)
			if !ok {
				break
			}
			gap := int64(0)
			if fi.off != off {
				idx = 0
				if chained {
					gap = fi.off - max(off, s.start)
				}
			}
			chained = true
			if o.progress != nil {
				done += fi.next() - max(off, fi.off)
				o.progress(done)
			}
			if fi.t.MaxTime >= since {
				fd, err := r.loadFrame(s, fi)
				if o.damage != nil {
					o.damage.Bytes += gap // damage before a frame of the window
					if err != nil {
						o.damage.Frames++
						o.damage.Bytes += fi.next() - fi.off
					}
				}
				for j := idx; err == nil && j < len(fd.recs); j++ {
					if o.limit > 0 && count >= o.limit {
						return Pos{s.num, fi.off, j}, nil
					}
					loc, ok := r.locate(s, fd, j, &o.filter, o.resolve)
					if !ok {
						continue
					}
					count++
					if err := fn(loc); err != nil {
						return Pos{s.num, fi.off, j + 1}, err
					}
				}
			}
			off, idx = fi.next(), 0
		}
		next = Pos{Segment: s.num, Offset: max(off, s.end)}
	}
	return next, nil
}

// locate decodes record j of a frame if it matches f.
func (r *Reader) locate(s *segment, fd *frameData, j int, f *Filter, resolve bool) (Located, bool) {
	body := fd.recs[j]
	if len(body) == 0 || Kind(body[0]) == kindBlob || !f.kindOK(Kind(body[0])) {
		return Located{}, false
	}
	d, err := decodeRecord(body)
	if err != nil || (f.Call != "" && d.Call != f.Call) ||
		(!f.Since.IsZero() && d.Time.Before(f.Since)) {
		return Located{}, false
	}
	loc := Located{Pos: Pos{s.num, fd.info.off, j}, Record: d.Record, Size: len(d.Data)}
	if d.Skeleton != nil {
		loc.Size, loc.Err = skeletonLen(d.Skeleton)
		if resolve && loc.Err == nil {
			loc.Record.Data, loc.Err = r.rebuild(s, fd.info, d.Skeleton)
		}
	}
	return loc, true
}

// rebuild reassembles a request body whose skeleton is in frame fi.
func (r *Reader) rebuild(s *segment, fi frameInfo, sk []byte) ([]byte, error) {
	s.indexed(fi)
	return rebuild(sk, func(ord uint32) ([]byte, error) { return r.blob(s, ord) })
}

// errMissingBlob reports a request that references a blob the segment
// does not hold (readable).
var errMissingBlob = errors.New("capture: missing blob")

// blob returns the data of blob ord of segment s.
func (r *Reader) blob(s *segment, ord uint32) ([]byte, error) {
	fi, ok := s.blobFrame(ord)
	for !ok && s.lo > s.start && s.extendBack() {
		fi, ok = s.blobFrame(ord)
	}
	if !ok {
		return nil, fmt.Errorf("%w %d in segment %d", errMissingBlob, ord, s.num)
	}
	fd, err := r.loadFrame(s, fi)
	if err != nil {
		return nil, err
	}
	d, err := decodeRecord(fd.recs[fd.blobs[ord-fi.t.BlobFirst]])
	if err != nil {
		return nil, err
	}
	return d.Data, nil
}

// frameData is a decompressed frame: its records' bodies and which of them
// are blobs.
type frameData struct {
	info  frameInfo
	raw   []byte
	recs  [][]byte
	blobs []int // indices in recs of the blob records, in ordinal order
}

// loadFrame reads, checks and decompresses a frame, through the cache.
func (r *Reader) loadFrame(s *segment, fi frameInfo) (*frameData, error) {
	key := frameKey{s.num, fi.off}
	if fd := r.cache.get(key); fd != nil {
		return fd, nil
	}
	fd, err := decodeFrame(r.dec, s, fi)
	if err != nil {
		return nil, err
	}
	r.cache.put(key, fd)
	return fd, nil
}

// maxPrealloc bounds the buffer made for a frame before it is decoded.
const maxPrealloc = 4 << 20

func decodeFrame(dec *zstd.Decoder, s *segment, fi frameInfo) (*frameData, error) {
	body := s.read(fi.off+frameHeaderSize, int64(fi.t.FrameLen))
	if body == nil || crc(body) != fi.t.FrameCRC {
		return nil, ErrCorrupt
	}
	// The declared length sizes the buffer only up to a bound: a frame
	// whose checksums hold may still declare any length.
	raw, err := dec.DecodeAll(body, make([]byte, 0, min(int(fi.t.RawLen), maxPrealloc)))
	if err != nil || len(raw) != int(fi.t.RawLen) {
		return nil, ErrCorrupt
	}
	fd := &frameData{info: fi, raw: raw, recs: make([][]byte, 0, fi.t.Records)}
	for len(raw) > 0 {
		n, k := binary.Uvarint(raw)
		if k <= 0 || n > uint64(len(raw)-k) {
			return nil, ErrCorrupt
		}
		end := k + int(n)
		rec := raw[k:end:end]
		if len(rec) > 0 && Kind(rec[0]) == kindBlob {
			fd.blobs = append(fd.blobs, len(fd.recs))
		}
		fd.recs = append(fd.recs, rec)
		raw = raw[end:]
	}
	if len(fd.recs) != int(fi.t.Records) || len(fd.blobs) != int(fi.t.Blobs) {
		return nil, ErrCorrupt
	}
	return fd, nil
}

// frameCache keeps recently decompressed frames, up to a byte budget.
type frameCache struct {
	budget, used int64
	lru          *list.List // of *cacheEntry, most recent first
	m            map[frameKey]*list.Element
}

type frameKey struct {
	seg uint64
	off int64
}

type cacheEntry struct {
	key frameKey
	fd  *frameData
}

func (c *frameCache) init(budget int64) {
	c.budget, c.lru, c.m = budget, list.New(), make(map[frameKey]*list.Element)
}

func (c *frameCache) get(k frameKey) *frameData {
	if e, ok := c.m[k]; ok {
		c.lru.MoveToFront(e)
		return e.Value.(*cacheEntry).fd
	}
	return nil
}

func (c *frameCache) put(k frameKey, fd *frameData) {
	c.m[k] = c.lru.PushFront(&cacheEntry{k, fd})
	c.used += int64(cap(fd.raw))
	for c.used > c.budget && c.lru.Len() > 1 {
		e := c.lru.Back()
		ce := e.Value.(*cacheEntry)
		c.lru.Remove(e)
		delete(c.m, ce.key)
		c.used -= int64(cap(ce.fd.raw))
	}
}
