package control

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"time"
)

// DefaultSocket is where the service's control socket is without configuration.
const DefaultSocket = "/var/lib/omnisat/control.sock"

// Usage lists the commands the CLI takes.
const Usage = `status | start | stop | restart | interrupt | mute on|off | camera on|off | volume 0..100 | say TEXT | ask [--snapshot] TEXT`

// CLI is the command-line client (`omnisat ctl`, and the light `omnisat-ctl`, which starts in
// milliseconds because it links no OpenCV). Exit codes: 0 ok, 1 failure, 2 usage, 3 config.
type CLI struct {
	Name           string // for messages, e.g. "omnisat ctl"
	Stdout, Stderr io.Writer
	Getenv         func(string) string
	// SocketFromConfig resolves -c FILE to a socket path; nil means -c is not offered.
	SocketFromConfig func(path string) (string, error)
}

// Run parses args and sends one command.
func (c CLI) Run(ctx context.Context, args []string) int {
	fs := flag.NewFlagSet(c.Name, flag.ContinueOnError)
	fs.SetOutput(c.Stderr)
	fs.Usage = func() {
		fmt.Fprintf(c.Stderr, "usage: %s [flags] %s\n\nflags:\n", c.Name, Usage)
		fs.PrintDefaults()
	}
	socket := fs.String("socket", c.Getenv("OMNISAT_SOCKET"), "control socket (default "+DefaultSocket+"; env OMNISAT_SOCKET)")
	var path *string
	if c.SocketFromConfig != nil {
		path = fs.String("c", "", "configuration file to take the socket path from")
	}
	snapshot := fs.Bool("snapshot", false, "ask: attach the newest camera frame")
	timeout := fs.Duration("timeout", answerTimeout+5*time.Second, "give up after this long")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	fail := func(code int, format string, a ...any) int {
		fmt.Fprintf(c.Stderr, c.Name+": "+format+"\n", a...)
		return code
	}
	if fs.NArg() == 0 {
		fs.Usage()
		return fail(2, "no command")
	}
	req := Request{Cmd: fs.Arg(0)}
	rest := fs.Args()[1:]
	switch req.Cmd {
	case "status", "start", "stop", "restart", "interrupt":
		if len(rest) > 0 {
			return fail(2, "%s takes no argument", req.Cmd)
		}
	case "mute", "camera":
		if len(rest) != 1 || (rest[0] != "on" && rest[0] != "off") {
			return fail(2, "%s takes on or off", req.Cmd)
		}
		req.Arg = rest[0]
	case "volume":
		if len(rest) != 1 {
			return fail(2, "volume takes a number 0..100")
		}
		req.Arg = rest[0]
	case "say", "ask":
		if len(rest) > 0 && rest[0] == "--snapshot" {
			*snapshot, rest = true, rest[1:]
		}
		req.Text = strings.TrimSpace(strings.Join(rest, " "))
		req.Snapshot = *snapshot
		if req.Text == "" {
			return fail(2, "%s needs text", req.Cmd)
		}
	default:
		return fail(2, "unknown command %q; want %s", req.Cmd, Usage)
	}
	if *socket == "" {
		*socket = DefaultSocket
		if path != nil && *path != "" {
			s, err := c.SocketFromConfig(*path)
			if err != nil {
				return fail(3, "%v", err)
			}
			*socket = s
		}
	}
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	resp, err := Call(ctx, *socket, req)
	if err != nil {
		return fail(1, "%v", err)
	}
	if !resp.OK {
		return fail(1, "%s", resp.Error)
	}
	switch {
	case resp.Answer != nil:
		fmt.Fprintln(c.Stdout, resp.Answer.Text)
	case resp.Status != nil:
		b, _ := json.MarshalIndent(resp.Status, "", "  ")
		fmt.Fprintln(c.Stdout, string(b))
	}
	return 0
}
