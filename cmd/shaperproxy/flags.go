package main

import (
	"flag"
	"fmt"
	"io"
	"strings"

	"github.com/shaperproxy/shaperproxy/internal/config"
)

// flagSet is a command's flag set. It prints nothing on its own: a parse
// error comes back as a usageError (main prints it once and exits 2), and
// -h/--help prints the command's help on its stdout and returns
// flag.ErrHelp (main exits 0).
type flagSet struct {
	*flag.FlagSet
	usage  string // "usage: shaperproxy NAME …" and what the command does
	stdout io.Writer
}

// newFlagSet returns the flag set of the command name ("capture tail");
// usage is printed above the flags by -h.
func newFlagSet(name, usage string, stdout io.Writer) *flagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	return &flagSet{FlagSet: fs, usage: usage, stdout: stdout}
}

// parse parses args, which must hold flags only.
func (f *flagSet) parse(args []string) error {
	pos, err := f.parseInterspersed(args)
	if err == nil && len(pos) > 0 {
		err = f.usageErr("unexpected argument %q", pos[0])
	}
	return err
}

// parseInterspersed parses flags placed before, between or after the
// positional arguments, which it returns ("--" ends the flags).
func (f *flagSet) parseInterspersed(args []string) ([]string, error) {
	var pos []string
	for {
		if err := f.parseOnce(args); err != nil {
			return nil, err
		}
		rest := f.Args()
		if len(rest) == 0 {
			return pos, nil
		}
		if i := len(args) - len(rest); i > 0 && args[i-1] == "--" {
			return append(pos, rest...), nil
		}
		pos, args = append(pos, rest[0]), rest[1:]
	}
}

func (f *flagSet) parseOnce(args []string) error {
	err := f.Parse(args)
	switch {
	case err == nil:
		return nil
	case err == flag.ErrHelp:
		f.help(f.stdout)
		return flag.ErrHelp
	}
	return &usageError{cmd: f.Name(), err: err}
}

// help writes the command's usage and its flags.
func (f *flagSet) help(w io.Writer) {
	fmt.Fprintf(w, "%s\nflags:\n", strings.TrimRight(f.usage, "\n")+"\n")
	f.SetOutput(w)
	f.PrintDefaults()
	f.SetOutput(io.Discard)
}

// usageErr returns a usage error of this command.
func (f *flagSet) usageErr(format string, a ...any) error {
	return &usageError{cmd: f.Name(), err: fmt.Errorf(format, a...)}
}

// forensicFlags are the flags every forensic command (capture, originals)
// takes: --data-dir, --config and --json.
type forensicFlags struct {
	*flagSet
	dataDir string
	config  string
	json    bool
}

// newForensicFlags returns the flag set of a forensic command.
func newForensicFlags(name, usage string, stdout io.Writer) *forensicFlags {
	f := &forensicFlags{flagSet: newFlagSet(name, usage, stdout)}
	f.StringVar(&f.dataDir, "data-dir", "", "data `directory` (default: the config's data_dir, else $SHAPERPROXY_DATA_DIR, else the user's state directory)")
	f.StringVar(&f.config, "config", "", "read data_dir from this TOML configuration `file`, as serve does")
	f.BoolVar(&f.json, "json", false, "print JSON, one object per line (shapes in the README)")
	return f
}

// dataDirectory is the data directory the command reads (dataDirFrom).
func (f *forensicFlags) dataDirectory() (string, error) { return dataDirFrom(f.dataDir, f.config) }

// dataDirFrom is the data directory a command uses, as serve does:
// --data-dir, else the data_dir of the --config file, else
// resolveDataDir's default ($SHAPERPROXY_DATA_DIR, the state directory).
func dataDirFrom(flagDir, configPath string) (string, error) {
	if flagDir == "" && configPath != "" {
		c, err := config.Load(configPath)
		if err != nil {
			return "", err
		}
		flagDir = c.DataDir
	}
	return resolveDataDir(flagDir)
}
