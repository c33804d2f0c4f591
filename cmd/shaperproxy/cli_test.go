package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/shaperproxy/shaperproxy/capture"
)

// TestMain lets a test run this package's main as the real program: the
// test binary re-executes itself with SHAPERPROXY_TEST_MAIN=1.
func TestMain(m *testing.M) {
	if os.Getenv("SHAPERPROXY_TEST_MAIN") == "1" {
		main()
		return
	}
	os.Exit(m.Run())
}

// runMain runs the program with args as a process and returns its exit
// status, stdout and stderr.
func runMain(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	cmd := exec.Command(os.Args[0], args...)
	cmd.Env = append(os.Environ(), "SHAPERPROXY_TEST_MAIN=1", "SHAPERPROXY_DATA_DIR="+t.TempDir())
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	var ee *exec.ExitError
	switch {
	case err == nil:
		return 0, out.String(), errb.String()
	case errors.As(err, &ee):
		return ee.ExitCode(), out.String(), errb.String()
	}
	t.Fatalf("%v: %v", args, err)
	return 0, "", ""
}

// TestExitCodes runs the program as a process: help on stdout with 0,
// usage errors printed once with 2, other errors with 1.
func TestExitCodes(t *testing.T) {
	capDir := filepath.Dir(captureFixture(t))
	origDir := originalsFixture(t)
	tests := []struct {
		args      []string
		code      int
		stdout    string // in stdout ("" : stdout must be empty)
		stderr    string // in stderr, exactly once ("" : stderr must be empty)
		anyStdout bool
	}{
		{args: nil, code: 0, stdout: "usage: shaperproxy COMMAND"},
		{args: []string{"help"}, code: 0, stdout: "usage: shaperproxy COMMAND"},
		{args: []string{"--help"}, code: 0, stdout: "usage: shaperproxy COMMAND"},
		{args: []string{"help", "capture"}, code: 0, stdout: "usage: shaperproxy capture COMMAND"},
		{args: []string{"help", "capture", "tail"}, code: 0, stdout: "-kind kinds"},
		{args: []string{"capture", "tail", "--help"}, code: 0, stdout: "-kind kinds"},
		{args: []string{"capture", "find", "-h"}, code: 0, stdout: "TIME is a time: a duration ago"},
		{args: []string{"originals", "lookup", "--help"}, code: 0, stdout: "prefix of at least 8"},
		{args: []string{"serve", "--help"}, code: 0, stdout: "-listen"},
		{args: []string{"help", "bench"}, code: 0, stdout: "-quick"},
		{args: []string{"ca", "--help"}, code: 0, stdout: "usage: shaperproxy ca init"},
		{args: []string{"--version"}, code: 0, stdout: "shaperproxy "},
		{args: []string{"version"}, code: 0, stdout: "shaperproxy "},
		{args: []string{"nosuch"}, code: 2, stderr: `unknown command "nosuch"`},
		{args: []string{"help", "nosuch"}, code: 2, stderr: `unknown command "nosuch"`},
		{args: []string{"capture", "tail", "--bogus"}, code: 2, stderr: "bogus"},
		{args: []string{"capture", "nosuch"}, code: 2, stderr: "nosuch"},
		{args: []string{"capture", "find", "--since", "2x", "--data-dir", capDir}, code: 2, stderr: `invalid time "2x"`},
		{args: []string{"capture", "find", "--in", "body", "--data-dir", capDir}, code: 2, stderr: "--in: want request or response"},
		{args: []string{"capture", "find", "--outcome", "bogus", "--data-dir", capDir}, code: 2, stderr: "--outcome: want one of complete"},
		{args: []string{"capture", "tail", "-n", "-5", "--data-dir", capDir}, code: 2, stderr: "-n: must not be negative"},
		{args: []string{"capture", "tail", "-n", "0", "--data-dir", capDir}, code: 0},
		{args: []string{"capture", "find", "--outcome", "retried", "--data-dir", capDir}, code: 2, stderr: "--outcome: want one of complete"},
		{args: []string{"capture", "find", "--outcome", "none", "--data-dir", capDir}, code: 0, anyStdout: true},
		{args: []string{"capture", "read", "--data-dir", capDir}, code: 2, stderr: "--from is required"},
		{args: []string{"capture", "show", "a", "b", "--data-dir", capDir}, code: 2, stderr: "one call id at most"},
		{args: []string{"originals", "lookup", "--sha256", "12", "--data-dir", origDir}, code: 2, stderr: "--sha256 wants"},
		{args: []string{"ca"}, code: 0, stdout: "usage: shaperproxy ca init"},
		{args: []string{"capture"}, code: 0, stdout: "usage: shaperproxy capture COMMAND"},
		{args: []string{"ca", "frob"}, code: 2, stderr: `unknown command "frob"`},
		{args: []string{"shape"}, code: 2, stderr: "want one CORPUS.jsonl"},
		{args: []string{"capture", "show", "nope", "--data-dir", capDir}, code: 1, stderr: "call not found"},
		{args: []string{"capture", "stats", "--data-dir", t.TempDir()}, code: 1, stderr: "no capture log"},
		{args: []string{"originals", "lookup", "nope", "--data-dir", origDir}, code: 1, stderr: "no original is recorded"},
		{args: []string{"capture", "stats", "--since", "2d", "--data-dir", capDir}, code: 0, anyStdout: true},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			code, stdout, stderr := runMain(t, tt.args...)
			if code != tt.code {
				t.Errorf("exit status %d, want %d\nstdout:\n%s\nstderr:\n%s", code, tt.code, stdout, stderr)
			}
			switch {
			case tt.anyStdout:
			case tt.stdout == "" && stdout != "":
				t.Errorf("stdout: %q, want none", stdout)
			case !strings.Contains(stdout, tt.stdout):
				t.Errorf("stdout lacks %q:\n%s", tt.stdout, stdout)
			}
			switch {
			case tt.stderr == "" && stderr != "":
				t.Errorf("stderr: %q, want none", stderr)
			case tt.stderr != "" && strings.Count(stderr, tt.stderr) != 1:
				t.Errorf("stderr has %q %d times, want once:\n%s", tt.stderr, strings.Count(stderr, tt.stderr), stderr)
			}
			if tt.code == exitUsage && !strings.Contains(stderr, "Run 'shaperproxy help") {
				t.Errorf("usage error without the help hint:\n%s", stderr)
			}
		})
	}
}

