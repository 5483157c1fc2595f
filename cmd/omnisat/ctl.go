package main

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/omnisat/omnisat/agent/control"
)

const ctlUsage = `status | start | stop | restart | interrupt | mute on|off | camera on|off | say TEXT | ask [--snapshot] TEXT`

func runCtl(ctx context.Context, env *cliEnv, args []string) int {
	fs := newFlagSet("ctl", env, ctlUsage)
	socket := fs.String("socket", env.getenv("OMNISAT_SOCKET"), "control socket (default: from -c, else /var/lib/omnisat/control.sock; env OMNISAT_SOCKET)")
	path := fs.String("c", "", "configuration file to take the socket path from")
	snapshot := fs.Bool("snapshot", false, "ask: attach the newest camera frame")
	timeout := fs.Duration("timeout", 2*time.Minute+5*time.Second, "give up after this long")
	if code, done := parseFlags(fs, args); done {
		return code
	}
	fail := func(code int, format string, a ...any) int {
		fmt.Fprintf(env.stderr, "omnisat ctl: "+format+"\n", a...)
		return code
	}
	if fs.NArg() == 0 {
		fs.Usage()
		return fail(exitUsage, "no command")
	}
	if *socket == "" {
		*socket = "/var/lib/omnisat/control.sock"
		if *path != "" {
			cfg, err := loadConfig(*path, true)
			if err != nil {
				return fail(exitConfig, "%v", err)
			}
			*socket = cfg.socketPath()
		}
	}
	req := control.Request{Cmd: fs.Arg(0)}
	rest := fs.Args()[1:]
	switch req.Cmd {
	case "status", "start", "stop", "restart", "interrupt":
		if len(rest) > 0 {
			return fail(exitUsage, "%s takes no argument", req.Cmd)
		}
	case "mute", "camera":
		if len(rest) != 1 || (rest[0] != "on" && rest[0] != "off") {
			return fail(exitUsage, "%s takes on or off", req.Cmd)
		}
		req.Arg = rest[0]
	case "say", "ask":
		if len(rest) > 0 && rest[0] == "--snapshot" {
			*snapshot, rest = true, rest[1:]
		}
		req.Text = strings.TrimSpace(strings.Join(rest, " "))
		req.Snapshot = *snapshot
		if req.Text == "" {
			return fail(exitUsage, "%s needs text", req.Cmd)
		}
	default:
		return fail(exitUsage, "unknown command %q; want %s", req.Cmd, ctlUsage)
	}
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	resp, err := control.Call(ctx, *socket, req)
	if err != nil {
		return fail(exitFailure, "%v", err)
	}
	if !resp.OK {
		return fail(exitFailure, "%s", resp.Error)
	}
	switch {
	case resp.Answer != nil:
		fmt.Fprintln(env.stdout, resp.Answer.Text)
	case resp.Status != nil:
		b, _ := json.MarshalIndent(resp.Status, "", "  ")
		fmt.Fprintln(env.stdout, string(b))
	}
	return exitOK
}
