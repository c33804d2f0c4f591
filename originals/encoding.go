package originals

import (
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"time"
)

// On-disk layout (all integers big-endian, so keys sort by number):
//
//	conv/<conversation>/meta       -> seen unix-nanos (8) | current turn (8)
//	conv/<conversation>/e/<ekey>   -> time unix-nanos (8) | uvarint len(shaped) | shaped | original
//	hash/<ikey>                    -> turn (8) | len(original) (8)
//
//	ekey = turn (8) | sha256(shaped) (32) | sha256(original) (32)
//	ikey = sha256(shaped) (32) | sha256(original) (32) | conversation
//
// Entries live in their conversation's bucket, sorted by turn, so clearing
// the earlier turns of one conversation walks a prefix of that bucket and
// nothing else. The hash bucket is the index for lookups by shaped text and
// the identity of an entry: one (shaped, original) pair per conversation.
var (
	bucketConv    = []byte("conv")
	bucketHash    = []byte("hash")
	bucketEntries = []byte("e")
	keyMeta       = []byte("meta")
)

const (
	sumLen      = sha256.Size
	ekeyLen     = 8 + 2*sumLen
	ivalLen     = 16
	metaLen     = 16
	valueHeader = 8
)

type sum = [sumLen]byte

func hashOf(s string) sum { return sha256.Sum256([]byte(s)) }

func entryKey(turn int, shaped, original sum) []byte {
	k := make([]byte, 0, ekeyLen)
	k = binary.BigEndian.AppendUint64(k, uint64(turn))
	k = append(k, shaped[:]...)
	return append(k, original[:]...)
}

// keyTurn returns the turn of an entry key.
func keyTurn(ekey []byte) int { return int(binary.BigEndian.Uint64(ekey[:8])) }

// indexKeyOf returns the index key of the entry stored under ekey.
func indexKeyOf(ekey []byte, conv string) []byte {
	k := make([]byte, 0, 2*sumLen+len(conv))
	k = append(k, ekey[8:ekeyLen]...)
	return append(k, conv...)
}

func indexKey(shaped, original sum, conv string) []byte {
	k := make([]byte, 0, 2*sumLen+len(conv))
	k = append(k, shaped[:]...)
	k = append(k, original[:]...)
	return append(k, conv...)
}

func indexValue(turn, originalLen int) []byte {
	v := make([]byte, 0, ivalLen)
	v = binary.BigEndian.AppendUint64(v, uint64(turn))
	return binary.BigEndian.AppendUint64(v, uint64(originalLen))
}

// indexFields splits an index key and value.
func indexFields(k, v []byte) (original sum, conv string, turn int, originalLen int64, err error) {
	if len(k) <= 2*sumLen || len(v) != ivalLen {
		return original, "", 0, 0, fmt.Errorf("%w: index record of %d+%d bytes", ErrCorrupt, len(k), len(v))
	}
	copy(original[:], k[sumLen:2*sumLen])
	turn = int(binary.BigEndian.Uint64(v[:8]))
	originalLen = int64(binary.BigEndian.Uint64(v[8:]))
	return original, string(k[2*sumLen:]), turn, originalLen, nil
}

func encodeValue(t time.Time, shaped, original string) []byte {
	v := make([]byte, 0, valueHeader+binary.MaxVarintLen64+len(shaped)+len(original))
	v = binary.BigEndian.AppendUint64(v, uint64(t.UnixNano()))
	v = binary.AppendUvarint(v, uint64(len(shaped)))
	v = append(v, shaped...)
	return append(v, original...)
}

// decodeEntry rebuilds an Entry from its key and value. The strings are
// copies, so the Entry outlives the transaction.
func decodeEntry(conv string, k, v []byte) (Entry, error) {
	bad := fmt.Errorf("%w: entry of %d+%d bytes in conversation %q", ErrCorrupt, len(k), len(v), conv)
	if len(k) != ekeyLen || len(v) < valueHeader {
		return Entry{}, bad
	}
	n, w := binary.Uvarint(v[valueHeader:])
	rest := v[valueHeader:]
	if w <= 0 || n > uint64(len(rest)-w) {
		return Entry{}, bad
	}
	rest = rest[w:]
	return Entry{
		Shaped:       string(rest[:n]),
		Original:     string(rest[n:]),
		Conversation: conv,
		Turn:         keyTurn(k),
		Time:         time.Unix(0, int64(binary.BigEndian.Uint64(v[:8]))),
	}, nil
}

// meta is what a conversation's bucket records about the conversation.
type meta struct {
	seen time.Time // last Put or BeginTurn
	turn int       // turn of the last BeginTurn
}

func (m meta) encode() []byte {
	v := make([]byte, 0, metaLen)
	v = binary.BigEndian.AppendUint64(v, uint64(m.seen.UnixNano()))
	return binary.BigEndian.AppendUint64(v, uint64(m.turn))
}

func decodeMeta(v []byte) meta {
	if len(v) != metaLen {
		return meta{}
	}
	return meta{
		seen: time.Unix(0, int64(binary.BigEndian.Uint64(v[:8]))),
		turn: int(binary.BigEndian.Uint64(v[8:])),
	}
}
