package conv

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"hash"
	"regexp"
	"strings"
	"testing"
)

var keyPattern = regexp.MustCompile(`^[ch]:[0-9a-f]{16}$`)

// parseBytes parses body or fails the test.
func parseBytes(t testing.TB, body []byte) *Request {
	t.Helper()
	r, err := ParseRequest(body)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func TestConversationKeyStableAcrossMultiturn(t *testing.T) {
	var keys []string
	for _, name := range multiturn {
		keys = append(keys, ConversationKey(parseBytes(t, readTestdata(t, name)), ""))
	}
	for i, k := range keys {
		if !keyPattern.MatchString(k) || !strings.HasPrefix(k, "c:") {
			t.Errorf("key %d = %q", i, k)
		}
		if k != keys[0] {
			t.Errorf("request %d key %q != request 1 key %q", i+1, k, keys[0])
		}
	}
}

func TestConversationKeyDiffers(t *testing.T) {
	body := readTestdata(t, multiturn[2])
	base := ConversationKey(parseBytes(t, body), "")
	tests := []struct {
		name     string
		old, new string
		same     bool
	}{
		{"other system prompt (sub-agent)", "You're a dice game", "You're a coin game", false},
		{"other first task", "My guess is 4", "My guess is 5", false},
		{"other role order", `"role": "system"}, {"content": "The following`, `"role": "developer"}, {"content": "The following`, false},
		{"shaped reasoning", "Great, now I have access", "[shaped]", true},
		{"other assistant content", "Let me get your name and roll the die!", "Rolling.", true},
		{"other tool result", `"content": "Anne"`, `"content": "Bob"`, true},
		{"other model", `"model": "deepseek-reasoner"`, `"model": "deepseek-chat"`, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			changed := bytes.Replace(body, []byte(tt.old), []byte(tt.new), 1)
			if bytes.Equal(changed, body) {
				t.Fatalf("%q not found", tt.old)
			}
			got := ConversationKey(parseBytes(t, changed), "")
			if (got == base) != tt.same {
				t.Errorf("key %q vs base %q: same = %v, want %v", got, base, got == base, tt.same)
			}
		})
	}
}

func TestConversationKeyContentShapes(t *testing.T) {
	str := mustParse(t, `{"messages":[{"role":"system","content":"S"},{"role":"user","content":"hi"}]}`)
	parts := mustParse(t, `{"messages":[{"role":"system","content":[{"type":"text","text":"S"}]},{"role":"user","content":[{"type":"text","text":"hi","cache_control":{"type":"ephemeral"}}]}]}`)
	image := mustParse(t, `{"messages":[{"role":"system","content":"S"},{"role":"user","content":[{"type":"text","text":"hi"},{"type":"image_url","image_url":{"url":"u"}}]}]}`)
	if ConversationKey(str, "") != ConversationKey(parts, "") {
		t.Error("string content and text parts give different keys")
	}
	if ConversationKey(str, "") == ConversationKey(image, "") {
		t.Error("an added image does not change the key")
	}
}

func TestConversationKeyExplicit(t *testing.T) {
	a := mustParse(t, `{"messages":[{"role":"user","content":"a"}]}`)
	b := mustParse(t, `{"messages":[{"role":"user","content":"b"}]}`)
	ka, kb := ConversationKey(a, "session-123"), ConversationKey(b, "session-123")
	if ka != kb || !keyPattern.MatchString(ka) || !strings.HasPrefix(ka, "h:") {
		t.Errorf("explicit keys %q, %q", ka, kb)
	}
	if strings.Contains(ka, "session-123") {
		t.Errorf("key %q echoes the header", ka)
	}
	if ConversationKey(a, "session-124") == ka {
		t.Error("different headers give the same key")
	}
	if ConversationKey(a, "") == ka {
		t.Error("explicit key equals derived key")
	}
}

func TestConversationKeyPreludeOnly(t *testing.T) {
	a := mustParse(t, `{"messages":[{"role":"system","content":"A"}]}`)
	b := mustParse(t, `{"messages":[{"role":"system","content":"B"}]}`)
	empty := mustParse(t, `{"messages":[]}`)
	ka, kb, ke := ConversationKey(a, ""), ConversationKey(b, ""), ConversationKey(empty, "")
	if ka == kb || ka == ke || !keyPattern.MatchString(ke) {
		t.Errorf("prelude keys %q %q %q", ka, kb, ke)
	}
	withUser := mustParse(t, `{"messages":[{"role":"system","content":"A"},{"role":"user","content":""}]}`)
	if ConversationKey(withUser, "") == ka {
		t.Error("adding the first user message does not change the key")
	}
}

func TestConversationKeyFieldBoundaries(t *testing.T) {
	a := mustParse(t, `{"messages":[{"role":"system","content":"ab"},{"role":"user","content":"c"}]}`)
	b := mustParse(t, `{"messages":[{"role":"system","content":"a"},{"role":"user","content":"bc"}]}`)
	if ConversationKey(a, "") == ConversationKey(b, "") {
		t.Error("moving text between messages keeps the key")
	}
}

