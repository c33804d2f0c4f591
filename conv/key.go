package conv

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"

	"github.com/shaperproxy/shaperproxy/internal/resolved"
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
	var buf [512]byte
	return keyOf(keyInput(buf[:0], r, explicit))
}

// keyInput appends what ConversationKey hashes: a prefix byte ('h' or 'c')
// and the hash input.
func keyInput(b []byte, r *Request, explicit string) []byte {
	if explicit != "" {
		b = append(b, 'h')
		b = appendField(b, "shaperproxy/conv/header/v1")
		return appendField(b, explicit)
	}
	b = append(b, 'c')
	b = appendField(b, "shaperproxy/conv/prelude/v1")
	for _, m := range r.Messages {
		if m.Role == RoleAssistant || m.Role == RoleTool {
			continue
		}
		b = appendField(b, m.Role)
		b = appendField(b, m.Content)
		b = binary.BigEndian.AppendUint64(b, uint64(m.Images))
		if m.Role == RoleUser {
			break
		}
	}
	return b
}

// keyOf turns keyInput's bytes into the key: the prefix, ':' and the
// first keyHexLen hex digits of the sha256 of the input.
func keyOf(in []byte) string {
	sum := sha256.Sum256(in[1:])
	var out [2 + keyHexLen]byte
	out[0], out[1] = in[0], ':'
	hex.Encode(out[2:], sum[:keyHexLen/2])
	return string(out[:])
}

// appendField appends s length-prefixed (8 bytes, big-endian), so field
// boundaries are unambiguous.
func appendField(b []byte, s string) []byte {
	b = binary.BigEndian.AppendUint64(b, uint64(len(s)))
	return append(b, s...)
}

// KeyCache remembers the conversation keys of recent requests, so that a
// conversation's later requests (which share its prelude: a system prompt
// of many kilobytes, for an agent) pay neither the sha256 of the prelude
// nor any other pass over it. The cache is keyed by the RawKeys of the
// prelude's messages, made when they were parsed (two 64-bit hashes with
// secret random seeds of each message's bytes: the same bytes, the same
// text), so neither chance nor a client can make two preludes share an
// entry; the explicit header's key is cached by the RawKey of its input.
// The zero value is not usable: use NewKeyCache. It is safe for concurrent
// use.
type KeyCache struct {
	keys *resolved.Cache[RawKey, string]
}

// NewKeyCache returns a cache of at most max keys (it is emptied when
// full: forgetting a key costs one sha256).
func NewKeyCache(max int) *KeyCache {
	return &KeyCache{keys: resolved.New[RawKey, string](max)}
}

// Key returns ConversationKey(r, explicit).
func (c *KeyCache) Key(r *Request, explicit string) string {
	var buf [512]byte
	if explicit == "" {
		if id, ok := preludeID(buf[:0], r); ok {
			return c.keys.Get(id, func() string { return keyOf(keyInput(buf[:0], r, "")) })
		}
	}
	in := keyInput(buf[:0], r, explicit)
	return c.keys.Get(RawKeyOf(in), func() string { return keyOf(in) })
}

// preludeID returns the cache id of r's prelude (the messages keyInput
// reads) from their RawKeys: a few bytes hashed, whatever the length of a
// system prompt. false when a message of it has no RawKey.
func preludeID(b []byte, r *Request) (RawKey, bool) {
	b = append(b, 'p') // not a keyInput's first byte ('h', 'c'): the two kinds of id never meet
	for i := range r.Messages {
		m := &r.Messages[i]
		if m.Role == RoleAssistant || m.Role == RoleTool {
			continue
		}
		if m.key == (RawKey{}) {
			return RawKey{}, false
		}
		b = binary.BigEndian.AppendUint64(b, m.key[0])
		b = binary.BigEndian.AppendUint64(b, m.key[1])
		if m.Role == RoleUser {
			break
		}
	}
	return RawKeyOf(b), true
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
	var buf [256]byte
	b := appendField(buf[:0], "shaperproxy/review/turn/v1")
	b = appendField(b, conversation)
	b = binary.BigEndian.AppendUint64(b, uint64(t.Ordinal))
	b = appendField(b, m.Role)
	b = appendField(b, m.Content)
	b = binary.BigEndian.AppendUint64(b, uint64(m.Images))
	sum := sha256.Sum256(b)
	return "t:" + hex.EncodeToString(sum[:16])
}
