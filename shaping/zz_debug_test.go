package shaping

import (
	"fmt"
	"os"
	"testing"
)

func TestZZDebug(t *testing.T) {
	b, _ := os.ReadFile(os.Getenv("F"))
	text := string(b)
	units := split(text, nil)
	classifyAll(text, units)
	setSeps(text, units)
	score(units, 240)
	for i, u := range units {
		fmt.Printf("%3d %-9v cue=%d info=%v score=%5d line=%d %q\n", i, u.kind, u.cue, u.info, u.score, u.line, text[u.start:u.end])
	}
}
