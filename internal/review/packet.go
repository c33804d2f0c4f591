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
	packetRole     = "masked-review"
	statusUpdate   = "update"
	statusNoUpdate = "no_update"
	// maxItems is the most items a packet may hold.
	maxItems = 8
	// maxPacketChars bounds the characters of all item contents together.
	maxPacketChars = 4000
)

// kinds and certainties an item may name.
var (
	kinds       = []string{"observation", "conclusion", "assumption", "unknown", "possible_error", "suggestion"}
	certainties = []string{"certain", "likely", "uncertain"}
)

// errInvalidPacket is wrapped by every error of ParsePacket and
// ParsePacketText that concerns the packet itself (as opposed to the
// response around it): the proxy counts both as "invalid".
var errInvalidPacket = errors.New("review: invalid packet")

// Packet is the child's structured answer.
type Packet struct {
	Role   string `json:"role"`            // always packetRole
	Status string `json:"status"`          // statusUpdate or statusNoUpdate
	Items  []Item `json:"items,omitempty"` // empty on no_update; 1 to maxItems on update
}

// Item is one finding of a packet. Content is trimmed.
type Item struct {
	Kind      string `json:"kind"`
	Certainty string `json:"certainty"`
	Content   string `json:"content"`
}

// parsePacket reads the packet from a non-streamed chat completion body:
// the string choices[0].message.content, which must hold the packet's JSON
// object and nothing else, or that object inside one ``` or ```json fence.
// The packet is validated strictly (see ParsePacketText).
func parsePacket(childResponseBody []byte) (Packet, error) {
	return ParsePacketAs(childResponseBody, packetRole)
}

// ParsePacketAs is parsePacket for a packet whose role is role (the
// deliberate tool's branches answer with their own role).
func ParsePacketAs(childResponseBody []byte, role string) (Packet, error) {
	if !json.Valid(childResponseBody) {
		return Packet{}, errors.New("review: child response is not json")
	}
	root := gjson.ParseBytes(childResponseBody)
	if e := root.Get("error"); e.Exists() && e.Type != gjson.Null {
		// Not its text: an upstream may repeat the key it was sent (the
		// capture has the whole answer).
		return Packet{}, errors.New("review: child response is an error")
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
		return Packet{}, fmt.Errorf("%w: message content is not a string (%s)", errInvalidPacket, c.Type)
	}
	return parsePacketTextAs(c.Str, role)
}

// parsePacketText parses and validates a packet from the text of the
// child's answer. It accepts exactly one JSON object, optionally inside a
// ``` or ```json fence, with the keys role ("masked-review"), status
// ("update" or "no_update") and items, nothing else. On no_update items is
// omitted or empty; on update it holds 1 to MaxItems items of exactly kind,
// certainty and content, with known enum values, non-empty trimmed content,
// no two items with the same kind and content, and at most MaxPacketChars
// characters of content in all. No key may repeat.
func parsePacketText(s string) (Packet, error) { return parsePacketTextAs(s, packetRole) }

func parsePacketTextAs(s, role string) (Packet, error) {
	inner, err := unfence(s)
	if err != nil {
		return Packet{}, err
	}
	if !json.Valid([]byte(inner)) {
		return Packet{}, fmt.Errorf("%w: not json", errInvalidPacket)
	}
	obj := gjson.Parse(inner)
	if !obj.IsObject() {
		return Packet{}, fmt.Errorf("%w: not a json object", errInvalidPacket)
	}
	return parseObject(obj, role)
}

// unfence returns the text inside a ``` or ```json fence, or s trimmed.
func unfence(s string) (string, error) {
	s = strings.TrimSpace(s)
	if !strings.HasPrefix(s, "```") {
		return s, nil
	}
	first, rest, ok := strings.Cut(s, "\n")
	if lang := strings.TrimSpace(first[3:]); !ok || (lang != "" && !strings.EqualFold(lang, "json")) {
		return "", fmt.Errorf("%w: a fence other than ```json", errInvalidPacket)
	}
	inner, ok := strings.CutSuffix(strings.TrimSpace(rest), "```")
	if !ok {
		return "", fmt.Errorf("%w: unclosed fence", errInvalidPacket)
	}
	return inner, nil
}

