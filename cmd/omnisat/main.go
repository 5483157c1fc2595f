// Command omnisat is the satellite service and its tools. This file is the single wiring point:
// it reads the command line, builds the subsystems and runs them.
package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime"
	"runtime/debug"
	"sort"
	"strings"
	"syscall"

	"github.com/omnisat/omnisat/internal/quietout"
)

// version is stamped at build time (-ldflags "-X main.version=...").
var version = "dev"

// Exit codes, documented in the README.
const (
	exitOK      = 0
	exitFailure = 1 // the server, the link or a file failed; trying again may work
	exitUsage   = 2 // unknown command or flag, missing argument
	exitConfig  = 3 // the server refused our settings (mode, auth, dialect): fix the configuration
)

// command is one subcommand.
type command struct {
	summary string
	run     func(ctx context.Context, env *cliEnv, args []string) int
}

// cliEnv is what a subcommand may touch: its streams, the environment, the process's name.
type cliEnv struct {
	stdout, stderr io.Writer
	getenv         func(string) string
	// hangup asks `run` to re-read its configuration; nil means SIGHUP.
	hangup chan os.Signal
	// journal is true when stderr goes to systemd's journal, which stamps the time itself.
	journal bool
}

func commands() map[string]command {
	return map[string]command{
		"version":  {"print the version", runVersion},
		"simulate": {"run the protocol-faithful model server simulator", runSimulate},
		"chat":     {"one turn-based request: print the reply (optionally save its speech)", runChat},
		"run":      {"run the agent in the foreground with a configuration file", runRun},
		"ctl":      {"drive a running agent through its control socket", runCtl},
		"devices":  {"list audio devices and cameras", runDevices},
		"mqtt":     {"MQTT maintenance: remove-discovery", runMQTT},
		"config":   {"check a configuration file, or print the commented example", runConfig},
		"service":  {"install, start, stop or inspect the systemd service", runService},
	}
}

// serviceProcs is how many threads run Go code at once in `omnisat run` unless GOMAXPROCS says
// otherwise. The service's work is a few milliseconds a second in bursts; with more than one, the
// runtime wakes a second thread to look for work at every event, and finds none.
const serviceProcs = 1

// serviceGCPercent is the collector's GOGC in `omnisat run` unless GOGC says otherwise. The
// service's heap is a megabyte or two of long-lived buffers and it allocates little while it
// streams: at the default nothing is collected before the heap reaches the runtime's 4 MB
// floor, which a half hour of session rollovers fills with garbage the device keeps. At 50 the
// floor is 2 MB and the goal one and a half times what is live, for a collection about every
// rollover.
const serviceGCPercent = 50

func main() {
	// Nothing reads heap profiles, and sampling them costs a 1.4 MB bucket table that fills a
	// page at a time for as long as the service runs.
	runtime.MemProfileRate = 0
	if len(os.Args) > 1 && os.Args[1] == "run" {
		if os.Getenv("GOMAXPROCS") == "" {
			runtime.GOMAXPROCS(serviceProcs)
		}
		if os.Getenv("GOGC") == "" {
			debug.SetGCPercent(serviceGCPercent)
		}
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	env := &cliEnv{stdout: quietout.New(os.Stdout), stderr: os.Stderr, getenv: os.Getenv, journal: isJournal(os.Stderr, os.Getenv("JOURNAL_STREAM"))}
	code := run(ctx, os.Args[1:], env)
	stop()
	os.Exit(code)
}

func run(ctx context.Context, args []string, env *cliEnv) int {
	cmds := commands()
	if len(args) == 0 {
		usage(env.stderr, cmds)
		return exitUsage
	}
	name := args[0]
	switch name {
	case "-h", "--help", "help":
		usage(env.stdout, cmds)
		return exitOK
	case "-v", "--version":
		name = "version"
	}
	cmd, ok := cmds[name]
	if !ok {
		fmt.Fprintf(env.stderr, "omnisat: unknown command %q\n\n", name)
		usage(env.stderr, cmds)
		return exitUsage
	}
	return cmd.run(ctx, env, args[1:])
}

func usage(w io.Writer, cmds map[string]command) {
	names := make([]string, 0, len(cmds))
	for n := range cmds {
		names = append(names, n)
	}
	sort.Strings(names)
	var b strings.Builder
	b.WriteString("usage: omnisat <command> [flags] [args]\n\ncommands:\n")
	for _, n := range names {
		fmt.Fprintf(&b, "  %-10s %s\n", n, cmds[n].summary)
	}
	b.WriteString("\n'omnisat <command> -h' shows a command's flags.\n")
	fmt.Fprint(w, b.String())
}

func runVersion(_ context.Context, env *cliEnv, args []string) int {
	fs := newFlagSet("version", env, "")
	if code, done := parseFlags(fs, args); done {
		return code
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(env.stderr, "omnisat version: unexpected argument %q\n", fs.Arg(0))
		return exitUsage
	}
	fmt.Fprintf(env.stdout, "omnisat %s\n", version)
	return exitOK
}
