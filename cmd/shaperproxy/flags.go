package main

import (
	"flag"
	"io"
)

// forensicFlags are the flags every forensic command (capture, originals)
// takes: --data-dir and --json, on a FlagSet that accepts flags before,
// between and after the positional arguments.
type forensicFlags struct {
	fs      *flag.FlagSet
	dataDir string
	json    bool
}

// init sets f up in place (the flag set keeps pointers into f).
func (f *forensicFlags) init(name, jsonHelp string, stderr io.Writer) {
	f.fs = flag.NewFlagSet(name, flag.ContinueOnError)
	f.fs.SetOutput(stderr)
	f.fs.StringVar(&f.dataDir, "data-dir", "", "data directory (default $SHAPERPROXY_DATA_DIR or the user's state directory)")
	f.fs.BoolVar(&f.json, "json", false, jsonHelp)
}

// parse parses flags placed before, between or after the positional
// arguments, which it returns ("--" ends the flags).
func (f *forensicFlags) parse(args []string) ([]string, error) {
	var pos []string
	for {
		if err := f.fs.Parse(args); err != nil {
			return nil, err
		}
		rest := f.fs.Args()
		if len(rest) == 0 {
			return pos, nil
		}
		if i := len(args) - len(rest); i > 0 && args[i-1] == "--" {
			return append(pos, rest...), nil
		}
		pos, args = append(pos, rest[0]), rest[1:]
	}
}
