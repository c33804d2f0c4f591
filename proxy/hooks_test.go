package proxy

import "testing"

// TestKeys: each key holds its own value on each call (two keys of the
// same type apart), a second Set replaces, a key never set gives the zero
// value, and more keys than the call has room for inline still work.
func TestKeys(t *testing.T) {
	a, b := NewKey[int](), NewKey[int]()
	s := NewKey[string]()
	extra := []*Key[bool]{NewKey[bool](), NewKey[bool](), NewKey[bool]()}
	c1, c2 := &Call{}, &Call{}
	if v, ok := a.Get(c1); ok || v != 0 {
		t.Fatalf("unset key: %v %v", v, ok)
	}
	a.Set(c1, 1)
	b.Set(c1, 2)
	a.Set(c2, 10)
	a.Set(c1, 3)
	s.Set(c1, "x")
	for _, k := range extra {
		k.Set(c1, true)
	}
	for _, tc := range []struct{ got, want int }{{get(a, c1), 3}, {get(b, c1), 2}, {get(a, c2), 10}, {get(b, c2), 0}} {
		if tc.got != tc.want {
			t.Errorf("got %d, want %d", tc.got, tc.want)
		}
	}
	if v, _ := s.Get(c1); v != "x" {
		t.Errorf("string key: %q", v)
	}
	for i, k := range extra {
		if v, ok := k.Get(c1); !v || !ok {
			t.Errorf("extra key %d: %v %v", i, v, ok)
		}
	}
}

func get(k *Key[int], c *Call) int { v, _ := k.Get(c); return v }
