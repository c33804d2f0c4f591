package bench

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tidwall/gjson"
)

// TestWilliams: over the rows of the design, each row a permutation,
// every target runs at each place equally often and right after every
// other target equally often (the first-order carry-over balanced), for
// an even and an odd number of targets (the cost section has five).
func TestWilliams(t *testing.T) {
	for n := 2; n <= 7; n++ {
		rows := williams(n)
		if want := n + n%2*n; len(rows) != want {
			t.Fatalf("n=%d: %d rows, want %d", n, len(rows), want)
		}
		place := map[[2]int]int{} // target, place
		after := map[[2]int]int{} // target, the one before it
		for _, row := range rows {
			if s := slices.Sorted(slices.Values(row)); !slices.Equal(s, seq(n)) {
				t.Fatalf("n=%d: row %v is no permutation", n, row)
			}
			for j, v := range row {
				place[[2]int{v, j}]++
				if j > 0 {
					after[[2]int{v, row[j-1]}]++
				}
			}
		}
		for a := range n {
			for b := range n {
				if got, want := place[[2]int{a, b}], len(rows)/n; got != want {
					t.Errorf("n=%d: target %d at place %d %d times, want %d", n, a, b, got, want)
				}
				if a == b {
					continue
				}
				if got, want := after[[2]int{a, b}], len(rows)/n; got != want {
					t.Errorf("n=%d: target %d right after %d %d times, want %d", n, a, b, got, want)
				}
			}
		}
	}
}

func seq(n int) []int {
	out := make([]int, n)
	for i := range out {
		out[i] = i
	}
	return out
}

// TestInOrder: each round runs every target once, and round r takes row
// r of the design (mod its rows).
func TestInOrder(t *testing.T) {
	var targets []costTarget
	for i := range 5 {
		targets = append(targets, costTarget{name: fmt.Sprint(i)})
	}
	rows := williams(5)
	for r := range 2 * len(rows) {
		got := inOrder(targets, r)
		for j, tg := range got {
			if want := fmt.Sprint(rows[r%len(rows)][j]); tg.name != want {
				t.Fatalf("round %d place %d: target %s, want %s", r, j, tg.name, want)
			}
		}
	}
}

// TestFullSizesWholeCycles: the full run's latency, saturation and
// stream rounds are each a whole number of cycles of the design's rows
// for the cost section's five targets, so that over each measure every
// target runs at each place, and right after every other, equally often
// (a part cycle, such as the 9 saturation and 8 stream rounds before
// session BM, does not balance them).
func TestFullSizesWholeCycles(t *testing.T) {
	cycle := len(williams(5))
	cs := pickCost(false)
	// The seed's latency runs in turns (turnLatencies): each of its rounds
	// is largeN turns, each turn a row of the design.
	for name, rounds := range map[string]int{"the seed's latency": cs.largeRounds, "the small request's latency": cs.smallRounds, "saturation": cs.satRounds, "stream": cs.streamRounds, "the seed's turns a round": cs.largeN} {
		if rounds == 0 || rounds%cycle != 0 {
			t.Errorf("%s: %d rounds, not a whole number of the design's %d rows", name, rounds, cycle)
		}
	}
	// Each of a target's processes serves as many latency rounds as the others.
	for name, rounds := range map[string]int{"the seed's latency": cs.largeRounds, "the small request's latency": cs.smallRounds} {
		if cs.draws < 2 || rounds%cs.draws != 0 {
			t.Errorf("%s: %d rounds over %d processes a target, not as many each", name, rounds, cs.draws)
		}
	}
}

