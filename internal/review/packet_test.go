package review

import (
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"
)

// completion wraps content as a non-streamed chat completion body.
func completion(content string) []byte {
	return []byte(`{"id":"x","object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":` +
		quoteTest(content) + `,"reasoning_content":"thinking"},"finish_reason":"stop"}]}`)
}

func items(n int) string {
	var parts []string
	for i := range n {
		parts = append(parts, fmt.Sprintf(`{"kind":"observation","certainty":"likely","content":"point %d"}`, i))
	}
	return "[" + strings.Join(parts, ",") + "]"
}

func TestParsePacket(t *testing.T) {
	update := `{"role":"masked-review","status":"update","items":[{"kind":"possible_error","certainty":"likely","content":"  go vet failed; the draft says tests pass.  "},{"kind":"suggestion","certainty":"certain","content":"Run go vet."}]}`
	wantUpdate := Packet{Role: packetRole, Status: statusUpdate, Items: []Item{
		{Kind: "possible_error", Certainty: "likely", Content: "go vet failed; the draft says tests pass."},
		{Kind: "suggestion", Certainty: "certain", Content: "Run go vet."},
	}}
	noUpdate := Packet{Role: packetRole, Status: statusNoUpdate}
	tests := []struct {
		name    string
		content string
		want    Packet
		wantErr string // substring; "" means valid
	}{
		{"update", update, wantUpdate, ""},
		{"no_update", `{"role":"masked-review","status":"no_update"}`, noUpdate, ""},
		{"no_update empty items", `{"role":"masked-review","status":"no_update","items":[]}`, noUpdate, ""},
		{"fenced json", "```json\n" + update + "\n```", wantUpdate, ""},
		{"fenced bare", "```\n" + update + "\n```\n", wantUpdate, ""},
		{"eight items", `{"role":"masked-review","status":"update","items":` + items(8) + `}`, Packet{}, ""},
		{"same content other kind", `{"role":"masked-review","status":"update","items":[{"kind":"unknown","certainty":"likely","content":"a"},{"kind":"assumption","certainty":"likely","content":"a"}]}`, Packet{}, ""},

		{"unknown kind", `{"role":"masked-review","status":"update","items":[{"kind":"opinion","certainty":"likely","content":"a"}]}`, Packet{}, "kind"},
		{"bad certainty", `{"role":"masked-review","status":"update","items":[{"kind":"unknown","certainty":"sure","content":"a"}]}`, Packet{}, "certainty"},
		{"nine items", `{"role":"masked-review","status":"update","items":` + items(9) + `}`, Packet{}, "9 items"},
		{"duplicate", `{"role":"masked-review","status":"update","items":[{"kind":"unknown","certainty":"likely","content":"a"},{"kind":"unknown","certainty":"certain","content":" a "}]}`, Packet{}, "repeats"},
		{"empty content", `{"role":"masked-review","status":"update","items":[{"kind":"unknown","certainty":"likely","content":"  \n"}]}`, Packet{}, "empty content"},
		{"content not string", `{"role":"masked-review","status":"update","items":[{"kind":"unknown","certainty":"likely","content":5}]}`, Packet{}, "not a string"},
		{"missing content", `{"role":"masked-review","status":"update","items":[{"kind":"unknown","certainty":"likely"}]}`, Packet{}, "content missing"},
		{"update without items", `{"role":"masked-review","status":"update"}`, Packet{}, "without an items array"},
		{"update with empty items", `{"role":"masked-review","status":"update","items":[]}`, Packet{}, "no items"},
		{"no_update with items", `{"role":"masked-review","status":"no_update","items":` + items(1) + `}`, Packet{}, "no_update with items"},
		{"no_update null items", `{"role":"masked-review","status":"no_update","items":null}`, Packet{}, "no_update with items"},
		{"unknown key", `{"role":"masked-review","status":"no_update","confidence":0.9}`, Packet{}, `unknown key "confidence"`},
		{"unknown item key", `{"role":"masked-review","status":"update","items":[{"kind":"unknown","certainty":"likely","content":"a","why":"b"}]}`, Packet{}, `unknown key "why"`},
		{"repeated key", `{"role":"masked-review","status":"update","status":"no_update"}`, Packet{}, `repeats key "status"`},
		{"wrong role", `{"role":"reviewer","status":"no_update"}`, Packet{}, "role"},
		{"missing role", `{"status":"no_update"}`, Packet{}, "role missing"},
		{"bad status", `{"role":"masked-review","status":"maybe"}`, Packet{}, "status"},
		{"not json", `the draft looks fine to me`, Packet{}, "not json"},
		{"prose around json", "Here it is: " + update, Packet{}, "not json"},
		{"array", `[` + update + `]`, Packet{}, "not a json object"},
		{"other fence", "```python\n" + update + "\n```", Packet{}, "fence"},
		{"unclosed fence", "```json\n" + update, Packet{}, "unclosed"},
		{"over total chars", `{"role":"masked-review","status":"update","items":[{"kind":"unknown","certainty":"likely","content":"` +
			strings.Repeat("é", 2001) + `"},{"kind":"assumption","certainty":"likely","content":"` + strings.Repeat("é", 2000) + `"}]}`, Packet{}, "4000 characters"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := parsePacket(completion(tc.content))
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want one containing %q", err, tc.wantErr)
				}
				if !errors.Is(err, errInvalidPacket) {
					t.Errorf("err %v does not wrap ErrInvalidPacket", err)
				}
				return
			}
			if err != nil {
				t.Fatalf("err = %v", err)
			}
			if tc.want.Role != "" && !reflect.DeepEqual(got, tc.want) {
				t.Errorf("got %+v\nwant %+v", got, tc.want)
			}
		})
	}
}

func TestParsePacketExactBound(t *testing.T) {
	c := `{"role":"masked-review","status":"update","items":[{"kind":"unknown","certainty":"likely","content":"` +
		strings.Repeat("é", 2000) + `"},{"kind":"assumption","certainty":"likely","content":"` + strings.Repeat("é", 2000) + `"}]}`
	if _, err := parsePacket(completion(c)); err != nil {
		t.Fatalf("4000 characters exactly: %v", err)
	}
}

func TestParsePacketResponse(t *testing.T) {
	for _, tc := range []struct {
		name, body, wantErr string
	}{
		{"not json", `{"choices":`, "not json"},
		{"error body", `{"error":{"message":"Insufficient Balance"}}`, "is an error"},
		{"no choices", `{"choices":[]}`, "no choice"},
		{"cut", `{"choices":[{"message":{"content":"{\"role\""},"finish_reason":"length"}]}`, "cut"},
		{"null content", `{"choices":[{"message":{"content":null,"tool_calls":[]},"finish_reason":"tool_calls"}]}`, "not a string"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := parsePacket([]byte(tc.body))
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("err = %v, want %q", err, tc.wantErr)
			}
		})
	}
}

// TestParsePacketErrorHidesText: the error of an answer that is an error
// object does not carry its text, which the hook logs: an upstream may
// repeat the key it was sent.
func TestParsePacketErrorHidesText(t *testing.T) {
	_, err := parsePacket([]byte(`{"error":{"message":"Incorrect API key provided: sk-proj-REVIEWECHOSECRET0123","code":"invalid_api_key"}}`))
	if err == nil || strings.Contains(err.Error(), "SECRET") || strings.Contains(err.Error(), "Incorrect") {
		t.Fatalf("err = %v, want one without the answer's text", err)
	}
}