// parseObject validates the packet object.
func parseObject(obj gjson.Result, role string) (Packet, error) {
	if err := checkKeys(obj, "packet", "role", "status", "items"); err != nil {
		return Packet{}, err
	}
	p := Packet{Role: str(obj.Get("role")), Status: str(obj.Get("status"))}
	if p.Role != role {
		return Packet{}, fmt.Errorf("%w: role %s, want %q", errInvalidPacket, orMissing(obj.Get("role")), role)
	}
	items := obj.Get("items")
	var err error
	switch p.Status {
	case statusNoUpdate:
		if items.Exists() && (!items.IsArray() || len(items.Array()) > 0) {
			return Packet{}, fmt.Errorf("%w: no_update with items", errInvalidPacket)
		}
	case statusUpdate:
		if p.Items, err = parseItems(items); err != nil {
			return Packet{}, err
		}
	default:
		return Packet{}, fmt.Errorf("%w: status %s, want \"update\" or \"no_update\"", errInvalidPacket, orMissing(obj.Get("status")))
	}
	return p, nil
}

// parseItems validates the items of an update.
func parseItems(items gjson.Result) ([]Item, error) {
	if !items.IsArray() {
		return nil, fmt.Errorf("%w: update without an items array", errInvalidPacket)
	}
	arr := items.Array()
	switch {
	case len(arr) == 0:
		return nil, fmt.Errorf("%w: update with no items", errInvalidPacket)
	case len(arr) > maxItems:
		return nil, fmt.Errorf("%w: %d items (max %d)", errInvalidPacket, len(arr), maxItems)
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
			return nil, fmt.Errorf("%w: item %d repeats an earlier %s item", errInvalidPacket, i+1, it.Kind)
		}
		seen[[2]string{it.Kind, it.Content}] = true
		if chars += utf8.RuneCountInString(it.Content); chars > maxPacketChars {
			return nil, fmt.Errorf("%w: more than %d characters of content", errInvalidPacket, maxPacketChars)
		}
		out = append(out, it)
	}
	return out, nil
}

// parseItem validates one item.
func parseItem(v gjson.Result) (Item, error) {
	if !v.IsObject() {
		return Item{}, fmt.Errorf("%w: not an object", errInvalidPacket)
	}
	if err := checkKeys(v, "item", "kind", "certainty", "content"); err != nil {
		return Item{}, err
	}
	it := Item{Kind: str(v.Get("kind")), Certainty: str(v.Get("certainty")), Content: strings.TrimSpace(str(v.Get("content")))}
	switch {
	case !slices.Contains(kinds, it.Kind):
		return Item{}, fmt.Errorf("%w: kind %s", errInvalidPacket, orMissing(v.Get("kind")))
	case !slices.Contains(certainties, it.Certainty):
		return Item{}, fmt.Errorf("%w: certainty %s", errInvalidPacket, orMissing(v.Get("certainty")))
	case v.Get("content").Type != gjson.String:
		return Item{}, fmt.Errorf("%w: content %s is not a string", errInvalidPacket, orMissing(v.Get("content")))
	case it.Content == "":
		return Item{}, fmt.Errorf("%w: empty content", errInvalidPacket)
	}
	return it, nil
}

// checkKeys rejects a repeated key and any key not in allowed.
func checkKeys(obj gjson.Result, what string, allowed ...string) error {
	if k, dup := duplicateKey(obj); dup {
		return fmt.Errorf("%w: %s repeats key %q", errInvalidPacket, what, k)
	}
	var err error
	obj.ForEach(func(k, _ gjson.Result) bool {
		if !slices.Contains(allowed, k.Str) {
			err = fmt.Errorf("%w: %s has unknown key %q", errInvalidPacket, what, k.Str)
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