// TestEveryCommandHasHelp: COMMAND --help and help COMMAND print help on
// stdout and succeed, for every command and subcommand.
func TestEveryCommandHasHelp(t *testing.T) {
	paths := [][]string{{"capture", "tail"}, {"capture", "read"}, {"capture", "show"}, {"capture", "find"}, {"capture", "stats"},
		{"originals", "stats"}, {"originals", "list"}, {"originals", "lookup"}, {"ca", "init"}}
	for name := range commands() {
		paths = append(paths, []string{name})
	}
	for _, p := range paths {
		for _, args := range [][]string{append(append([]string{}, p...), "--help"), append([]string{"help"}, p...)} {
			var out, errb bytes.Buffer
			err := run(context.Background(), args, &out, &errb)
			if (err != nil && !errors.Is(err, flag.ErrHelp)) || out.Len() == 0 || errb.Len() != 0 {
				t.Errorf("%v: err %v, stdout %d bytes, stderr %q", args, err, out.Len(), errb.String())
			}
			if exitCode(err, &errb) != exitOK {
				t.Errorf("%v: exit status %d", args, exitCode(err, &errb))
			}
		}
	}
}

func TestExitCodeMapping(t *testing.T) {
	tests := []struct {
		err    error
		code   int
		stderr string
	}{
		{nil, 0, ""},
		{flag.ErrHelp, 0, ""},
		{usagef("capture tail", "flag provided but not defined: -x"), 2,
			"shaperproxy: capture tail: flag provided but not defined: -x\nRun 'shaperproxy help capture tail' for usage.\n"},
		{usagef("", "unknown command %q", "x"), 2, "shaperproxy: unknown command \"x\"\nRun 'shaperproxy help' for usage.\n"},
		{errors.New("disk full"), 1, "shaperproxy: disk full\n"},
	}
	for _, tt := range tests {
		var b bytes.Buffer
		if code := exitCode(tt.err, &b); code != tt.code || b.String() != tt.stderr {
			t.Errorf("%v: %d %q, want %d %q", tt.err, code, b.String(), tt.code, tt.stderr)
		}
	}
}

