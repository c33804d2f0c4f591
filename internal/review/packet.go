package review

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/tidwall/gjson"
)

// Packet values and bounds.
const (
	PacketRole     = "masked-review"
	StatusUpdate   = "update"
	StatusNoUpdate = "no_update"
	// MaxItems is the most items a packet may hold.
	MaxItems = 8
	// MaxPacketChars bounds the characters of all item contents together.
	MaxPacketChars = 4000
)

// kinds and certainties an item may name.
var (
	kinds       = []string{"observation", "conclusion", "assumption", "unknown", "possible_error", "suggestion"}
	certainties = []string{"certain", "likely", "uncertain"}
)

// ErrInvalidPacket is wrapped by every error of ParsePacket and
// ParsePacketText that concerns the packet itself (as opposed to the
// response around it): the proxy counts both as "invalid".
var ErrInvalidPacket = errors.New("review: invalid packet")

// Packet is the child's structured answer.
type Packet struct {
	Role   string // always PacketRole
	Status string // StatusUpdate or StatusNoUpdate
	Items  []Item // empty on no_update; 1 to MaxItems on update
}

// Item is one finding of a packet. Content is trimmed.
type Item struct {
	Kind      string
	Certainty string
	Content   string
}

// ParsePacket reads the packet from a non-streamed chat completion body:
// the string choices[0].message.content, which must hold the packet's JSON
// object and nothing else, or that object inside one ``` or ```json fence.
// The packet is validated strictly (see ParsePacketText).
func ParsePacket(childResponseBody []byte) (Packet, error) {
	if !json.Valid(childResponseBody) {
		return Packet{}, errors.New("review: child response is not json")
	}
	root := gjson.ParseBytes(childResponseBody)
	if e := root.Get("error"); e.Exists() && e.Type != gjson.Null {
		return Packet{}, fmt.Errorf("review: child response is an error: %.200s", e.Raw)
	}
	choice := root.Get("choices.0")
	if !choice.IsObject() {
		return Packet{}, errors.New("review: child response has no choice")
	}
	if f := str(choice.Get("finish_reason")); f == "length" {
		return Packet{}, errors.New("review: child response was cut (finish_reason length)")
	}
	c := choice.Get("message.content")
	if c.Type != gjson.String {
		return Packet{}, fmt.Errorf("%w: message content is not a string (%s)", ErrInvalidPacket, c.Type)
	}
	return ParsePacketText(c.Str)
}

// ParsePacketText parses and validates a packet from the text of the
// child's answer. It accepts exactly one JSON object, optionally inside a
// ``` or ```json fence, with the keys role ("masked-review"), status
// ("update" or "no_update") and items, nothing else. On no_update items is
// omitted or empty; on update it holds 1 to MaxItems items of exactly kind,
// certainty and content, with known enum values, non-empty trimmed content,
// no two items with the same kind and content, and at most MaxPacketChars
// characters of content in all. No key may repeat.
func ParsePacketText(s string) (Packet, error) {
	inner, err := unfence(s)
	if err != nil {
		return Packet{}, err
	}
	if !json.Valid([]byte(inner)) {
		return Packet{}, fmt.Errorf("%w: not json", ErrInvalidPacket)
	}
	obj := gjson.Parse(inner)
	if !obj.IsObject() {
		return Packet{}, fmt.Errorf("%w: not a json object", ErrInvalidPacket)
	}
	return parseObject(obj)
}

// unfence returns the text inside a ``` or ```json fence, or s trimmed.
func unfence(s string) (string, error) {
	s = strings.TrimSpace(s)
	if !strings.HasPrefix(s, "```") {
		return s, nil
	}
	first, rest, ok := strings.Cut(s, "\n")
	if lang := strings.TrimSpace(first[3:]); !ok || (lang != "" && !strings.EqualFold(lang, "json")) {
		return "", fmt.Errorf("%w: a fence other than ```json", ErrInvalidPacket)
	}
	inner, ok := strings.CutSuffix(strings.TrimSpace(rest), "```")
	if !ok {
		return "", fmt.Errorf("%w: unclosed fence", ErrInvalidPacket)
	}
	return inner, nil
}

