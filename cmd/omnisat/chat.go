package main

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/omnisat/omnisat/devices/wav"
	"github.com/omnisat/omnisat/realtime"
)

// Flags that only one kind of server takes: chat requests (MiniCPM-o, current dialect) and
// OpenVoice text to speech.
var (
	chatOnlyFlags = []string{"system", "image", "user", "assistant", "messages", "no-stream", "max-new-tokens", "thinking",
		"length-penalty", "image-max-slice-nums", "omni-mode", "use-tts-template", "ref-audio"}
	openVoiceOnlyFlags = []string{"model", "tts-model", "language", "voice", "tts-rate", "speed"}
)

func runChat(ctx context.Context, env *cliEnv, args []string) int {
	fs := newFlagSet("chat", env, `["text"]`)
	server := fs.String("server", env.getenv("OMNISAT_SERVER"), "realtime endpoint, e.g. ws://127.0.0.1:8765/v1/realtime (env OMNISAT_SERVER)")
	dialect := fs.String("dialect", "current", "server dialect: current (chat mode) or openvoice (text to speech); legacy has no chat mode")
	system := fs.String("system", "", "system prompt sent before the conversation")
	var images stringList
	fs.Var(&images, "image", "attach a JPEG or PNG image to the question (repeatable)")
	var turns turnList
	fs.Var(turns.as("user"), "user", "an earlier user message of the conversation (repeatable, in order with --assistant)")
	fs.Var(turns.as("assistant"), "assistant", "an earlier answer of the assistant (repeatable, in order with --user)")
	messages := fs.String("messages", "", `a JSON file of the conversation: [{"role":"system|user|assistant","content":"text" or [{"type":"text","text":...},{"type":"image","path":"x.jpg"}]}]; the text, if given, follows it as the question`)
	ttsOut := fs.String("tts-out", "", "ask for speech and write it to this WAV file")
	refAudio := fs.String("ref-audio", "", "a WAV file of the voice to speak in (with --tts-out)")
	noStream := fs.Bool("no-stream", false, "ask for the whole reply at once instead of streamed deltas")
	maxTokens := fs.Int("max-new-tokens", 0, "generation length limit (0: server default)")
	lengthPenalty := fs.Float64("length-penalty", 0, "generation length penalty, e.g. 1.1 (unset: server default)")
	sliceNums := fs.Int("image-max-slice-nums", 0, "image slicing, 1..9 (unset: server default)")
	omni := fs.Bool("omni-mode", false, "ask for omni mode")
	ttsTemplate := fs.Bool("use-tts-template", false, "use the TTS prompt template")
	thinking := fs.Bool("thinking", false, "enable thinking")
	model := fs.String("model", "", "OpenVoice STT model id (the server's required model parameter)")
	ttsModel := fs.String("tts-model", "", "OpenVoice TTS model (model_tts; unset: the server's default)")
	language := fs.String("language", "", "OpenVoice language, ISO 639-1")
	voice := fs.String("voice", "", "OpenVoice voice id")
	ttsRate := fs.Int("tts-rate", 0, "OpenVoice: the rate of its TTS audio, which the WAV is written at (default 24000)")
	speed := fs.Float64("speed", 0, "OpenVoice speech speed, 0.25..4 (unset: 1)")
	timeout := fs.Duration("timeout", 2*time.Minute, "give up after this long, queue wait included")
	if code, done := parseFlags(fs, args); done {
		return code
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	text := strings.TrimSpace(strings.Join(fs.Args(), " "))
	fail := func(code int, format string, a ...any) int {
		fmt.Fprintf(env.stderr, "omnisat chat: "+format+"\n", a...)
		return code
	}
	openVoice := *dialect == string(realtime.DialectOpenVoice)
	switch {
	case text == "" && (*messages == "" || openVoice):
		fs.Usage()
		return fail(exitUsage, "no text to send")
	case *server == "":
		return fail(exitUsage, "no server: give --server ws://host:port/v1/realtime (or set OMNISAT_SERVER)")
	case *dialect == string(realtime.DialectLegacy):
		return fail(exitUsage, "the legacy dialect has no chat mode; use --dialect current or openvoice")
	case *dialect != string(realtime.DialectCurrent) && !openVoice:
		return fail(exitUsage, "--dialect %q is not one of current, openvoice", *dialect)
	case *timeout <= 0:
		return fail(exitUsage, "--timeout must be positive")
	case set["length-penalty"] && *lengthPenalty <= 0:
		return fail(exitUsage, "--length-penalty must be positive")
	case set["image-max-slice-nums"] && (*sliceNums < 1 || *sliceNums > 9):
		return fail(exitUsage, "--image-max-slice-nums must be 1..9")
	case *refAudio != "" && *ttsOut == "":
		return fail(exitUsage, "--ref-audio needs --tts-out: it is the voice the reply is spoken in")
	}
	for _, name := range chatOnlyFlags {
		if openVoice && set[name] {
			return fail(exitUsage, "--%s does not apply to an OpenVoice server, which only speaks text", name)
		}
	}
	for _, name := range openVoiceOnlyFlags {
		if !openVoice && set[name] {
			return fail(exitUsage, "--%s applies to --dialect openvoice only", name)
		}
	}

	cfg := realtime.Config{
		URL:     *server,
		Dialect: realtime.Dialect(*dialect),
		Mode:    realtime.ModeChat,
		Model:   *model,
		Token:   env.getenv("OMNISAT_TOKEN"),
		Init:    realtime.Init{TTSModel: *ttsModel, Language: *language},
		OnQueue: func(q realtime.QueueStatus) {
			if !q.Done {
				fmt.Fprintf(env.stderr, "omnisat chat: queued at position %d of %d (about %v)\n", q.Position, q.Length, q.EstimatedWait.Round(time.Second))
			}
		},
		OpenVoiceTTSRate: *ttsRate,
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
	if openVoice {
		reply, err = realtime.Synthesize(ctx, cfg, realtime.Speech{Text: text, Voice: *voice, Speed: *speed}, printDelta)
	} else {
		req := realtime.ChatRequest{Stream: !*noStream, MaxNewTokens: *maxTokens, LengthPenalty: *lengthPenalty,
			ImageMaxSliceNums: *sliceNums, OmniMode: *omni, UseTTSTemplate: *ttsTemplate, TTS: *ttsOut != "", EnableThinking: *thinking}
		code, msgs, cerr := conversation(*system, *messages, turns, text, images)
		if cerr != nil {
			return fail(code, "%v", cerr)
		}
		req.Messages = msgs
		if *refAudio != "" {
			if req.TTSRefAudio, err = readVoice(*refAudio); err != nil {
				return fail(exitFailure, "%v", err)
			}
		}
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
	case openVoice:
		fmt.Fprintf(env.stderr, "omnisat chat: spoke %.2f s of audio\n", float64(len(reply.Audio))/float64(reply.SampleRate))
	case !streamed:
		fmt.Fprint(env.stdout, reply.Text)
	}
	if !openVoice {
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

// turnList collects --user and --assistant in the order given.
type turnList []realtime.ChatMessage

// as returns the flag value that adds messages of role.
func (l *turnList) as(role string) flag.Value { return turnFlag{l, role} }

type turnFlag struct {
	l    *turnList
	role string
}

func (f turnFlag) String() string { return "" }
func (f turnFlag) Set(v string) error {
	*f.l = append(*f.l, realtime.ChatMessage{Role: f.role, Text: v})
	return nil
}

// conversation assembles the request's messages: the system prompt, the messages file, the
// --user/--assistant turns, then the question with its images. It must end with a user message.
// On failure code says whether a file could not be read (exitFailure) or the input is wrong.
func conversation(system, file string, turns turnList, text string, images []string) (int, []realtime.ChatMessage, error) {
	var msgs []realtime.ChatMessage
	if system != "" {
		msgs = append(msgs, realtime.ChatMessage{Role: "system", Text: system})
	}
	if file != "" {
		fromFile, code, err := readMessages(file)
		if err != nil {
			return code, nil, err
		}
		msgs = append(msgs, fromFile...)
	}
	msgs = append(msgs, turns...)
	if text != "" {
		msgs = append(msgs, realtime.ChatMessage{Role: "user", Text: text})
	}
	if len(msgs) == 0 || msgs[len(msgs)-1].Role != "user" {
		return exitUsage, nil, errors.New("the conversation must end with a user message (the question)")
	}
	for _, path := range images {
		img, err := os.ReadFile(path)
		if err != nil {
			return exitFailure, nil, fmt.Errorf("read image: %w", err)
		}
		msgs[len(msgs)-1].Images = append(msgs[len(msgs)-1].Images, img)
	}
	return exitOK, msgs, nil
}

// readMessages reads a conversation file. Image parts name a file (path, relative to the
// conversation file) or carry it (data, standard base64).
func readMessages(path string) ([]realtime.ChatMessage, int, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, exitFailure, fmt.Errorf("read messages: %w", err)
	}
	var raw []struct {
		Role    string          `json:"role"`
		Content json.RawMessage `json:"content"`
	}
	if err := json.Unmarshal(b, &raw); err != nil {
		return nil, exitUsage, fmt.Errorf("messages file %s: %v (want a JSON array of {role, content})", path, err)
	}
	bad := func(i int, format string, a ...any) ([]realtime.ChatMessage, int, error) {
		return nil, exitUsage, fmt.Errorf("messages file %s: message %d: %s", path, i, fmt.Sprintf(format, a...))
	}
	var msgs []realtime.ChatMessage
	for i, m := range raw {
		switch m.Role {
		case "system", "user", "assistant":
		default:
			return bad(i, "role %q is not system, user or assistant", m.Role)
		}
		msg := realtime.ChatMessage{Role: m.Role}
		var parts []struct {
			Type, Text, Path, Data string
		}
		switch {
		case json.Unmarshal(m.Content, &msg.Text) == nil:
		case json.Unmarshal(m.Content, &parts) == nil:
			var texts []string
			for j, p := range parts {
				switch {
				case p.Type == "text":
					texts = append(texts, p.Text)
				case p.Type == "image" && p.Path != "":
					if !filepath.IsAbs(p.Path) {
						p.Path = filepath.Join(filepath.Dir(path), p.Path)
					}
					img, err := os.ReadFile(p.Path)
					if err != nil {
						return nil, exitFailure, fmt.Errorf("messages file %s: message %d: read image: %w", path, i, err)
					}
					msg.Images = append(msg.Images, img)
				case p.Type == "image":
					img, err := base64.StdEncoding.DecodeString(p.Data)
					if err != nil || len(img) == 0 {
						return bad(i, "part %d: an image needs a path or standard base64 data", j)
					}
					msg.Images = append(msg.Images, img)
				default:
					return bad(i, "part %d: type %q is not text or image", j, p.Type)
				}
			}
			msg.Text = strings.Join(texts, "\n")
		default:
			return bad(i, "content must be a string or a list of parts")
		}
		msgs = append(msgs, msg)
	}
	return msgs, exitOK, nil
}
