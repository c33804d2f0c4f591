package originals

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// The SIGKILL test re-runs this test binary as a child that writes until it
// is killed; TestMain sends the child to crashChild.
const (
	crashPathEnv  = "ORIGINALS_CRASH_CHILD_PATH"
	crashRoundEnv = "ORIGINALS_CRASH_CHILD_ROUND"
)

func TestMain(m *testing.M) {
	if path := os.Getenv(crashPathEnv); path != "" {
		round, _ := strconv.Atoi(os.Getenv(crashRoundEnv))
		crashChild(path, round)
		os.Exit(3) // crashChild only returns on error
	}
	os.Exit(m.Run())
}

func crashShaped(round, i int) string { return fmt.Sprintf("acked r%d #%d", round, i) }

func crashOriginal(round, i int) string { return text(uint64(round*1_000_000+i), 1000+i%4000) }

// crashChild writes to the table at path until it is killed: synchronous
// Puts it acknowledges on stdout after they return, turn churn through a
// Writer in another conversation, and a compaction now and then.
func crashChild(path string, round int) {
	s, err := Open(path, Options{})
	if err != nil {
		fmt.Fprintln(os.Stderr, "child:", err)
		return
	}
	w := s.Async(64)
	for i := 0; ; i++ {
		e := entry("acked", 0, crashShaped(round, i), crashOriginal(round, i))
		if err := s.Put([]Entry{e}); err != nil {
			fmt.Fprintln(os.Stderr, "child:", err)
			return
		}
		fmt.Fprintf(os.Stdout, "%d\n", i) // unbuffered: in the pipe before the next write starts
		w.BeginTurn("churn", i/10)
		w.Put([]Entry{entry("churn", i/10, fmt.Sprintf("churn %d", i), text(uint64(i), 6000))})
		if i%40 == 39 {
			if err := s.Compact(); err != nil {
				fmt.Fprintln(os.Stderr, "child:", err)
				return
			}
		}
	}
}

// runCrashRound starts a child on path, kills it with SIGKILL after it has
// acknowledged some Puts, and returns the acknowledged indexes.
func runCrashRound(t *testing.T, path string, round int, wait time.Duration) []int {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), crashPathEnv+"="+path, crashRoundEnv+"="+strconv.Itoa(round))
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	acks := make(chan int, 1<<16)
	go func() {
		defer close(acks)
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if n, err := strconv.Atoi(sc.Text()); err == nil {
				acks <- n
			}
		}
	}()
	var acked []int
	timeout := time.After(30 * time.Second)
	for len(acked) < 20 { // started and writing
		select {
		case n, ok := <-acks:
			if !ok {
				t.Fatalf("child ended before it was killed: %s", stderr.String())
			}
			acked = append(acked, n)
		case <-timeout:
			t.Fatal("child acknowledged too few Puts")
		}
	}
	time.Sleep(wait)
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	for n := range acks { // the pipe holds everything written before the kill
		acked = append(acked, n)
	}
	err = cmd.Wait()
	if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); !ok || ws.Signal() != syscall.SIGKILL {
		t.Fatalf("child did not die of SIGKILL: %v; %s", err, stderr.String())
	}
	return acked
}

// TestSIGKILL kills a writing process several times and checks, after each
// kill, that the file is consistent and holds every acknowledged Put. (A
// kill leaves the page cache alone; it does not test a power cut.)
func TestSIGKILL(t *testing.T) {
	if testing.Short() {
		t.Skip("runs child processes")
	}
	path := t.TempDir() + "/" + FileName
	for round, wait := range []time.Duration{0, 37 * time.Millisecond, 150 * time.Millisecond, 420 * time.Millisecond} {
		acked := runCrashRound(t, path, round, wait)

		s, err := Open(path, Options{}) // as a restarted proxy would
		if err != nil {
			t.Fatalf("round %d: reopen after SIGKILL: %v", round, err)
		}
		if err := s.Check(); err != nil {
			t.Errorf("round %d: %v", round, err)
		}
		missing := 0
		for _, i := range acked {
			got, err := s.Lookup(crashShaped(round, i))
			if err != nil || len(got) != 1 || got[0].Original != crashOriginal(round, i) {
				missing++
			}
		}
		st := mustStats(t, s)
		s.Close()
		t.Logf("round %d: killed after %d acknowledged Puts; table %d entries, %d bytes", round, len(acked), st.Entries, st.FileSize)
		if missing > 0 {
			t.Errorf("round %d: %d of %d acknowledged Puts missing after SIGKILL", round, missing, len(acked))
		}
	}
}