// TestTurnLatencies: the seed's latency runs in turns, each turn one
// request to every target, and a round is n turns; each target's
// latencies come back by round. Each turn's request carries a body of its
// own, so the test reads which turn each request was sent in whatever the
// order they arrive in: every target gets every turn's body once. It fails
// when a target's requests go in blocks (blockLatencies sends a round's
// bodies again in the next round). A target that answers none of a
// round's requests stops the section before its last round.
func TestTurnLatencies(t *testing.T) {
	var mu sync.Mutex
	got := map[string][]int{} // target → the turns of the bodies it was sent
	target := func(name string, fail bool) costTarget {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			b, _ := io.ReadAll(r.Body)
			mu.Lock()
			got[name] = append(got[name], int(gjson.GetBytes(b, "turn").Int()))
			mu.Unlock()
			if fail {
				http.Error(w, "down", http.StatusBadGateway)
				return
			}
			io.WriteString(w, `{"ok":true}`)
		}))
		t.Cleanup(srv.Close)
		return costTarget{name: name, url: srv.URL}
	}
	turnBodies := func(k int) [][]byte {
		var bs [][]byte
		for i := range k {
			bs = append(bs, []byte(fmt.Sprintf(`{"turn":%d}`, i)))
		}
		return bs
	}
	targets := []costTarget{target("0", false), target("1", false), target("2", false)}
	ctx := context.Background()
	const n, rounds, rate = 4, 2, 50
	fs, check := tallies(targets)
	lats, err := turnLatencies(ctx, &http.Client{}, targets, turnBodies(n*rounds), n, rate, rounds, fs)
	if err != nil {
		t.Fatal(err)
	}
	if err := check(); err != nil {
		t.Fatal(err)
	}
	for _, tg := range targets {
		if len(lats[tg.name]) != rounds {
			t.Fatalf("target %s: %d rounds of latencies, want %d", tg.name, len(lats[tg.name]), rounds)
		}
		for r, lat := range lats[tg.name] {
			if len(lat) != n {
				t.Fatalf("target %s round %d: %d latencies, want %d", tg.name, r, len(lat), n)
			}
		}
		turns := slices.Sorted(slices.Values(got[tg.name]))
		for i, turn := range turns {
			if turn != i {
				t.Fatalf("target %s was sent the bodies of turns %v, want each of 0–%d once", tg.name, turns, n*rounds-1)
			}
		}
	}

	const many = 10
	dead := []costTarget{target("up", false), target("down", true)}
	fs, _ = tallies(dead)
	_, err = turnLatencies(ctx, &http.Client{}, dead, turnBodies(1), 2, rate, many, fs)
	if err == nil || !strings.Contains(err.Error(), "down: all 2 requests of a round failed") {
		t.Fatalf("a target that answered no request of a round: err = %v", err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(got["down"]) >= 2*many {
		t.Fatalf("the target that answered none was sent all %d requests: the section did not stop", len(got["down"]))
	}
}

// TestDrawsShareLatencies: a target served by several processes
// (costTarget.draws) has its latency rounds shared by them in turn, in
// turns (the seed's) and in blocks (the small request's): round r goes
// whole to the process r mod len(draws), so a target's median is not one
// process's and each process is sent the round's whole rate. A target
// without draws is sent every round at its url, and a target's first()
// has no draws.
func TestDrawsShareLatencies(t *testing.T) {
	var mu sync.Mutex
	got := map[string][]int{} // server → the turns of the bodies it was sent
	serve := func(name string) string {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			b, _ := io.ReadAll(r.Body)
			mu.Lock()
			got[name] = append(got[name], int(gjson.GetBytes(b, "turn").Int()))
			mu.Unlock()
			io.WriteString(w, `{"ok":true}`)
		}))
		t.Cleanup(srv.Close)
		return srv.URL
	}
	bodies := func(k int) [][]byte {
		var bs [][]byte
		for i := range k {
			bs = append(bs, []byte(fmt.Sprintf(`{"turn":%d}`, i)))
		}
		return bs
	}
	shared := costTarget{name: "shared", url: serve("a")}
	shared.draws = []string{shared.url, serve("b"), serve("c")}
	alone := costTarget{name: "alone", url: serve("alone")}
	targets := []costTarget{shared, alone}
	ctx := context.Background()
	const n, rounds, rate = 2, 6, 200
	fs, check := tallies(targets)
	if _, err := turnLatencies(ctx, &http.Client{}, targets, bodies(n*rounds), n, rate, rounds, fs); err != nil {
		t.Fatal(err)
	}
	if err := check(); err != nil {
		t.Fatal(err)
	}
	for j, name := range []string{"a", "b", "c"} { // rounds j and j+3, two turns each
		want := []int{n * j, n*j + 1, n * (j + 3), n*(j+3) + 1}
		if turns := slices.Sorted(slices.Values(got[name])); !slices.Equal(turns, want) {
			t.Fatalf("in turns, process %s was sent turns %v, want %v", name, turns, want)
		}
	}
	if len(got["alone"]) != n*rounds {
		t.Fatalf("in turns, the target without draws was sent %d requests, want %d", len(got["alone"]), n*rounds)
	}

	clear(got)
	if _, err := blockLatencies(ctx, &http.Client{}, targets, bodies(n), n, rate, rounds, fs); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"a", "b", "c"} { // two rounds of n each
		if len(got[name]) != 2*n {
			t.Fatalf("in blocks, process %s was sent %d requests, want %d", name, len(got[name]), 2*n)
		}
	}
	if len(got["alone"]) != n*rounds {
		t.Fatalf("in blocks, the target without draws was sent %d requests, want %d", len(got["alone"]), n*rounds)
	}
	if f := shared.first(); f.drawURL(1) != shared.url || len(f.drawURLs()) != 1 {
		t.Fatalf("first(): draws %v", f.drawURLs())
	}
}

