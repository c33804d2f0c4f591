package fakeupstream

import (
	"reflect"
	"strings"
	"testing"
	"unicode/utf8"
)

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
