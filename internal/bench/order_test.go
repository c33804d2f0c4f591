package bench

import (
	"fmt"
	"slices"
	"testing"
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
	for name, rounds := range map[string]int{"latency": cs.rounds, "saturation": cs.satRounds, "stream": cs.streamRounds} {
		if rounds == 0 || rounds%cycle != 0 {
			t.Errorf("%s: %d rounds, not a whole number of the design's %d rows", name, rounds, cycle)
		}
	}
}