// TestWarmupSend: a warm-up reaches every process of every target n
// times, at its rate, the first process of every target before any
// target's second (no target's processes wait longer for their rounds
// after it than another's), a target without draws on its url; a target
// that answers none of its warm-up stops it.
func TestWarmupSend(t *testing.T) {
	var mu sync.Mutex
	type hit struct {
		proc string
		at   time.Time
	}
	var hits []hit
	server := func(name string, fail bool) string {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			_, _ = io.Copy(io.Discard, r.Body)
			mu.Lock()
			hits = append(hits, hit{name, time.Now()})
			mu.Unlock()
			if fail {
				http.Error(w, "down", http.StatusBadGateway)
			}
		}))
		t.Cleanup(srv.Close)
		return srv.URL
	}
	target := func(name string, procs int) costTarget {
		tg := costTarget{name: name}
		for i := range procs {
			tg.draws = append(tg.draws, server(fmt.Sprintf("%s %d", name, i), false))
		}
		tg.url = tg.draws[0]
		return tg
	}
	direct := costTarget{name: "direct", url: server("direct 0", false)}
	targets := []costTarget{direct, target("a", 3), target("b", 3), target("c", 2)}
	wu := warmup{bodies: [][]byte{[]byte(`{}`)}, n: 5, rate: 100}
	c := &http.Client{}
	if err := wu.send(context.Background(), c, targets); err != nil {
		t.Fatal(err)
	}
	count := map[string]int{}
	first, last := map[string]time.Time{}, map[string]time.Time{}
	for _, h := range hits {
		count[h.proc]++
		if _, ok := first[h.proc]; !ok {
			first[h.proc] = h.at
		}
		last[h.proc] = h.at
	}
	procs := []string{"direct 0", "a 0", "a 1", "a 2", "b 0", "b 1", "b 2", "c 0", "c 1"}
	if len(count) != len(procs) {
		t.Fatalf("warmed %v, want each of %v", count, procs)
	}
	for _, p := range procs {
		if count[p] != wu.n {
			t.Errorf("%s sent %d, want %d", p, count[p], wu.n)
		}
		if span, want := last[p].Sub(first[p]), time.Duration(wu.n-1)*time.Second/time.Duration(wu.rate); span < want*8/10 {
			t.Errorf("%s: its %d requests over %v, not at %d/s (%v)", p, wu.n, span, wu.rate, want)
		}
	}
	for i := 0; i < 2; i++ { // every target's process i before any target's i+1
		for _, a := range procs {
			for _, b := range procs {
				if a[len(a)-1]-'0' == byte(i) && b[len(b)-1]-'0' == byte(i+1) && !last[a].Before(first[b]) {
					t.Errorf("%s warmed up to %v, after %s began at %v", a, last[a], b, first[b])
				}
			}
		}
	}
	down := costTarget{name: "down", url: server("down 0", true)}
	if err := wu.send(context.Background(), c, []costTarget{direct, down}); err == nil || !strings.Contains(err.Error(), "warm-up down") {
		t.Fatalf("a target that answers none of its warm-up: %v", err)
	}
}
