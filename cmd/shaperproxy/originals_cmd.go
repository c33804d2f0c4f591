package main

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/shaperproxy/shaperproxy/originals"
)

// originalsLockTimeout is how long the forensic commands wait for the table
// while another process (a running proxy) holds it.
const originalsLockTimeout = 2 * time.Second

// originalsMaxStdin bounds the shaped text read by lookup --stdin.
const originalsMaxStdin = 16 << 20

const originalsUsageText = `usage: shaperproxy originals COMMAND [flags]

Look up the original reasoning the proxy replaced with a shaped extract.
Originals are kept for the current turn of each conversation only.

commands:
  stats                      entries, conversations and file size of the table
  list [--conversation KEY]  one line per recorded original
  lookup TEXT | --stdin | --sha256 HEX
                             print the original(s) of a shaped text

flags of every command:
  --data-dir DIR  data directory (default $SHAPERPROXY_DATA_DIR,
                  else $XDG_STATE_HOME/shaperproxy, else ~/.local/state/shaperproxy)
  --json          print JSON

  --proxy URL     the running proxy to ask when it holds the table
                  (default $SHAPERPROXY_URL, else the address ` + "`serve`" + ` recorded
                  in the data directory, else http://127.0.0.1:8787)

While ` + "`shaperproxy serve`" + ` has the table open no other process can read the file;
the commands then ask the running proxy (on loopback) instead.
`

// runOriginals is the command "originals": stats, list and lookup over the
// side table of original reasoning.
func runOriginals(_ context.Context, args []string, stdout, stderr io.Writer) error {
	return originalsMain(args, os.Stdin, stdout, stderr)
}

func originalsMain(args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	if len(args) == 0 || args[0] == "help" || args[0] == "-h" || args[0] == "--help" {
		_, err := io.WriteString(stdout, originalsUsageText)
		return err
	}
	switch args[0] {
	case "stats":
		return originalsStats(args[1:], stdout, stderr)
	case "list":
		return originalsList(args[1:], stdout, stderr)
	case "lookup":
		return originalsLookup(args[1:], stdin, stdout, stderr)
	}
	_, _ = io.WriteString(stderr, originalsUsageText)
	return fmt.Errorf("originals: unknown command %q", args[0])
}

// originalsFlags are the flags every originals command takes.
type originalsFlags struct {
	forensicFlags
	proxy string
}

// originalsSource is what the commands read: the table file, or the
// running proxy that holds it.
type originalsSource interface {
	Stats() (originals.Stats, error)
	List(conv string) ([]originals.Entry, error)
	LookupHash(sum [32]byte) ([]originals.Entry, error)
	Path() string
	Close() error
}

func newOriginalsFlags(name string, stderr io.Writer) *originalsFlags {
	f := &originalsFlags{}
	f.init("originals "+name, "print JSON", stderr)
	f.fs.StringVar(&f.proxy, "proxy", "", "the running proxy's `URL` (default $SHAPERPROXY_URL, the URL serve recorded, or http://127.0.0.1:8787)")
	return f
}

// parseNoArgs parses flags for a command that takes no positional argument.
func (f *originalsFlags) parseNoArgs(args []string) error {
	pos, err := f.parse(args)
	if err == nil && len(pos) > 0 {
		err = fmt.Errorf("%s: unexpected argument %q", f.fs.Name(), pos[0])
	}
	return err
}

// open opens the table read-only; when a running proxy holds it, it asks
// that proxy instead. The common failures are turned into advice.
func (f *originalsFlags) open() (originalsSource, error) {
	dir, err := resolveDataDir(f.dataDir)
	if err != nil {
		return nil, err
	}
	path := filepath.Join(dir, originals.FileName)
	st, err := originals.Open(path, originals.Options{ReadOnly: true, LockTimeout: originalsLockTimeout})
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil, fmt.Errorf("no originals table at %s: nothing has been recorded yet, or --data-dir points elsewhere", path)
	case errors.Is(err, originals.ErrLocked):
		base := firstNonEmpty(f.proxy, os.Getenv("SHAPERPROXY_URL"), servedURL(dir), "http://127.0.0.1:8787")
		remote, rerr := dialOriginals(base)
		if rerr != nil {
			return nil, fmt.Errorf("a running proxy holds the originals table %s, and asking it at %s failed: %w "+
				"(pass --proxy URL, or stop `shaperproxy serve`: the originals stay on disk until each conversation's next turn)", path, base, rerr)
		}
		return remote, nil
	case err != nil:
		return nil, err
	}
	return st, nil
}

