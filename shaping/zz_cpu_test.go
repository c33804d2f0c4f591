package shaping

import (
	"syscall"
	"testing"
	"time"
)

func cpuNow() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_THREAD, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func TestZZCPU(t *testing.T) {
	texts := corpus(1, seedCorpusChars, seedCorpusBlocks)
	for _, t := range texts {
		Extract(t, Options{})
	}
	const n = 5
	w := time.Now()
	c := cpuNow()
	for range n {
		for _, t := range texts {
			Extract(t, Options{})
		}
	}
	t.Logf("per corpus: cpu %v wall %v", (cpuNow()-c)/n, time.Since(w)/n)
}
