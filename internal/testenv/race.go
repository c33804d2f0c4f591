//go:build race

package testenv

// Race reports whether the race detector is on: its sync.Pool drops items
// at random, so allocation counts and sizes mean nothing under it.
const Race = true
