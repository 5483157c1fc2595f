package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/omnisat/omnisat/devices/wav"
	"github.com/omnisat/omnisat/realtime"
)

func runChat(ctx context.Context, env *cliEnv, args []string) int {
	fs := newFlagSet("chat", env, `"text"`)
	server := fs.String("server", env.getenv("OMNISAT_SERVER"), "realtime endpoint, e.g. ws://127.0.0.1:8765/v1/realtime (env OMNISAT_SERVER)")
	dialect := fs.String("dialect", "current", "server dialect: current (chat mode) or openvoice (text to speech); legacy has no chat mode")
	model := fs.String("model", "", "OpenVoice STT model id (the server's required model parameter)")
	system := fs.String("system", "", "system prompt sent before the text")
	var images stringList
	fs.Var(&images, "image", "attach a JPEG or PNG image (repeatable)")
	ttsOut := fs.String("tts-out", "", "ask for speech and write it to this WAV file")
	voice := fs.String("voice", "", "OpenVoice voice id")
	noStream := fs.Bool("no-stream", false, "ask for the whole reply at once instead of streamed deltas")
	maxTokens := fs.Int("max-new-tokens", 0, "generation length limit (0: server default)")
	thinking := fs.Bool("thinking", false, "enable thinking")
	timeout := fs.Duration("timeout", 2*time.Minute, "give up after this long, queue wait included")
	if code, done := parseFlags(fs, args); done {
		return code
	}
	text := strings.TrimSpace(strings.Join(fs.Args(), " "))
	fail := func(code int, format string, a ...any) int {
		fmt.Fprintf(env.stderr, "omnisat chat: "+format+"\n", a...)
		return code
	}
	switch {
	case text == "":
		fs.Usage()
		return fail(exitUsage, "no text to send")
	case *server == "":
		return fail(exitUsage, "no server: give --server ws://host:port/v1/realtime (or set OMNISAT_SERVER)")
	case *dialect == string(realtime.DialectLegacy):
		return fail(exitUsage, "the legacy dialect has no chat mode; use --dialect current or openvoice")
	case *dialect != string(realtime.DialectCurrent) && *dialect != string(realtime.DialectOpenVoice):
		return fail(exitUsage, "--dialect %q is not one of current, openvoice", *dialect)
	case *timeout <= 0:
		return fail(exitUsage, "--timeout must be positive")
	}

	cfg := realtime.Config{
		URL:     *server,
		Dialect: realtime.Dialect(*dialect),
		Mode:    realtime.ModeChat,
		Model:   *model,
		Token:   env.getenv("OMNISAT_TOKEN"),
		OnQueue: func(q realtime.QueueStatus) {
			if !q.Done {
				fmt.Fprintf(env.stderr, "omnisat chat: queued at position %d of %d (about %v)\n", q.Position, q.Length, q.EstimatedWait.Round(time.Second))
			}
		},
	}
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()

	var reply *realtime.Reply
	var err error
	streamed := false
	printDelta := func(ev realtime.Event) {
		if d, ok := ev.(realtime.TextDelta); ok {
			streamed = true
			fmt.Fprint(env.stdout, d.Text)
		}
		if e, ok := ev.(realtime.ErrorEvent); ok {
			fmt.Fprintf(env.stderr, "omnisat chat: warning: %v\n", e.Err)
		}
	}
	if cfg.Dialect == realtime.DialectOpenVoice {
		if len(images) > 0 || *system != "" {
			return fail(exitUsage, "an OpenVoice server only speaks text: --image and --system do not apply")
		}
		reply, err = realtime.Synthesize(ctx, cfg, realtime.Speech{Text: text, Voice: *voice}, printDelta)
	} else {
		req := realtime.ChatRequest{Stream: !*noStream, MaxNewTokens: *maxTokens, TTS: *ttsOut != "", EnableThinking: *thinking}
		if *system != "" {
			req.Messages = append(req.Messages, realtime.ChatMessage{Role: "system", Text: *system})
		}
		user := realtime.ChatMessage{Role: "user", Text: text}
		for _, path := range images {
			img, rerr := os.ReadFile(path)
			if rerr != nil {
				return fail(exitFailure, "read image: %v", rerr)
			}
			user.Images = append(user.Images, img)
		}
		req.Messages = append(req.Messages, user)
		reply, err = realtime.Chat(ctx, cfg, req, printDelta)
	}
	if err != nil {
		if streamed {
			fmt.Fprintln(env.stdout)
		}
		code := exitFailure
		if realtime.ClassOf(err) == realtime.ClassConfig {
			code = exitConfig
		}
		if errors.Is(err, context.DeadlineExceeded) {
			return fail(code, "no complete reply within %v: %v", *timeout, err)
		}
		return fail(code, "%v", err)
	}
	switch {
	case cfg.Dialect == realtime.DialectOpenVoice:
		fmt.Fprintf(env.stderr, "omnisat chat: spoke %.2f s of audio\n", float64(len(reply.Audio))/float64(reply.SampleRate))
	case !streamed:
		fmt.Fprint(env.stdout, reply.Text)
	}
	if cfg.Dialect != realtime.DialectOpenVoice {
		fmt.Fprintln(env.stdout)
	}
	if *ttsOut != "" {
		if len(reply.Audio) == 0 {
			return fail(exitFailure, "the server sent no speech for --tts-out")
		}
		if err := wav.WriteFile(*ttsOut, wav.Audio{Rate: reply.SampleRate, Channels: 1, Samples: reply.Audio}); err != nil {
			return fail(exitFailure, "%v", err)
		}
		fmt.Fprintf(env.stderr, "omnisat chat: wrote %.2f s of speech to %s\n", float64(len(reply.Audio))/float64(reply.SampleRate), *ttsOut)
	}
	return exitOK
}
