package main

import (
	"errors"
	"flag"
	"fmt"
	"strings"
)

// newFlagSet makes a flag set that reports errors itself (exit 2) instead of exiting the process.
func newFlagSet(name string, env *cliEnv, argsUsage string) *flag.FlagSet {
	fs := flag.NewFlagSet("omnisat "+name, flag.ContinueOnError)
	fs.SetOutput(env.stderr)
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "usage: omnisat %s [flags] %s\n\nflags:\n", name, argsUsage)
		fs.PrintDefaults()
	}
	return fs
}

// parseFlags parses args; done is true when the command must return code at once (-h or an error).
func parseFlags(fs *flag.FlagSet, args []string) (code int, done bool) {
	err := fs.Parse(args)
	switch {
	case err == nil:
		return 0, false
	case errors.Is(err, flag.ErrHelp):
		return exitOK, true
	default:
		return exitUsage, true
	}
}

// stringList is a repeatable string flag.
type stringList []string

func (l *stringList) String() string     { return strings.Join(*l, ",") }
func (l *stringList) Set(v string) error { *l = append(*l, v); return nil }
