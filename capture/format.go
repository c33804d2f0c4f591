package capture

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// Skippable zstd frame magics (0x184D2A50..5F are reserved for user data).
const (
	magicSegment = 0x184D2A5C
	magicHeader  = 0x184D2A5D
	magicTrailer = 0x184D2A5E
)

const (
	formatVersion = 1

	segHeaderSize   = 8 + 40 // skippable frame header + payload
	frameHeaderSize = 8 + 8
	trailerSize     = 8 + 44

	// maxFrameLen bounds the compressed and raw size of one frame a reader
	// accepts, so that a corrupt length never makes it allocate more.
	maxFrameLen = 512 << 20
)

var (
	segTag     = []byte("SPCAPSEG")
	trailerTag = []byte("SPCF")
	crcTable   = crc32.MakeTable(crc32.Castagnoli)
	// trailerPattern is what every trailer starts with; readers search for
	// it to resynchronise after a torn or corrupt frame.
	trailerPattern = func() []byte {
		b := binary.LittleEndian.AppendUint32(nil, magicTrailer)
		b = binary.LittleEndian.AppendUint32(b, trailerSize-8)
		return append(b, trailerTag...)
	}()
)

func crc(b []byte) uint32 { return crc32.Checksum(b, crcTable) }

// segName returns the file name of segment num.
func segName(num uint64) string { return fmt.Sprintf("capture-%012d.zst", num) }

// parseSegName returns the number of a segment file name.
func parseSegName(name string) (uint64, bool) {
	name = filepath.Base(name)
	if !strings.HasPrefix(name, "capture-") || !strings.HasSuffix(name, ".zst") {
		return 0, false
	}
	n, err := strconv.ParseUint(name[len("capture-"):len(name)-len(".zst")], 10, 64)
	return n, err == nil
}

func appendSegHeader(b []byte, num uint64, created time.Time) []byte {
	b = binary.LittleEndian.AppendUint32(b, magicSegment)
	b = binary.LittleEndian.AppendUint32(b, segHeaderSize-8)
	start := len(b)
	b = append(b, segTag...)
	b = binary.LittleEndian.AppendUint32(b, formatVersion)
	b = binary.LittleEndian.AppendUint32(b, 0)
	b = binary.LittleEndian.AppendUint64(b, num)
	b = binary.LittleEndian.AppendUint64(b, uint64(created.UnixNano()))
	b = binary.LittleEndian.AppendUint32(b, 0)
	return binary.LittleEndian.AppendUint32(b, crc(b[start:]))
}

func putFrameHeader(b []byte, frameLen uint32) {
	binary.LittleEndian.PutUint32(b, magicHeader)
	binary.LittleEndian.PutUint32(b[4:], frameHeaderSize-8)
	binary.LittleEndian.PutUint32(b[8:], frameLen)
	binary.LittleEndian.PutUint32(b[12:], crc(b[8:12]))
}

// parseFrameHeader returns the compressed length in a frame header.
func parseFrameHeader(b []byte) (uint32, bool) {
	if len(b) < frameHeaderSize ||
		binary.LittleEndian.Uint32(b) != magicHeader ||
		binary.LittleEndian.Uint32(b[4:]) != frameHeaderSize-8 ||
		binary.LittleEndian.Uint32(b[12:]) != crc(b[8:12]) {
		return 0, false
	}
	n := binary.LittleEndian.Uint32(b[8:])
	return n, n <= maxFrameLen
}

// trailer describes one frame; it is stored after the frame.
type trailer struct {
	FrameLen  uint32 // compressed bytes of the zstd frame
	RawLen    uint32 // decompressed bytes
	Records   uint32 // records in the frame, blobs included
	BlobFirst uint32 // segment ordinal of the frame's first blob
	Blobs     uint32 // blobs in the frame
	MaxTime   int64  // newest record time, Unix nanoseconds
	FrameCRC  uint32 // CRC-32C of the compressed frame
}

func appendTrailer(b []byte, t trailer) []byte {
	b = binary.LittleEndian.AppendUint32(b, magicTrailer)
	b = binary.LittleEndian.AppendUint32(b, trailerSize-8)
	start := len(b)
	b = append(b, trailerTag...)
	b = append(b, formatVersion, 0, 0, 0)
	b = binary.LittleEndian.AppendUint32(b, t.FrameLen)
	b = binary.LittleEndian.AppendUint32(b, t.RawLen)
	b = binary.LittleEndian.AppendUint32(b, t.Records)
	b = binary.LittleEndian.AppendUint32(b, t.BlobFirst)
	b = binary.LittleEndian.AppendUint32(b, t.Blobs)
	b = binary.LittleEndian.AppendUint64(b, uint64(t.MaxTime))
	b = binary.LittleEndian.AppendUint32(b, t.FrameCRC)
	return binary.LittleEndian.AppendUint32(b, crc(b[start:]))
}

// parseTrailer decodes a trailer and checks its own checksum (not the
// frame's).
func parseTrailer(b []byte) (trailer, bool) {
	if len(b) < trailerSize || !bytes.Equal(b[:12], trailerPattern) {
		return trailer{}, false
	}
	p := b[8:trailerSize]
	if p[4] != formatVersion || binary.LittleEndian.Uint32(p[40:]) != crc(p[:40]) {
		return trailer{}, false
	}
	t := trailer{
		FrameLen:  binary.LittleEndian.Uint32(p[8:]),
		RawLen:    binary.LittleEndian.Uint32(p[12:]),
		Records:   binary.LittleEndian.Uint32(p[16:]),
		BlobFirst: binary.LittleEndian.Uint32(p[20:]),
		Blobs:     binary.LittleEndian.Uint32(p[24:]),
		MaxTime:   int64(binary.LittleEndian.Uint64(p[28:])),
		FrameCRC:  binary.LittleEndian.Uint32(p[36:]),
	}
	ok := t.FrameLen <= maxFrameLen && t.RawLen <= maxFrameLen && t.Records <= t.RawLen
	return t, ok
}
