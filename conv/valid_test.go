package conv

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/shaperproxy/shaperproxy/fixtures"
	"github.com/shaperproxy/shaperproxy/internal/testenv"
	"github.com/tidwall/gjson"
)

// validCases are inputs on which ValidJSON must agree with json.Valid.
var validCases = []string{
	``, ` `, `0`, `-0`, `01`, `-`, `1.`, `.5`, `1.5e`, `1e+`, `1E-7`, `-12.5e+30`, `2 3`,
	`"`, `""`, `"a\"b"`, `"\u00e9"`, `"\u00g9"`, `"\x"`, "\"\x01\"", "\"\t\"", `"\/\b\f\n\r\t"`, "\"\xff\"",
	`true`, `tru`, `truex`, `false`, `null`, `nul`, `nan`, ` null `,
	`[]`, `[ ]`, `[1,]`, `[,1]`, `[1 2]`, `[1,[2,[3]]]`, `[`, `]`, `[}`, `{]`,
	`{}`, `{ }`, `{"a":1}`, `{"a" : [ true , null ] }`, `{"a":1,}`, `{,}`, `{"a"}`, `{"a":}`, `{1:2}`, `{"a":1 "b":2}`,
	`{"a":{"b":{"c":[{}]}}}`, "\n{\r\n\t\"k\": \"v\"\n}\n", `{"a":1}}`, `[[]]]`, `{"a":"b"`,
}

func TestValidJSONAgreesWithEncodingJSON(t *testing.T) {
	for _, c := range validCases {
		if got, want := ValidJSON([]byte(c)), json.Valid([]byte(c)); got != want {
			t.Errorf("ValidJSON(%q) = %v, json.Valid says %v", c, got, want)
		}
		if ValidJSONString(c) != ValidJSON([]byte(c)) {
			t.Errorf("ValidJSONString(%q) disagrees with ValidJSON", c)
		}
	}
}

// TestValidJSONDepth: MaxDepth levels are valid, one more is not (as for
// encoding/json), and millions of levels are rejected without recursing.
func TestValidJSONDepth(t *testing.T) {
	nest := func(n int) string { return strings.Repeat(`[{"a":`, n/2) + `1` + strings.Repeat(`}]`, n/2) }
	for _, n := range []int{MaxDepth, MaxDepth + 2} {
		doc := nest(n)
		if got, want := ValidJSON([]byte(doc)), json.Valid([]byte(doc)); got != want || got != (n <= MaxDepth) {
			t.Errorf("depth %d: ValidJSON %v, json.Valid %v", n, got, want)
		}
	}
	testenv.WithStack(t, 1<<20, func() {
		if ValidJSON([]byte(deepBody(6_000_000))) {
			t.Error("six million '[' accepted")
		}
	})
}

// FuzzValidJSON compares ValidJSON with encoding/json's json.Valid.
func FuzzValidJSON(f *testing.F) {
	for _, c := range validCases {
		f.Add([]byte(c))
	}
	f.Add([]byte(strings.Repeat("[", MaxDepth) + strings.Repeat("]", MaxDepth)))
	f.Add([]byte(strings.Repeat("[", MaxDepth+1) + strings.Repeat("]", MaxDepth+1)))
	f.Fuzz(func(t *testing.T, data []byte) {
		if got, want := ValidJSON(data), json.Valid(data); got != want {
			t.Fatalf("ValidJSON(%q) = %v, json.Valid says %v", data, got, want)
		}
	})
}

// BenchmarkValidJSON validates the seed's 938 KB request: ValidJSON,
// gjson's recursive validator and encoding/json's.
func BenchmarkValidJSON(b *testing.B) {
	body := fixtures.SeedHistory()
	for _, v := range []struct {
		name string
		fn   func([]byte) bool
	}{{"conv", ValidJSON}, {"gjson", gjson.ValidBytes}, {"encoding_json", json.Valid}} {
		b.Run(v.name, func(b *testing.B) {
			b.SetBytes(int64(len(body)))
			for b.Loop() {
				if !v.fn(body) {
					b.Fatal("invalid")
				}
			}
		})
	}
}
