package fakeupstream

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"unicode/utf8"
)

func TestAppendString(t *testing.T) {
	tests := []struct{ in, want string }{
		{"", `""`},
		{`a"b\c`, `"a\"b\\c"`},
		{"line\nfeed\r\ttab", `"line\nfeed\r\ttab"`},
		{"\x00\x1f", `"\u0000\u001f"`},
		{"<b>&", `"<b>&"`},
		{"héllo 🎉", `"héllo 🎉"`},
		{"bad\xffbyte", `"bad\ufffdbyte"`},
	}
	for _, tt := range tests {
		if got := string(appendString(nil, tt.in)); got != tt.want {
			t.Errorf("appendString(%q) = %s, want %s", tt.in, got, tt.want)
		}
	}
}

func FuzzAppendString(f *testing.F) {
	for _, s := range []string{"", "plain", "q\"uo\\te", "\n\x00\x7f", "日本🎉", "\xff\xfe", "\u2028"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		b := appendString(nil, s)
		var got string
		if err := json.Unmarshal(b, &got); err != nil {
			t.Fatalf("%q encodes to invalid JSON %s: %v", s, b, err)
		}
		// encoding/json also turns each invalid byte into U+FFFD.
		std, _ := json.Marshal(s)
		var want string
		if err := json.Unmarshal(std, &want); err != nil {
			t.Fatal(err)
		}
		if got != want {
			t.Fatalf("%q decodes to %q, want %q", s, got, want)
		}
	})
}

func TestPieces(t *testing.T) {
	tests := []struct {
		s    string
		n    int
		want []string
	}{
		{"", 8, nil},
		{"abc", 8, []string{"abc"}},
		{"abcdefgh", 4, []string{"abcd", "efgh"}},
		{"aé日🎉", 1, []string{"a", "é", "日", "🎉"}},
		{"aé日🎉x", 2, []string{"aé", "日🎉", "x"}},
		{"a\xffb", 2, []string{"a\xff", "b"}},
	}
	for _, tt := range tests {
		if got := pieces(tt.s, tt.n); !reflect.DeepEqual(got, tt.want) {
			t.Errorf("pieces(%q, %d) = %q, want %q", tt.s, tt.n, got, tt.want)
		}
	}
}

func FuzzPieces(f *testing.F) {
	f.Add("héllo wörld 🎉", 3)
	f.Fuzz(func(t *testing.T, s string, n int) {
		if n <= 0 || n > 64 {
			return
		}
		ps := pieces(s, n)
		if strings.Join(ps, "") != s {
			t.Fatalf("pieces of %q do not rejoin", s)
		}
		for _, p := range ps {
			if p == "" || utf8.ValidString(s) && (!utf8.ValidString(p) || utf8.RuneCountInString(p) > n) {
				t.Fatalf("bad piece %q of %q", p, s)
			}
		}
	})
}