func originalsStats(args []string, stdout, stderr io.Writer) error {
	f := newOriginalsFlags("stats", stderr)
	if err := f.parseNoArgs(args); err != nil {
		return err
	}
	st, err := f.open()
	if err != nil {
		return err
	}
	defer st.Close()
	stats, err := st.Stats()
	if err != nil {
		return err
	}
	return writeOriginalsStats(stdout, st.Path(), stats, f.json)
}

func originalsList(args []string, stdout, stderr io.Writer) error {
	f := newOriginalsFlags("list", stderr)
	conv := f.fs.String("conversation", "", "list only this conversation")
	if err := f.parseNoArgs(args); err != nil {
		return err
	}
	st, err := f.open()
	if err != nil {
		return err
	}
	defer st.Close()
	entries, err := st.List(*conv)
	if err != nil {
		return err
	}
	return writeOriginalsList(stdout, entries, f.json)
}

func originalsLookup(args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	f := newOriginalsFlags("lookup", stderr)
	fromStdin := f.fs.Bool("stdin", false, "read the shaped text from standard input")
	hexSum := f.fs.String("sha256", "", "look up by the sha256 (hex) of the shaped text")
	pos, err := f.parse(args)
	if err != nil {
		return err
	}
	keys, err := originalsLookupKeys(pos, *fromStdin, *hexSum, stdin)
	if err != nil {
		return err
	}
	st, err := f.open()
	if err != nil {
		return err
	}
	defer st.Close()
	for _, k := range keys {
		entries, err := st.LookupHash(k)
		if err != nil {
			return err
		}
		if len(entries) > 0 {
			return writeOriginalsLookup(stdout, k, entries, f.json)
		}
	}
	if f.json {
		_ = writeOriginalsLookup(stdout, keys[0], nil, true)
	}
	_ = writeOriginalsMiss(stderr, keys[0])
	return fmt.Errorf("originals lookup: no original for sha256 %x", keys[0])
}

// originalsLookupKeys returns the hashes to try, in order: the one given,
// or the text's and, if it ends in a newline (as echo and editors leave
// it), the text's without it.
func originalsLookupKeys(pos []string, fromStdin bool, hexSum string, stdin io.Reader) ([][32]byte, error) {
	given := len(pos)
	if fromStdin {
		given++
	}
	if hexSum != "" {
		given++
	}
	if given != 1 || len(pos) > 1 {
		return nil, errors.New("originals lookup takes exactly one of TEXT (quoted), --stdin or --sha256 HEX")
	}
	if hexSum != "" {
		return originalsParseSum(hexSum)
	}
	text := ""
	if len(pos) == 1 {
		text = pos[0]
	} else {
		b, err := io.ReadAll(io.LimitReader(stdin, originalsMaxStdin+1))
		if err != nil {
			return nil, fmt.Errorf("originals lookup: read stdin: %w", err)
		}
		if len(b) > originalsMaxStdin {
			return nil, fmt.Errorf("originals lookup: stdin is over %d bytes; a shaped text is short", originalsMaxStdin)
		}
		text = string(b)
	}
	keys := [][32]byte{originals.Sum(text)}
	if trimmed := strings.TrimRight(text, "\r\n"); trimmed != text {
		keys = append(keys, originals.Sum(trimmed))
	}
	return keys, nil
}

func originalsParseSum(s string) ([][32]byte, error) {
	b, err := hex.DecodeString(strings.TrimSpace(s))
	if err != nil || len(b) != 32 {
		return nil, fmt.Errorf("originals lookup: --sha256 wants 64 hex digits, got %q", s)
	}
	return [][32]byte{[32]byte(b)}, nil
}