func TestParseDuration(t *testing.T) {
	tests := []struct {
		in   string
		want time.Duration
		bad  bool
	}{
		{in: "90s", want: 90 * time.Second},
		{in: "1h30m", want: 90 * time.Minute},
		{in: "2d", want: 48 * time.Hour},
		{in: "1w", want: 7 * 24 * time.Hour},
		{in: "1w2d3h", want: (7*24 + 48 + 3) * time.Hour},
		{in: "1.5d", want: 36 * time.Hour},
		{in: "250ms", want: 250 * time.Millisecond},
		{in: "-1d", want: -24 * time.Hour},
		{in: "d", bad: true},
		{in: "2", bad: true},
		{in: "2x", bad: true},
		{in: "", bad: true},
		{in: "1..2d", bad: true},
	}
	for _, tt := range tests {
		got, err := parseDuration(tt.in)
		if (err != nil) != tt.bad || (!tt.bad && got != tt.want) {
			t.Errorf("parseDuration(%q) = %v, %v; want %v (bad %v)", tt.in, got, err, tt.want, tt.bad)
		}
		if err != nil && !strings.Contains(err.Error(), "2d") {
			t.Errorf("error does not say what is accepted: %v", err)
		}
	}
	var at time.Time
	if err := (timeValue{t: &at}).Set("-2d"); err == nil {
		t.Error("a negative duration ago was accepted")
	}
	if err := (timeValue{t: &at, now: func() time.Time { return t0 }}).Set("1w"); err != nil || !at.Equal(t0.Add(-7*24*time.Hour)) {
		t.Errorf("--since 1w: %v %v", at, err)
	}
}

func TestParseTime(t *testing.T) {
	now := time.Date(2025, 3, 10, 12, 0, 0, 0, time.UTC)
	clock := func() time.Time { return now }
	tests := []struct {
		in   string
		want time.Time
		bad  bool
	}{
		{in: "2d", want: now.Add(-48 * time.Hour)},
		{in: "90m", want: now.Add(-90 * time.Minute)},
		{in: "2025-03-01T12:00:00Z", want: time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)},
		{in: "2025-03-01T13:00:00+01:00", want: time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)},
		{in: "2025-03-01 12:30", want: time.Date(2025, 3, 1, 12, 30, 0, 0, time.UTC)},
		{in: "2025-03-01", want: time.Date(2025, 3, 1, 0, 0, 0, 0, time.UTC)},
		{in: "-1h", bad: true},
		{in: "yesterday", bad: true},
	}
	for _, tt := range tests {
		got, err := parseTime(tt.in, clock)
		if (err != nil) != tt.bad || (!tt.bad && !got.Equal(tt.want)) {
			t.Errorf("parseTime(%q) = %v, %v; want %v (bad %v)", tt.in, got, err, tt.want, tt.bad)
		}
	}
}

// captureFixture writes a capture log with two streamed calls, a note
// and a drop, and returns its directory.
func captureFixture(t *testing.T) string {
	t.Helper()
	w, dir := openCaptureTest(t, capture.Options{})
	writeCall(t, w, "call-a", t0)
	writeCall(t, w, "call-b", t0.Add(time.Minute))
	enqueue(t, w, capture.Record{Kind: capture.KindNote, Call: "call-b", Where: "guard", Time: t0.Add(time.Minute), Data: []byte(`{"guard":"echo","tool":"run_build","count":3}`)})
	enqueue(t, w, capture.Record{Kind: capture.KindDrops, Time: t0.Add(2 * time.Minute), DroppedCount: 2})
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return dir
}
