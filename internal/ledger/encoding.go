package ledger

import (
	"encoding/binary"
	"fmt"
)

// insertionVersion is the first byte of an encoded Insertion.
const insertionVersion = 1

// encodeInsertion encodes the three messages of ins, each as a uvarint
// length and its bytes, after a version byte. The key is the record's key.
func encodeInsertion(ins Insertion) []byte {
	b := make([]byte, 0, 1+3*binary.MaxVarintLen64+len(ins.Draft)+len(ins.Notice)+len(ins.Continuation))
	b = append(b, insertionVersion)
	for _, f := range [][]byte{ins.Draft, ins.Notice, ins.Continuation} {
		b = binary.AppendUvarint(b, uint64(len(f)))
		b = append(b, f...)
	}
	return b
}

// decodeInsertion decodes v (stored under key) into fresh slices.
func decodeInsertion(key [32]byte, v []byte) (Insertion, error) {
	if len(v) == 0 || v[0] != insertionVersion {
		return Insertion{}, fmt.Errorf("%w: insertion version", errCorrupt)
	}
	v = v[1:]
	var fields [3][]byte
	for i := range fields {
		n, size := binary.Uvarint(v)
		if size <= 0 || n > uint64(len(v)-size) {
			return Insertion{}, fmt.Errorf("%w: insertion field %d", errCorrupt, i)
		}
		fields[i] = append([]byte{}, v[size:size+int(n)]...)
		v = v[size+int(n):]
	}
	if len(v) != 0 {
		return Insertion{}, fmt.Errorf("%w: %d trailing bytes", errCorrupt, len(v))
	}
	return Insertion{Key: key, Draft: fields[0], Notice: fields[1], Continuation: fields[2]}, nil
}
