// Command omnisat-simulator is the protocol-faithful model server simulator
// (realtime/realtimetest) as a program of its own: `omnisat simulate` runs it with its
// arguments, and `omnisat run --simulator` starts it beside the agent. It lives outside
// omnisat's binary so that a satellite, which never simulates, does not carry its megabyte of
// code: every page of the agent's binary is private memory on the device (see README.md,
// Performance).
//
//	omnisat-simulator --listen 127.0.0.1:0 --dialect current
//
// It prints one line, "simulator (DIALECT dialect) listening on URL", the URL last, then logs
// to standard error. It exits 0 when told to stop (SIGINT, SIGTERM) and after -h, and 2 for
// bad flags or an address it cannot listen on.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/omnisat/omnisat/realtime/realtimetest"
)

const (
	exitOK    = 0
	exitUsage = 2
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// run serves until ctx ends.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("omnisat-simulator", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintf(stderr, "usage: omnisat-simulator [flags]   (or: omnisat simulate [flags])\n\nflags:\n")
		fs.PrintDefaults()
	}
	listen := fs.String("listen", "127.0.0.1:8765", "address to listen on (port 0 picks a free one)")
	dialect := fs.String("dialect", "current", "dialect to speak: current, legacy or openvoice")
	var o realtimetest.Options
	fs.IntVar(&o.Workers, "workers", 1, "sessions served at once; more clients wait in the queue")
	fs.IntVar(&o.MaxQueue, "max-queue", 8, "clients allowed to wait; beyond that: queue_full and close 1013 (-1: none may wait)")
	fs.DurationVar(&o.QueueUpdateInterval, "queue-update", 0, "session.queue_update period (default 3s)")
	fs.DurationVar(&o.VideoLimit, "video-limit", 0, "mode=video session limit from worker assignment (default 300s)")
	fs.DurationVar(&o.AudioLimit, "audio-limit", 0, "mode=audio session limit from worker assignment (default 600s)")
	fs.IntVar(&o.ContextLimit, "context-limit", 0, "kv cache limit in tokens (default 8192)")
	fs.IntVar(&o.TokensPerAudioSecond, "tokens-per-second", 0, "kv cache growth per second of audio (default 25)")
	fs.DurationVar(&o.StepDelay, "step-delay", 0, "simulated model time per step (a slow GPU takes ~1s per 1s chunk)")
	fs.BoolVar(&o.ChatDisabled, "chat-disabled", false, "refuse mode=chat with close 1008")
	fs.IntVar(&o.OpenVoiceTTSRate, "tts-rate", 0, "OpenVoice TTS audio sample rate (default 24000)")
	models := fs.String("models", "", "OpenVoice: comma-separated STT models the server knows; any other is refused with model_not_found (default: any)")
	ttsModels := fs.String("tts-models", "", "OpenVoice: comma-separated TTS models the server knows; tts.speak under another model_tts gets only an error (default: any)")
	fs.DurationVar(&o.OpenVoiceInactivity, "inactivity", 0, "OpenVoice: end a session that sends no audio for this long (default 60s)")
	fs.Float64Var(&o.OpenVoiceSynthesisSpeed, "synthesis-speed", 0, "OpenVoice: seconds of TTS audio produced per second (default 4)")
	var quirks stringList
	fs.Var(&quirks, "quirk", "play a quirk of real current-dialect deployments (repeatable): "+strings.Join(realtimetest.Quirks, ", "))
	fs.BoolVar(&o.LateQueueLeave, "late-queue-leave", false, "play the real gateway's queue: updates only on the --queue-update timer, a queued client's disconnect noticed only at its next update, a worker handed to a gone client lost (jammed)")
	var faults stringList
	fs.Var(&faults, "fault", "arm a fault (repeatable): drop, stall, invalid-json, oversize, bad-delta, close, refuse, backend-error, stall-init, error; options after ':' e.g. close:reason=timeout,delay=100ms, close:keep-open=true, refuse:count=2,code=queue_full, backend-error:count=3, error:code=session_failed,after=2")
	verbose := fs.Bool("v", false, "log every connection and protocol violation")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return exitOK
		}
		return exitUsage
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "omnisat-simulator: unexpected argument %q\n", fs.Arg(0))
		return exitUsage
	}
	o.Dialect = realtimetest.Dialect(*dialect)
	o.Unrecorded = true // nobody reads this program's records, and it may serve for days
	o.Models, o.TTSModels = splitList(*models), splitList(*ttsModels)
	for _, q := range quirks {
		if err := o.SetQuirk(q); err != nil {
			fmt.Fprintf(stderr, "omnisat-simulator: --quirk: %v\n", err)
			return exitUsage
		}
	}
	for _, spec := range faults {
		f, err := realtimetest.ParseFault(spec)
		if err != nil {
			fmt.Fprintf(stderr, "omnisat-simulator: --fault: %v\n", err)
			return exitUsage
		}
		o.Faults = append(o.Faults, f)
	}
	level := slog.LevelWarn
	if *verbose {
		level = slog.LevelDebug
	}
	o.Logger = slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level}))

	srv, err := realtimetest.Listen(*listen, o)
	if err != nil {
		fmt.Fprintf(stderr, "omnisat-simulator: %v\n", err)
		return exitUsage
	}
	// The URL goes to stdout alone on a line, last, so scripts and omnisat run can read it.
	fmt.Fprintf(stdout, "simulator (%s dialect) listening on %s\n", o.Dialect, srv.URL())
	<-ctx.Done()
	srv.Close()
	return exitOK
}

// stringList is a repeatable string flag.
type stringList []string

func (l *stringList) String() string     { return strings.Join(*l, ",") }
func (l *stringList) Set(v string) error { *l = append(*l, v); return nil }

// splitList splits a comma-separated flag value, dropping empty items.
func splitList(s string) []string {
	var out []string
	for _, m := range strings.Split(s, ",") {
		if m = strings.TrimSpace(m); m != "" {
			out = append(out, m)
		}
	}
	return out
}
