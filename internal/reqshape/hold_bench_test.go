package reqshape

import (
	"testing"

	"github.com/shaperproxy/shaperproxy/conv"
	"github.com/shaperproxy/shaperproxy/internal/bigbuf"
	"github.com/shaperproxy/shaperproxy/internal/profile"
)

// BenchmarkSeedHold is the shaper's step in a proxy's hold on the seed's
// request re-sent (the cost section's large request): each request read
// into a fresh body, parsed by a Reparser against the one before, shaped
// by the hook's own step (shapeRequest, timed alone), its view made and
// its booking done after, its bodies given back two requests later, as
// the proxy does. "default" is the default configuration, "off" shaping
// turned off. "warm" sends the requests back to back; "cold" evicts the
// caches before each (a write over 96 MiB), as the cost section's paced
// requests find them: what the hold's step reads there (its
// shaperproxy_request_hold_step_seconds) is the cold figure.
func BenchmarkSeedHold(b *testing.B) {
	for _, c := range []struct {
		name    string
		enabled bool
	}{{"default", true}, {"off", false}} {
		for _, cold := range []bool{false, true} {
			b.Run(c.name+"/"+map[bool]string{false: "warm", true: "cold"}[cold], func(b *testing.B) {
				cfg := DefaultConfig()
				cfg.Enabled = c.enabled
				benchHold(b, cfg, cold)
			})
		}
	}
}

// evicted is written over to evict the caches (BenchmarkSeedHold's cold).
var evicted []byte

func benchHold(b *testing.B, cfg Config, cold bool) {
	seed := seedCase()
	rp := conv.NewReparser(32 << 20)
	s := NewShaper(cfg, Options{Profiles: profile.NewTable(nil, map[string]string{"ds": "https://api.deepseek.com"})})
	if cold && evicted == nil {
		evicted = make([]byte, 96<<20)
	}
	type sent struct {
		body, out []byte
		edited    *conv.Request
	}
	var held []sent
	one := func(timed bool) {
		body := bigbuf.Make(len(seed))
		copy(body, seed)
		var keys conv.BodyKeys
		keys.Add(body, len(body))
		v, settle, err := rp.ParseKeyedLater(body, keys)
		if err != nil {
			b.Fatal(err)
		}
		if timed {
			if cold {
				for i := 0; i < len(evicted); i += 64 {
					evicted[i]++
				}
			}
			b.StartTimer()
		}
		res, bk := s.shapeRequest(request{view: v, route: "ds", model: "deepseek-v4-flash", conversation: "c"})
		if timed {
			b.StopTimer()
		}
		if settle != nil {
			settle()
		}
		var edited *conv.Request
		if res.Applied != nil {
			edited, _ = res.Applied.View()
		}
		if bk != nil {
			s.book(*bk)
		}
		if cfg.Enabled != (res.Shaped > 0) {
			b.Fatalf("shaping on: %v, blocks shaped: %d", cfg.Enabled, res.Shaped)
		}
		held = append(held, sent{body, res.Body, edited})
		if len(held) > 2 { // the proxy keeps a few calls' bodies while the next come
			h := held[0]
			held = held[1:]
			if h.edited != nil {
				h.edited.Recycle()
			}
			if &h.out[0] != &h.body[0] {
				bigbuf.Release(h.out)
			}
			bigbuf.Release(h.body)
		}
	}
	for range 5 {
		one(false)
	}
	b.ResetTimer()
	b.StopTimer()
	for range b.N {
		one(true)
	}
}
