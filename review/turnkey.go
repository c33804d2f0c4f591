package review

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"hash"

	"github.com/shaperproxy/shaperproxy/conv"
)

// TurnKey names the open turn of req within conversation (a
// conv.ConversationKey): the same for every request of the turn, so the
// proxy reviews a turn once (the checkpoint, ledger.Store.MarkReviewed).
// It hashes the conversation, the turn's ordinal and the role, visible
// text and image count of the message that opened the turn. It uses the
// opener's text rather than its raw bytes because clients re-serialize
// history between requests (and some move cache_control markers onto the
// latest messages). It is "" when req has no user message.
func TurnKey(req *conv.Request, conversation string) string {
	t, ok := req.OpenTurn()
	if !ok {
		return ""
	}
	m := req.Messages[t.Start]
	h := sha256.New()
	writeField(h, "shaperproxy/review/turn/v1")
	writeField(h, conversation)
	writeUint(h, uint64(t.Ordinal))
	writeField(h, m.Role)
	writeField(h, m.Content)
	writeUint(h, uint64(m.Images))
	return "t:" + hex.EncodeToString(h.Sum(nil))[:32]
}

// writeField writes s length-prefixed, so field boundaries are unambiguous.
func writeField(h hash.Hash, s string) {
	writeUint(h, uint64(len(s)))
	h.Write([]byte(s))
}

// writeUint writes v as 8 big-endian bytes.
func writeUint(h hash.Hash, v uint64) {
	var b [8]byte
	binary.BigEndian.PutUint64(b[:], v)
	h.Write(b[:])
}
