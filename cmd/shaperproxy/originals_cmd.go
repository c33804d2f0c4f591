package main

import (
	"cmp"
	"context"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
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
  list [--conversation KEY]  one line per recorded original, with the sha256
                             of its shaped text (lookup --sha256 takes it)
  lookup TEXT | --stdin | --sha256 HEX
                             print the original(s) of a shaped text

flags of every command:
  --json           one JSON object per line (shapes in the README)
  --data-dir DIR   data directory (default: the config's data_dir, else
                   $SHAPERPROXY_DATA_DIR, else the user's state directory)
  --config FILE    take data_dir from this configuration, as serve does
  --proxy URL      the running proxy to ask (default: the address serve
                   recorded in the data directory; when the table is locked,
                   else $SHAPERPROXY_URL, else http://127.0.0.1:8787)

While ` + "`shaperproxy serve`" + ` has the table open no other process can read
the file: the commands ask the running proxy first (on loopback, the
address it recorded in <data-dir>/serve.url), and read the file when no
proxy answers. Run 'shaperproxy help originals COMMAND' for a command's flags.
`

// runOriginals is the command "originals": stats, list and lookup over the
// side table of original reasoning.
func runOriginals(_ context.Context, args []string, stdout, stderr io.Writer) error {
	return originalsMain(args, os.Stdin, stdout, stderr)
}

func originalsMain(args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	if len(args) == 0 || isHelpFlag(args[0]) {
		_, err := io.WriteString(stdout, originalsUsageText)
		if err == nil && len(args) > 0 {
			err = flag.ErrHelp
		}
		return err
	}
	switch args[0] {
	case "stats":
		return originalsStats(args[1:], stdout)
	case "list":
		return originalsList(args[1:], stdout)
	case "lookup":
		return originalsLookup(args[1:], stdin, stdout)
	}
	return usagef("originals", "unknown command %q (stats, list, lookup)", args[0])
}

// originalsFlags are the flags every originals command takes.
type originalsFlags struct {
	*forensicFlags
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

func newOriginalsFlags(name, usage string, stdout io.Writer) *originalsFlags {
	f := &originalsFlags{forensicFlags: newForensicFlags("originals "+name, "usage: shaperproxy originals "+usage, stdout)}
	f.StringVar(&f.proxy, "proxy", "", "the running proxy's `URL` (default: the URL serve recorded in the data directory)")
	return f
}

// open returns the source to read: the running proxy when one answers at
// --proxy or at the address serve recorded in the data directory (it holds
// the table, and answers at once), else the table file read-only. A file
// locked by a proxy that recorded no address is asked for at
// $SHAPERPROXY_URL or the default address.
func (f *originalsFlags) open() (originalsSource, error) {
	dir, err := f.dataDirectory()
	if err != nil {
		return nil, err
	}
	var remoteErr error
	first := cmp.Or(f.proxy, servedURL(dir))
	if first != "" {
		remote, err := dialOriginals(first)
		if err == nil {
			return remote, nil
		}
		remoteErr = fmt.Errorf("asking the proxy at %s failed: %w", first, err)
	}
	path := filepath.Join(dir, originals.FileName)
	st, err := originals.Open(path, originals.Options{ReadOnly: true, LockTimeout: originalsLockTimeout})
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil, fmt.Errorf("no originals table at %s: nothing has been recorded yet, or --data-dir points elsewhere", path)
	case errors.Is(err, originals.ErrLocked):
		return f.openLocked(path, remoteErr)
	case err != nil:
		return nil, err
	}
	return st, nil
}

// openLocked asks a proxy that holds the table but recorded no address
// (or one that did not answer).
func (f *originalsFlags) openLocked(path string, remoteErr error) (originalsSource, error) {
	if remoteErr == nil {
		base := cmp.Or(os.Getenv("SHAPERPROXY_URL"), "http://127.0.0.1:8787")
		remote, err := dialOriginals(base)
		if err == nil {
			return remote, nil
		}
		remoteErr = fmt.Errorf("asking the proxy at %s failed: %w", base, err)
	}
	return nil, fmt.Errorf("a running proxy holds the originals table %s, and %w "+
		"(pass --proxy URL, or stop `shaperproxy serve`: the originals stay on disk until each conversation's next turn)", path, remoteErr)
}

func originalsStats(args []string, stdout io.Writer) error {
	f := newOriginalsFlags("stats", "stats [flags]\n\nEntries, conversations, fan-outs and file size of the originals table.\n", stdout)
	if err := f.parse(args); err != nil {
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
	path, proxy := sourceOf(st)
	return writeOriginalsStats(stdout, path, proxy, stats, f.json)
}

func originalsList(args []string, stdout io.Writer) error {
	f := newOriginalsFlags("list", `list [--conversation KEY] [flags]

One line per recorded original: conversation, turn, time, the sha256 of the
shaped text (its first 16 hex digits, which lookup --sha256 accepts; JSON
has all 64), the original's size and the shaped text.
`, stdout)
	conv := f.String("conversation", "", "list only this conversation `KEY`")
	if err := f.parse(args); err != nil {
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

func originalsLookup(args []string, stdin io.Reader, stdout io.Writer) error {
	f := newOriginalsFlags("lookup", `lookup TEXT | --stdin | --sha256 HEX [flags]

Print the original(s) of a shaped text: given as an argument (quoted), on
standard input, or by the sha256 of the shaped text (64 hex digits, or a
prefix of at least 8 that only one recorded text has, as list prints it).
Exit status 1 when nothing is recorded for it.
`, stdout)
	fromStdin := f.Bool("stdin", false, "read the shaped text from standard input")
	hexSum := f.String("sha256", "", "look up by the sha256 (`HEX`, or a unique prefix of 8+ digits) of the shaped text")
	pos, err := f.parseInterspersed(args)
	if err != nil {
		return err
	}
	req, err := originalsLookupKeys(pos, *fromStdin, *hexSum, stdin)
	if err != nil {
		return f.usageErr("%w", err)
	}
	st, err := f.open()
	if err != nil {
		return err
	}
	defer st.Close()
	keys, err := req.resolve(st)
	if err != nil {
		return err
	}
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
	return fmt.Errorf("originals lookup: no original is recorded for sha256 %x.\n%s", keys[0], strings.TrimRight(originalsMissHelp, "\n"))
}

// lookupRequest is what lookup was asked for: the hashes to try, or a
// hash prefix to resolve against the table.
type lookupRequest struct {
	keys   [][32]byte
	prefix string
}

// originalsLookupKeys returns what to look up: the hash given (or its
// prefix), or the text's and, if it ends in a newline (as echo and editors
// leave it), the text's without it.
func originalsLookupKeys(pos []string, fromStdin bool, hexSum string, stdin io.Reader) (lookupRequest, error) {
	given := len(pos)
	if fromStdin {
		given++
	}
	if hexSum != "" {
		given++
	}
	if given != 1 || len(pos) > 1 {
		return lookupRequest{}, errors.New("takes exactly one of TEXT (quoted), --stdin or --sha256 HEX")
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
			return lookupRequest{}, fmt.Errorf("read stdin: %w", err)
		}
		if len(b) > originalsMaxStdin {
			return lookupRequest{}, fmt.Errorf("stdin is over %d bytes; a shaped text is short", originalsMaxStdin)
		}
		text = string(b)
	}
	keys := [][32]byte{originals.Sum(text)}
	if trimmed := strings.TrimRight(text, "\r\n"); trimmed != text {
		keys = append(keys, originals.Sum(trimmed))
	}
	return lookupRequest{keys: keys}, nil
}

// minSumPrefix is the shortest hash prefix lookup --sha256 accepts.
const minSumPrefix = 8

func originalsParseSum(s string) (lookupRequest, error) {
	s = strings.ToLower(strings.TrimSpace(s))
	if strings.Trim(s, "0123456789abcdef") != "" || len(s) < minSumPrefix || len(s) > 64 {
		return lookupRequest{}, fmt.Errorf("--sha256 wants 64 hex digits, or a prefix of at least %d, got %q", minSumPrefix, s)
	}
	if len(s) < 64 {
		return lookupRequest{prefix: s}, nil
	}
	b, _ := hex.DecodeString(s)
	return lookupRequest{keys: [][32]byte{[32]byte(b)}}, nil
}

// resolve returns the hashes to try; a prefix must name exactly one
// shaped text of the table.
func (q lookupRequest) resolve(st originalsSource) ([][32]byte, error) {
	if q.prefix == "" {
		return q.keys, nil
	}
	entries, err := st.List("")
	if err != nil {
		return nil, err
	}
	found := map[[32]byte]bool{}
	for _, e := range entries {
		if sum := originals.Sum(e.Shaped); strings.HasPrefix(hex.EncodeToString(sum[:]), q.prefix) {
			found[sum] = true
		}
	}
	switch len(found) {
	case 0:
		return nil, fmt.Errorf("originals lookup: no recorded shaped text has a sha256 starting %s.\n%s", q.prefix, strings.TrimRight(originalsMissHelp, "\n"))
	case 1:
		return slices.Collect(maps.Keys(found)), nil
	}
	return nil, fmt.Errorf("originals lookup: %d recorded shaped texts have a sha256 starting %s; give more digits", len(found), q.prefix)
}
