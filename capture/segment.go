package capture

import (
	"bytes"
	"io"
	"sort"
)

// segment is a reader's view of one segment file: where its valid frames
// end, and the frames it has seen, for finding blobs.
type segment struct {
	num   uint64
	path  string
	ra    io.ReaderAt
	close func() error
	size  int64 // file size when end was computed
	start int64 // offset of the first frame
	end   int64 // end of the last valid frame; bytes after it are torn

	// Frames known to the blob index cover [lo, hi) (lo == hi: none).
	lo, hi     int64
	blobFrames []frameInfo // frames holding blobs, ascending
}

// frameInfo locates one frame.
type frameInfo struct {
	off int64 // offset of the frame header
	t   trailer
}

// next is the offset just after the frame's trailer.
func (fi frameInfo) next() int64 {
	return fi.off + frameHeaderSize + int64(fi.t.FrameLen) + trailerSize
}

// newSegment reads the header of a segment of the given size and finds the
// end of its valid frames.
//
// A damaged segment header does not hide the frames after it: each frame
// carries its own checksums, so they are read as in any segment (a file
// that is no segment has no frame that checks out).
func newSegment(num uint64, ra io.ReaderAt, size int64) *segment {
	s := &segment{num: num, ra: ra, size: size, start: segHeaderSize}
	s.end = s.start
	s.findEnd()
	return s
}

// grow takes a larger file size into account (the segment being written).
func (s *segment) grow(size int64) {
	if size == s.size || s.end < s.start {
		return
	}
	s.size = size
	s.findEnd()
}

// read returns n bytes at off, or nil when they are not all there.
func (s *segment) read(off, n int64) []byte {
	if off < 0 || n < 0 || off+n > s.size {
		return nil
	}
	b := make([]byte, n)
	if _, err := s.ra.ReadAt(b, off); err != nil {
		return nil
	}
	return b
}

// findEnd sets end after the last valid frame. It follows the chain of
// whole frames from the last end known (the segment's start at first),
// each frame's header giving where the next begins, and never takes a
// frame it did not reach that way at face value: the bytes of a frame's
// body (an upstream's answer stored as it came) may hold what looks like
// a whole frame. Where the chain stops at a frame whose header is whole
// and whose declared end lies past the file's end, the tail is torn (a
// write cut short): nothing after it was written, and nothing is searched
// for. Only where it stops at damage inside the file (a header or trailer
// that does not check out) is the next whole frame searched for, and the
// chain followed again from it.
func (s *segment) findEnd() {
	end := s.chainEnd(max(s.end, s.start))
	for end < s.size {
		if n, ok := parseFrameHeader(s.read(end, frameHeaderSize)); ok && end+frameHeaderSize+int64(n)+trailerSize > s.size ||
			s.size-end < frameHeaderSize+trailerSize {
			break // a torn tail
		}
		fi, ok := s.wholeAfter(end)
		if !ok {
			break
		}
		end = s.chainEnd(fi.off)
	}
	s.end = end
}

// chainEnd follows the chain of whole frames (header and trailer agree)
// from off within the file and returns where it stops.
func (s *segment) chainEnd(off int64) int64 {
	for {
		fi, ok := s.chainedAt(off, s.size)
		if !ok {
			return off
		}
		off = fi.next()
	}
}

// wholeAfter returns the first whole frame (trailer, header and body
// checksum) that begins after off, found by searching for trailers: only
// past damage.
func (s *segment) wholeAfter(off int64) (frameInfo, bool) {
	for from := off + 1; ; {
		p, ok := s.searchFwdIn(from, s.size)
		if !ok {
			return frameInfo{}, false
		}
		if fi, ok := s.frameEndingAt(p+trailerSize, s.size); ok && fi.off > off && s.bodyOK(fi) {
			return fi, true
		}
		from = p + 1
	}
}

// chainedAt returns the frame whose header is at off if it is whole
// within limit (its header and trailer agree).
func (s *segment) chainedAt(off, limit int64) (frameInfo, bool) {
	if off < s.start || off+frameHeaderSize+trailerSize > limit {
		return frameInfo{}, false
	}
	n, ok := parseFrameHeader(s.read(off, frameHeaderSize))
	if !ok {
		return frameInfo{}, false
	}
	fi := frameInfo{off: off}
	if fi.t.FrameLen = n; fi.next() > limit {
		return frameInfo{}, false
	}
	t, ok := parseTrailer(s.read(fi.next()-trailerSize, trailerSize))
	fi.t = t
	return fi, ok && t.FrameLen == n
}

// bodyOK checks the checksum of a frame's compressed body.
func (s *segment) bodyOK(fi frameInfo) bool {
	b := s.read(fi.off+frameHeaderSize, int64(fi.t.FrameLen))
	return b != nil && crc(b) == fi.t.FrameCRC
}

