package conv

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"hash"
)

// keyHexLen is the number of hex digits kept from a key's sha256.
const keyHexLen = 16

// ConversationKey names the conversation a request belongs to.
//
// When explicit (the X-Shaper-Conversation header value) is not empty the
// key is "h:" followed by a hash of it; the raw value never appears.
// Otherwise the key is "c:" followed by a hash of the role, visible text
// and image count of each message up to and including the first user
// message, skipping assistant and tool messages. Reasoning never enters
// the key, so it stays the same while history grows and reasoning is
// shaped, and a sub-agent (other system prompt or first task) gets its own
// key. A request without a user message hashes its whole prelude.
func ConversationKey(r *Request, explicit string) string {
	if explicit != "" {
		h := sha256.New()
		writeField(h, "shaperproxy/conv/header/v1")
		writeField(h, explicit)
		return "h:" + sum(h)
	}
	h := sha256.New()
	writeField(h, "shaperproxy/conv/prelude/v1")
	for _, m := range r.Messages {
		if m.Role == RoleAssistant || m.Role == RoleTool {
			continue
		}
		writeField(h, m.Role)
		writeField(h, m.Content)
		writeUint(h, uint64(m.Images))
		if m.Role == RoleUser {
			break
		}
	}
	return "c:" + sum(h)
}

// TurnKey names the open turn of r within conversation (a
// ConversationKey): the same for every request of the turn, so the proxy
// reviews a turn once. It hashes the conversation, the turn's ordinal and
// the role, visible text and image count of the message that opened the
// turn. It uses the opener's text rather than its raw bytes because
// clients re-serialize history between requests (and some move
// cache_control markers onto the latest messages). It is "" when r has no
// user message.
func TurnKey(r *Request, conversation string) string {
	t, ok := r.OpenTurn()
	if !ok {
		return ""
	}
	m := r.Messages[t.Start]
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

// sum returns the first keyHexLen hex digits of h's digest.
func sum(h hash.Hash) string {
	return hex.EncodeToString(h.Sum(nil))[:keyHexLen]
}
