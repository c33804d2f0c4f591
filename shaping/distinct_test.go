package shaping

import (
	"fmt"
	"strings"
	"testing"
)

// pairFamily builds adversarial pairs: two reasoning texts that share their
// decisive sentence (and usually much more) but differ elsewhere.
type pairFamily struct {
	name string
	// build returns the pair for index k.
	build func(r *rng, k int) (a, b string)
	// wantCollisions is the collision count its 100 pairs must show.
	wantCollisions int
}

// body is a generated exploration of about target runes.
func (r *rng) body(zh bool, target int) string {
	var parts []string
	n := 0
	for n < target {
		p := r.paragraph(zh)
		parts = append(parts, p)
		n += len([]rune(p))
	}
	return strings.Join(parts, "\n\n")
}

func (r *rng) task(zh bool) string {
	if zh {
		return fmt.Sprintf(r.pick(zhTask), r.pick(zhTasks))
	}
	return fmt.Sprintf(r.pick(enTask), r.pick(tasks))
}

func (r *rng) decision(zh bool) string {
	if zh {
		return r.fill(r.pick(zhDecisive))
	}
	return r.fill(r.pick(enDecisive))
}

var pairFamilies = []pairFamily{
	{
		// Same task and decision; the exploration in between differs.
		name: "exploration differs",
		build: func(r *rng, k int) (string, string) {
			zh := k%4 == 0
			task, d := r.task(zh), r.decision(zh)
			size := 300 + r.intn(1500)
			return task + "\n\n" + r.body(zh, size) + "\n\n" + d,
				task + "\n\n" + r.body(zh, size) + "\n\n" + d
		},
	},
	{
		// Same exploration and decision; the task statement differs.
		name: "task differs",
		build: func(r *rng, k int) (string, string) {
			zh := k%4 == 0
			body, d := r.body(zh, 300+r.intn(1500)), r.decision(zh)
			ta := r.task(zh)
			tb := ta
			for tb == ta {
				tb = r.task(zh)
			}
			return ta + "\n\n" + body + "\n\n" + d, tb + "\n\n" + body + "\n\n" + d
		},
	},
	{
		// Everything equal but one number in the last plain sentence before
		// the decision: the smallest difference the extract still shows,
		// because it keeps the informative plain sentences nearest the end.
		name: "one detail differs",
		build: func(r *rng, k int) (string, string) {
			zh := k%4 == 0
			task, body, d := r.task(zh), r.body(zh, 300+r.intn(1500)), r.decision(zh)
			tmpl := "The benchmark shows %d ms per request after the change."
			if zh {
				tmpl = "改完之后基准测试显示每个请求 %d 毫秒。"
			}
			n := 10 + r.intn(500)
			return task + "\n\n" + body + "\n\n" + fmt.Sprintf(tmpl, n) + "\n\n" + d,
				task + "\n\n" + body + "\n\n" + fmt.Sprintf(tmpl, n+1) + "\n\n" + d
		},
	},
	{
		// Everything equal but the expectation written after the decision.
		name: "finding after the decision",
		build: func(r *rng, k int) (string, string) {
			zh := k%4 == 0
			task, body, d := r.task(zh), r.body(zh, 300+r.intn(1500)), r.decision(zh)
			tmpl := "That should bring p99 latency down to about %d ms."
			if zh {
				tmpl = "这样 p99 延迟应该能降到 %d 毫秒左右。"
			}
			n := 10 + r.intn(500)
			return task + "\n\n" + body + "\n\n" + d + " " + fmt.Sprintf(tmpl, n),
				task + "\n\n" + body + "\n\n" + d + " " + fmt.Sprintf(tmpl, n+7)
		},
	},
	{
		// Long texts whose difference is an early plain sentence the budget
		// cannot reach.
		name: "early detail in a long text",
		build: func(r *rng, k int) (string, string) {
			zh := k%4 == 0
			task, body, d := r.task(zh), r.body(zh, 1500), r.decision(zh)
			return task + " " + r.fill(r.pick(enPlain)) + "\n\n" + body + "\n\n" + d,
				task + " " + r.fill(r.pick(enPlain)) + "\n\n" + body + "\n\n" + d
		},
		wantCollisions: 100, // invisible to any extract of this budget
	},
	{
		// Only the filler differs. Shaping drops filler, so these collide
		// by design: a side table keyed by the shaped text must allow it.
		name: "only filler differs",
		build: func(r *rng, k int) (string, string) {
			zh := k%4 == 0
			task, body, d := r.task(zh), r.body(zh, 300+r.intn(1500)), r.decision(zh)
			fa, fb := "Hmm, wait.", "Hmm, let me think."
			if zh {
				fa, fb = "嗯，等等。", "让我想想。"
			}
			return task + "\n\n" + fa + " " + body + "\n\n" + d, task + "\n\n" + fb + " " + body + "\n\n" + d
		},
		wantCollisions: 100,
	},
}

// TestDistinctness shapes 100 adversarial pairs per family: two texts with
// the same decisive sentence that differ elsewhere. The first four families
// (400 pairs: exploration, task, one detail before or after the decision)
// must not collide. The last two show what no extract can keep apart and
// must collide on every pair: a difference early in a long text, beyond the
// budget, and a difference in filler only (filler is dropped).
func TestDistinctness(t *testing.T) {
	o := Options{}
	for fi, fam := range pairFamilies {
		r := rng(1000 + fi)
		var texts []string
		for k := range 100 {
			a, b := fam.build(&r, k)
			if a == b {
				t.Fatalf("%s: pair %d is not a pair of different texts", fam.name, k)
			}
			if da, db := decisiveOf(a), decisiveOf(b); da != db {
				t.Fatalf("%s: pair %d differs in its decisive sentences:\n%q\n%q", fam.name, k, da, db)
			}
			texts = append(texts, a, b)
		}
		in, out, fan := Collisions(texts, o)
		t.Logf("%-28s inputs %d outputs %d collisions %d max fanout %d", fam.name, in, out, in-out, fan)
		if in-out != fam.wantCollisions {
			t.Errorf("%s: %d collisions, want %d", fam.name, in-out, fam.wantCollisions)
		}
	}
}

// decisiveOf returns the last decisive unit of text.
func decisiveOf(text string) string {
	last := ""
	for _, s := range Sentences(text) {
		if s.Kind == KindDecisive {
			last = s.Text
		}
	}
	return last
}

func TestCollisionsCounts(t *testing.T) {
	in, out, fan := Collisions(nil, Options{})
	if in != 0 || out != 0 || fan != 0 {
		t.Errorf("empty: %d %d %d", in, out, fan)
	}
	x := strings.Repeat("Plain filler words here. ", 20)
	texts := []string{"a", "a", "b", "Hmm. " + x + "So I'll do it.", "Wait. " + x + "So I'll do it."}
	in, out, fan = Collisions(texts, Options{})
	if in != 4 || out != 3 || fan != 2 {
		t.Errorf("Collisions = %d %d %d, want 4 3 2", in, out, fan)
	}
}