// frameEndingAt returns the frame whose trailer ends at end, if its
// trailer and header agree and it lies in [start, limit).
func (s *segment) frameEndingAt(end, limit int64) (frameInfo, bool) {
	if end > limit || end-trailerSize-frameHeaderSize < s.start {
		return frameInfo{}, false
	}
	t, ok := parseTrailer(s.read(end-trailerSize, trailerSize))
	if !ok {
		return frameInfo{}, false
	}
	fi := frameInfo{off: end - trailerSize - int64(t.FrameLen) - frameHeaderSize, t: t}
	if fi.off < s.start {
		return frameInfo{}, false
	}
	n, ok := parseFrameHeader(s.read(fi.off, frameHeaderSize))
	return fi, ok && n == t.FrameLen
}

// frameAt returns the frame whose header is at off, if it is whole and
// valid within end.
func (s *segment) frameAt(off int64) (frameInfo, bool) { return s.chainedAt(off, s.end) }

// prevFrame returns the last valid frame ending at or before end,
// resynchronising on trailers after a corrupt region.
func (s *segment) prevFrame(end int64) (frameInfo, bool) {
	for end > s.start {
		if fi, ok := s.frameEndingAt(end, s.end); ok {
			return fi, true
		}
		p, ok := s.searchBack(end - trailerSize)
		if !ok {
			break
		}
		end = p + trailerSize
	}
	return frameInfo{}, false
}

// nextFrame returns the first valid frame starting at or after off: the
// frame at off, else the first of the chain of frames from the segment's
// start that begins at or after off; only where that chain breaks (a
// damaged frame) are trailers searched for.
func (s *segment) nextFrame(off int64) (frameInfo, bool) {
	off = max(off, s.start)
	if off+frameHeaderSize+trailerSize > s.end { // nothing whole after off (a follower at the end)
		return frameInfo{}, false
	}
	if fi, ok := s.frameAt(off); ok {
		return fi, true
	}
	at := s.start
	for {
		fi, ok := s.frameAt(at)
		if !ok {
			break
		}
		if fi.off >= off {
			return fi, true
		}
		at = fi.next()
	}
	for from := max(off, at); ; {
		p, ok := s.searchFwd(from)
		if !ok {
			return frameInfo{}, false
		}
		if fi, ok := s.frameEndingAt(p+trailerSize, s.end); ok && fi.off >= off {
			return fi, true
		}
		if fi, ok := s.frameAt(p + trailerSize); ok {
			return fi, true
		}
		from = p + 1
	}
}

const searchChunk = 1 << 20

// searchBack returns the largest p < before, p >= start, where a trailer
// pattern starts.
func (s *segment) searchBack(before int64) (int64, bool) {
	pat := int64(len(trailerPattern))
	for hi := before; hi > s.start; {
		lo := max(s.start, hi-searchChunk)
		b := s.read(lo, min(hi-1+pat, s.size)-lo)
		if b == nil {
			return 0, false
		}
		if i := bytes.LastIndex(b, trailerPattern); i >= 0 {
			return lo + int64(i), true
		}
		hi = lo
	}
	return 0, false
}

// searchFwd returns the smallest p >= from where a trailer pattern starts
// and the whole trailer lies within end.
func (s *segment) searchFwd(from int64) (int64, bool) { return s.searchFwdIn(from, s.end) }

// searchFwdIn is searchFwd within limit.
func (s *segment) searchFwdIn(from, limit int64) (int64, bool) {
	pat := int64(len(trailerPattern))
	for lo := max(from, s.start); lo+trailerSize <= limit; {
		hi := min(limit, lo+searchChunk+pat)
		b := s.read(lo, hi-lo)
		if b == nil {
			return 0, false
		}
		if i := bytes.Index(b, trailerPattern); i >= 0 {
			p := lo + int64(i)
			return p, p+trailerSize <= limit
		}
		lo = hi - pat + 1
	}
	return 0, false
}

// indexed makes sure the blob index covers the frame fi.
func (s *segment) indexed(fi frameInfo) {
	if s.lo == s.hi {
		s.lo, s.hi = fi.off, fi.off
		s.extendFwd()
	}
	for fi.off >= s.hi && s.extendFwd() {
	}
	for fi.off < s.lo && s.extendBack() {
	}
}

// extendFwd adds the frame at hi to the index.
func (s *segment) extendFwd() bool {
	fi, ok := s.nextFrame(s.hi)
	if !ok {
		return false
	}
	if fi.t.Blobs > 0 {
		s.blobFrames = append(s.blobFrames, fi)
	}
	s.hi = fi.next()
	return true
}

// extendBack adds the frame before lo to the index.
func (s *segment) extendBack() bool {
	fi, ok := s.prevFrame(s.lo)
	if !ok {
		s.lo = s.start
		return false
	}
	if fi.t.Blobs > 0 {
		s.blobFrames = append([]frameInfo{fi}, s.blobFrames...)
	}
	s.lo = fi.off
	return true
}

// blobFrame finds the known frame holding blob ord.
func (s *segment) blobFrame(ord uint32) (frameInfo, bool) {
	i := sort.Search(len(s.blobFrames), func(i int) bool {
		return s.blobFrames[i].t.BlobFirst > ord
	})
	if i == 0 {
		return frameInfo{}, false
	}
	fi := s.blobFrames[i-1]
	return fi, ord-fi.t.BlobFirst < fi.t.Blobs
}