// parseObject validates the packet object.
func parseObject(obj gjson.Result) (Packet, error) {
	if err := checkKeys(obj, "packet", "role", "status", "items"); err != nil {
		return Packet{}, err
	}
	p := Packet{Role: str(obj.Get("role")), Status: str(obj.Get("status"))}
	if p.Role != PacketRole {
		return Packet{}, fmt.Errorf("%w: role %s, want %q", ErrInvalidPacket, orMissing(obj.Get("role")), PacketRole)
	}
	items := obj.Get("items")
	var err error
	switch p.Status {
	case StatusNoUpdate:
		if items.Exists() && (!items.IsArray() || len(items.Array()) > 0) {
			return Packet{}, fmt.Errorf("%w: no_update with items", ErrInvalidPacket)
		}
	case StatusUpdate:
		if p.Items, err = parseItems(items); err != nil {
			return Packet{}, err
		}
	default:
		return Packet{}, fmt.Errorf("%w: status %s, want \"update\" or \"no_update\"", ErrInvalidPacket, orMissing(obj.Get("status")))
	}
	return p, nil
}

// parseItems validates the items of an update.
func parseItems(items gjson.Result) ([]Item, error) {
	if !items.IsArray() {
		return nil, fmt.Errorf("%w: update without an items array", ErrInvalidPacket)
	}
	arr := items.Array()
	switch {
	case len(arr) == 0:
		return nil, fmt.Errorf("%w: update with no items", ErrInvalidPacket)
	case len(arr) > MaxItems:
		return nil, fmt.Errorf("%w: %d items (max %d)", ErrInvalidPacket, len(arr), MaxItems)
	}
	out := make([]Item, 0, len(arr))
	seen := make(map[[2]string]bool) // kind, content
	chars := 0
	for i, v := range arr {
		it, err := parseItem(v)
		if err != nil {
			return nil, fmt.Errorf("item %d: %w", i+1, err)
		}
		if seen[[2]string{it.Kind, it.Content}] {
			return nil, fmt.Errorf("%w: item %d repeats an earlier %s item", ErrInvalidPacket, i+1, it.Kind)
		}
		seen[[2]string{it.Kind, it.Content}] = true
		if chars += utf8.RuneCountInString(it.Content); chars > MaxPacketChars {
			return nil, fmt.Errorf("%w: more than %d characters of content", ErrInvalidPacket, MaxPacketChars)
		}
		out = append(out, it)
	}
	return out, nil
}

// parseItem validates one item.
func parseItem(v gjson.Result) (Item, error) {
	if !v.IsObject() {
		return Item{}, fmt.Errorf("%w: not an object", ErrInvalidPacket)
	}
	if err := checkKeys(v, "item", "kind", "certainty", "content"); err != nil {
		return Item{}, err
	}
	it := Item{Kind: str(v.Get("kind")), Certainty: str(v.Get("certainty")), Content: strings.TrimSpace(str(v.Get("content")))}
	switch {
	case !slices.Contains(kinds, it.Kind):
		return Item{}, fmt.Errorf("%w: kind %s", ErrInvalidPacket, orMissing(v.Get("kind")))
	case !slices.Contains(certainties, it.Certainty):
		return Item{}, fmt.Errorf("%w: certainty %s", ErrInvalidPacket, orMissing(v.Get("certainty")))
	case v.Get("content").Type != gjson.String:
		return Item{}, fmt.Errorf("%w: content %s is not a string", ErrInvalidPacket, orMissing(v.Get("content")))
	case it.Content == "":
		return Item{}, fmt.Errorf("%w: empty content", ErrInvalidPacket)
	}
	return it, nil
}

// checkKeys rejects a repeated key and any key not in allowed.
func checkKeys(obj gjson.Result, what string, allowed ...string) error {
	if k, dup := duplicateKey(obj); dup {
		return fmt.Errorf("%w: %s repeats key %q", ErrInvalidPacket, what, k)
	}
	var err error
	obj.ForEach(func(k, _ gjson.Result) bool {
		if !slices.Contains(allowed, k.Str) {
			err = fmt.Errorf("%w: %s has unknown key %q", ErrInvalidPacket, what, k.Str)
		}
		return err == nil
	})
	return err
}

// orMissing returns v's raw JSON (cut to 80 bytes), or "missing".
func orMissing(v gjson.Result) string {
	if !v.Exists() {
		return "missing"
	}
	if len(v.Raw) > 80 {
		return strings.ToValidUTF8(v.Raw[:80], "") + "…"
	}
	return v.Raw
}