func TestConversationKeyIgnoresLaterMessages(t *testing.T) {
	base := ConversationKey(mustParse(t, `{"messages":[{"role":"system","content":"S"},{"role":"user","content":"task"}]}`), "")
	tests := []struct{ name, body string }{
		{"later turns", `{"messages":[{"role":"system","content":"S"},{"role":"user","content":"task"},{"role":"assistant","content":"done"},{"role":"user","content":"next task"},{"role":"system","content":"reminder"}]}`},
		{"assistant in prelude", `{"messages":[{"role":"system","content":"S"},{"role":"assistant","content":"hello, how can I help?","reasoning_content":"greet"},{"role":"user","content":"task"}]}`},
	}
	for _, tt := range tests {
		if got := ConversationKey(mustParse(t, tt.body), ""); got != base {
			t.Errorf("%s: key %q, want %q", tt.name, got, base)
		}
	}
}

// oldConversationKey is ConversationKey as first written (sha256.New and
// writeField): keys are stored on disk, so they must never change.
func oldConversationKey(r *Request, explicit string) string {
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

// writeField and writeUint are how the keys were first written (each
// field length-prefixed into a sha256 hash): the references the keys are
// pinned to.
func writeField(h hash.Hash, s string) {
	writeUint(h, uint64(len(s)))
	h.Write([]byte(s))
}

func writeUint(h hash.Hash, v uint64) {
	var b [8]byte
	binary.BigEndian.PutUint64(b[:], v)
	h.Write(b[:])
}

// oldTurnKey is TurnKey as first written; turn keys are stored in the
// ledger, so they must never change either.
func oldTurnKey(r *Request, conversation string) string {
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

// TestKeysUnchanged: conversation keys (from the view and from the
// cache, on a miss and a hit) and turn keys are what their first
// implementations gave, on every multi-turn fixture.
func TestKeysUnchanged(t *testing.T) {
	cache := NewKeyCache(2)
	turns := 0
	for _, body := range applyBodies(t) {
		r := parseBytes(t, body)
		for _, s := range []string{"", "my-session", strings.Repeat("x", 600)} {
			want := oldConversationKey(r, s)
			if got := ConversationKey(r, s); got != want {
				t.Errorf("ConversationKey = %q, want %q", got, want)
			}
			for range 2 { // a miss, then a hit
				if got := cache.Key(r, s); got != want {
					t.Errorf("KeyCache.Key = %q, want %q", got, want)
				}
			}
			wantTurn := oldTurnKey(r, s)
			if got := TurnKey(r, s); got != wantTurn {
				t.Errorf("TurnKey = %q, want %q", got, wantTurn)
			}
			if wantTurn != "" {
				turns++
			}
		}
	}
	if turns == 0 {
		t.Fatal("no request with a turn to key")
	}
}

// sum returns the first keyHexLen hex digits of h's digest.
func sum(h hash.Hash) string {
	return hex.EncodeToString(h.Sum(nil))[:keyHexLen]
}

// TestKeyCacheByRawKeys: a conversation's later requests find their key by
// their prelude's raw keys (no entry added, whatever the system prompt's
// length); a prelude written differently with the same text gets the same
// key (under an entry of its own); another prelude another key.
func TestKeyCacheByRawKeys(t *testing.T) {
	system := strings.Repeat("You are a careful coding agent. ", 3000) // ~100 KB
	first := parseBytes(t, []byte(`{"messages":[{"role":"system","content":"`+system+`"},{"role":"user","content":"fix it"}]}`))
	later := parseBytes(t, []byte(`{"model":"m","messages":[{"role":"system","content":"`+system+`"},{"role":"user","content":"fix it"},{"role":"assistant","content":"done"},{"role":"user","content":"thanks"}]}`))
	respaced := parseBytes(t, []byte(`{"messages":[{"content":"`+system+`", "role":"system"},{"role":"user","content":"fix it"}]}`))
	other := parseBytes(t, []byte(`{"messages":[{"role":"system","content":"`+system+`"},{"role":"user","content":"fix that"}]}`))
	c := NewKeyCache(16)
	k := c.Key(first, "")
	if k != ConversationKey(first, "") || c.keys.Len() != 1 {
		t.Fatalf("first: %q, %d held", k, c.keys.Len())
	}
	if got := c.Key(later, ""); got != k || c.keys.Len() != 1 {
		t.Fatalf("a later request: %q (want %q), %d held (want 1)", got, k, c.keys.Len())
	}
	if got := c.Key(respaced, ""); got != k || c.keys.Len() != 2 {
		t.Fatalf("the prelude written differently: %q (want %q), %d held (want 2)", got, k, c.keys.Len())
	}
	if got := c.Key(other, ""); got == k || got != ConversationKey(other, "") {
		t.Fatalf("another first task: %q", got)
	}
}

// BenchmarkKeyCacheLongSystem: a conversation's key, found in the cache,
// for a request with a 100 KB system prompt: by the prelude's raw keys
// (raw-keys), and by a hash of its text, as the cache was keyed before
// (text: the prompt copied and hashed on every request).
func BenchmarkKeyCacheLongSystem(b *testing.B) {
	system := strings.Repeat("You are a careful coding agent. ", 3000)
	r := parseBytes(b, []byte(`{"messages":[{"role":"system","content":"`+system+`"},{"role":"user","content":"fix it"}]}`))
	c := NewKeyCache(16)
	want := c.Key(r, "")
	b.Run("raw-keys", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if c.Key(r, "") != want {
				b.Fatal("key changed")
			}
		}
	})
	b.Run("text", func(b *testing.B) {
		b.ReportAllocs()
		var buf [512]byte
		for b.Loop() {
			_ = RawKeyOf(keyInput(buf[:0], r, ""))
		}
	})
}
