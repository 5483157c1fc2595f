package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/omnisat/omnisat/devices/wav"
	"github.com/omnisat/omnisat/realtime/realtimetest"
)

func noRejections(t *testing.T, srv *realtimetest.Server) {
	t.Helper()
	for _, rec := range srv.Sessions() {
		if len(rec.Rejections) > 0 {
			t.Errorf("simulator rejected: %v", rec.Rejections)
		}
	}
}

func lastChat(t *testing.T, srv *realtimetest.Server) realtimetest.ChatRecord {
	t.Helper()
	recs := srv.Sessions()
	if len(recs) == 0 || len(recs[len(recs)-1].ChatRequests) != 1 {
		t.Fatalf("no chat request recorded")
	}
	return recs[len(recs)-1].ChatRequests[0]
}

func roles(msgs []realtimetest.ChatMessage) string {
	var r []string
	for _, m := range msgs {
		r = append(r, m.Role)
	}
	return strings.Join(r, ",")
}

// The chat command takes the document's options and a conversation, not only one question.
func TestChatOptionsAndTurns(t *testing.T) {
	srv := realtimetest.NewServer(realtimetest.Options{})
	defer srv.Close()
	dir := t.TempDir()
	img := filepath.Join(dir, "x.jpg")
	os.WriteFile(img, tinyJPEG(t), 0o644)

	code, out, stderr := runCLI(t, "chat", "--server", srv.URL(), "--system", "be terse", "--user", "My name is Ada.",
		"--assistant", "Hello Ada.", "--length-penalty", "1.1", "--image-max-slice-nums", "2", "--omni-mode",
		"--use-tts-template", "--image", img, "Reply with exactly: Ada")
	if code != 0 || out != "Ada\n" {
		t.Fatalf("exit %d out %q err %q", code, out, stderr)
	}
	q := lastChat(t, srv)
	if roles(q.Messages) != "system,user,assistant,user" || q.Messages[2].Text != "Hello Ada." || len(q.Messages[3].Images) != 1 ||
		q.Generation["length_penalty"] != 1.1 || q.MaxSliceNums != 2 || !q.OmniMode || !q.UseTTSTemplate {
		t.Fatalf("request %+v", q)
	}

	// A conversation from a JSON file; its last user message is the question.
	conv := filepath.Join(dir, "conv.json")
	os.WriteFile(conv, []byte(`[{"role":"system","content":"You are a kiosk."},
		{"role":"user","content":[{"type":"text","text":"What is this?"},{"type":"image","path":"x.jpg"}]},
		{"role":"assistant","content":"A square."},
		{"role":"user","content":"Reply with exactly: a square"}]`), 0o644)
	code, out, stderr = runCLI(t, "chat", "--server", srv.URL(), "--messages", conv)
	if code != 0 || out != "a square\n" {
		t.Fatalf("messages file: exit %d out %q err %q", code, out, stderr)
	}
	if q := lastChat(t, srv); roles(q.Messages) != "system,user,assistant,user" || len(q.Messages[1].Images) != 1 {
		t.Fatalf("request %+v", q)
	}

	// A reference voice for the speech: a WAV at any rate, sent as 16 kHz float32.
	voice := filepath.Join(dir, "voice.wav")
	if err := wav.WriteFile(voice, wav.Audio{Rate: 24000, Channels: 1, Samples: make([]float32, 24000)}); err != nil {
		t.Fatal(err)
	}
	code, _, stderr = runCLI(t, "chat", "--server", srv.URL(), "--ref-audio", voice, "--tts-out", filepath.Join(dir, "r.wav"), "Reply with exactly: hi")
	if q := lastChat(t, srv); code != 0 || !q.TTS || q.TTSRefAudioSamples != 16000 {
		t.Fatalf("ref audio: exit %d %s, request %+v", code, stderr, q)
	}
	noRejections(t, srv)
}

// --dialect openvoice sends the OpenVoice settings: TTS model, language, voice, and the rate the
// speech is written at.
func TestChatOpenVoiceSettings(t *testing.T) {
	srv := realtimetest.NewServer(realtimetest.Options{Dialect: realtimetest.OpenVoice, OpenVoiceTTSRate: 22050})
	defer srv.Close()
	out := filepath.Join(t.TempDir(), "speech.wav")
	code, _, stderr := runCLI(t, "chat", "--dialect", "openvoice", "--model", "m", "--server", srv.URL(), "--tts-model", "kokoro-v1",
		"--language", "pt", "--voice", "pf_dora", "--tts-rate", "22050", "--speed", "1.25", "--tts-out", out, "olá a todos")
	a, err := wav.ReadFile(out)
	if code != 0 || err != nil || a.Rate != 22050 || a.Frames() != 3*5512 {
		t.Fatalf("exit %d, %v, %d frames at %d Hz: %s", code, err, a.Frames(), a.Rate, stderr)
	}
	rec := srv.Sessions()[0]
	if rec.Init.TTSModel != "kokoro-v1" || rec.Language != "pt" || len(rec.TTSRequests) != 1 || rec.TTSRequests[0].Voice != "pf_dora" {
		t.Fatalf("init %+v language %q tts %+v", rec.Init, rec.Language, rec.TTSRequests)
	}
	noRejections(t, srv)
}

func TestChatUsage(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.json")
	os.WriteFile(bad, []byte(`[{"role":"user","content":5}]`), 0o644)
	ends := filepath.Join(dir, "ends.json")
	os.WriteFile(ends, []byte(`[{"role":"user","content":"hi"},{"role":"assistant","content":"hello"}]`), 0o644)
	for _, tt := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"--messages", bad}, exitUsage, "message 0: content must be a string or a list of parts"},
		{[]string{"--messages", ends}, exitUsage, "the conversation must end with a user message"},
		{[]string{"--messages", filepath.Join(dir, "none.json")}, exitFailure, "no such file"},
		{[]string{"--length-penalty", "-1", "hi"}, exitUsage, "--length-penalty must be positive"},
		{[]string{"--image-max-slice-nums", "12", "hi"}, exitUsage, "--image-max-slice-nums must be 1..9"},
		{[]string{"--ref-audio", "v.wav", "hi"}, exitUsage, "--ref-audio needs --tts-out"},
		{[]string{"--dialect", "openvoice", "--model", "m", "--omni-mode", "hi"}, exitUsage, "--omni-mode does not apply"},
		{[]string{"--tts-model", "k", "hi"}, exitUsage, "--tts-model applies to --dialect openvoice only"},
	} {
		code, _, stderr := runCLI(t, append([]string{"chat", "--server", "ws://127.0.0.1:1"}, tt.args...)...)
		if code != tt.code || !strings.Contains(stderr, tt.want) {
			t.Errorf("%v: exit %d, %q; want exit %d and %q", tt.args, code, stderr, tt.code, tt.want)
		}
	}
}
