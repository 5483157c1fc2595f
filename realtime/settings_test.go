package realtime

import (
	"strings"
	"testing"
	"time"
)

func TestSettingsPhaseDeadlines(t *testing.T) {
	base := Settings{URL: "ws://h/v1/realtime"}
	if err := base.Validate(); err != nil {
		t.Fatalf("defaults: %v", err)
	}
	if c := base.Config(); c.InitTimeout != 20*time.Second || c.CloseTimeout != 2*time.Second {
		t.Fatalf("defaults: init %v close %v", c.InitTimeout, c.CloseTimeout)
	}
	for _, tt := range []struct {
		init, close time.Duration
		want        string
	}{
		{init: time.Second, close: 100 * time.Millisecond},
		{init: 5 * time.Minute, close: time.Minute},
		{init: 999 * time.Millisecond, want: "server.init_timeout: 999ms is outside 1s..5m0s"},
		{init: time.Hour, want: "server.init_timeout: 1h0m0s is outside"},
		{init: -time.Second, want: "server.init_timeout: -1s is negative"},
		{close: time.Millisecond, want: "server.close_timeout: 1ms is outside 100ms..1m0s"},
		{close: 2 * time.Minute, want: "server.close_timeout: 2m0s is outside"},
	} {
		s := base
		s.InitTimeout, s.CloseTimeout = tt.init, tt.close
		err := s.Validate()
		if tt.want == "" && err != nil || tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want) || strings.Count(err.Error(), "\n") > 0) {
			t.Errorf("init %v close %v: %v, want %q", tt.init, tt.close, err, tt.want)
		}
		if tt.want == "" && (s.Config().InitTimeout != tt.init || s.Config().CloseTimeout != tt.close) {
			t.Errorf("init %v close %v not passed on: %+v", tt.init, tt.close, s.Config())
		}
	}
}

// The OpenVoice settings keep their configuration keys and reach the wire's names; each has a
// range, checked under its key.
func TestSettingsOpenVoice(t *testing.T) {
	itn := false
	s := Settings{URL: "ws://h/v1/realtime", Dialect: DialectOpenVoice, Model: "fw", VADSensitivity: "low", TTSModel: "kokoro-v1",
		SilenceTimeout: 3 * time.Second, HoldTimeout: 20 * time.Minute, EnableITN: &itn, AudioFrame: 20 * time.Millisecond, TTSRate: 22050}
	if err := s.Validate(); err != nil {
		t.Fatal(err)
	}
	c := s.Config()
	if c.OpenVoiceFrame != 20*time.Millisecond || c.OpenVoiceTTSRate != 22050 || c.Init.SilenceTimeout != 3*time.Second ||
		c.Init.HoldTimeout != 20*time.Minute || c.Init.EnableITN != &itn || c.Init.TTSModel != "kokoro-v1" {
		t.Fatalf("config %+v", c)
	}
	if d := (Settings{URL: "ws://h"}).Config().OpenVoiceFrame; d != 40*time.Millisecond {
		t.Fatalf("default audio frame %v, want the server's own client's 40ms", d)
	}
	for _, tt := range []struct {
		mod  func(*Settings)
		want string
	}{
		{func(s *Settings) { s.AudioFrame = 250 * time.Millisecond }, "server.audio_frame: 250ms is outside 20ms..100ms"},
		{func(s *Settings) { s.AudioFrame = 10 * time.Millisecond }, "server.audio_frame: 10ms is outside"},
		{func(s *Settings) { s.SilenceTimeout = 500 * time.Millisecond }, "server.silence_timeout: 500ms is outside 1s..10m0s"},
		{func(s *Settings) { s.HoldTimeout = 2 * time.Hour }, "server.hold_timeout: 2h0m0s is outside 1s..1h0m0s"},
		{func(s *Settings) { s.VADSensitivity = "max" }, `server.vad_sensitivity: "max"`},
	} {
		bad := s
		tt.mod(&bad)
		if err := bad.Validate(); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("want %q, got %v", tt.want, err)
		}
	}
}
