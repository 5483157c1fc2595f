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
const Usage = `status | start | stop | restart | interrupt | mute on|off | camera on|off | volume 0..100 | settings reset | say [--voice V] TEXT | ask [--snapshot] [--max-new-tokens N] [--thinking] TEXT`

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
	maxTokens := fs.Int("max-new-tokens", 0, "say, ask: bound the reply's length (0: the server's default)")
	thinking := fs.Bool("thinking", false, "say, ask: let the model think first")
	voice := fs.String("voice", "", "say: the voice (OpenVoice voice id, or a reference voice name; default: server.tts_ref_audio)")
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
	case "settings":
		if len(rest) != 1 || rest[0] != "reset" {
			return fail(2, "settings takes reset (back to the configuration's mute, camera, volume, instructions, session)")
		}
		req.Arg = rest[0]
	case "say", "ask":
		// Flags may also follow the command: ctl ask --snapshot --max-new-tokens 64 what is this?
		sub := flag.NewFlagSet(c.Name+" "+req.Cmd, flag.ContinueOnError)
		sub.SetOutput(c.Stderr)
		sub.BoolVar(snapshot, "snapshot", *snapshot, "attach the newest camera frame (ask)")
		sub.IntVar(maxTokens, "max-new-tokens", *maxTokens, "bound the reply's length")
		sub.BoolVar(thinking, "thinking", *thinking, "let the model think first")
		sub.StringVar(voice, "voice", *voice, "the voice (say)")
		if err := sub.Parse(rest); err != nil {
			return 2
		}
		req.Text = strings.TrimSpace(strings.Join(sub.Args(), " "))
		req.Snapshot, req.MaxNewTokens, req.Thinking, req.Voice = *snapshot, *maxTokens, *thinking, *voice
		if req.Text == "" {
			return fail(2, "%s needs text", req.Cmd)
		}
		if req.MaxNewTokens < 0 || req.MaxNewTokens > maxNewTokens {
			return fail(2, "--max-new-tokens %d is outside 1..%d", req.MaxNewTokens, maxNewTokens)
		}
		if req.Cmd == "ask" && req.Voice != "" {
			return fail(2, "ask answers in text: --voice applies to say")
		}
		if req.Cmd == "say" && req.Snapshot {
			return fail(2, "say takes no --snapshot")
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
