package main

import (
	"context"
	"fmt"
	"log/slog"
	"strings"

	"github.com/omnisat/omnisat/agent"
	"github.com/omnisat/omnisat/devices"
	"github.com/omnisat/omnisat/devices/audio"
	"github.com/omnisat/omnisat/pipeline/aec"
	"github.com/omnisat/omnisat/realtime"
)

// resolveAudio picks what "auto" stands for: the default device of that direction if PortAudio
// has one, else the fallback; it says why.
func resolveAudio(spec, fallback string, input bool) (string, string) {
	if spec != "auto" {
		return spec, ""
	}
	devs, err := audio.List()
	if err != nil {
		return fallback, "no audio devices: " + err.Error()
	}
	for _, d := range devs {
		if (input && d.DefaultInput && d.MaxInputChannels > 0) || (!input && d.DefaultOutput && d.MaxOutputChannels > 0) {
			return "default", fmt.Sprintf("found %q", d.Name)
		}
	}
	return fallback, "no default device"
}

// cleanConfig is the microphone's echo cancellation, noise suppression and gain from the
// audio section; echo is what the speaker played.
func cleanConfig(c devices.AudioConfig, echo *audio.EchoReference) audio.CleanConfig {
	return audio.CleanConfig{Echo: audio.EchoMode(c.EchoMode()), Reference: echo, Delay: c.AEC.Delay, MuteHangover: c.MuteHangover,
		Processor: aec.Config{FilterLength: c.AEC.FilterLength, EchoSuppressDB: c.AEC.EchoSuppressDB,
			EchoSuppressActiveDB: c.AEC.EchoSuppressActiveDB, Denoise: *c.NoiseSuppression.Enabled,
			NoiseSuppressDB: c.NoiseSuppression.LevelDB, AGC: c.AGC.Enabled, AGCLevel: c.AGC.LevelDBFS, AGCMaxGainDB: c.AGC.MaxGainDB}}
}

// portAudioSpec reports whether an audio device string names a PortAudio device: not a WAV
// file, not "none", and not an unset fallback.
func portAudioSpec(spec string) bool {
	return spec != "" && !strings.HasPrefix(spec, "file:") && spec != "none"
}

// openMicrophone opens the input; echo carries what the speaker plays to its echo canceller.
func openMicrophone(ctx context.Context, c devices.AudioConfig, echo *audio.EchoReference, report *deviceReporter, log *slog.Logger) (agent.AudioSource, string, func() error, error) {
	spec, why := resolveAudio(c.Input, c.InputFallback, true)
	desc := "microphone " + spec
	if why != "" {
		desc += " (auto: " + why + ")"
	}
	if path, ok := strings.CutPrefix(spec, "file:"); ok {
		src, err := devices.OpenWAVSource(path, realtime.InputSampleRate, c.Loop, 1)
		if err != nil {
			return nil, "", nil, fmt.Errorf("audio.input: %w", err)
		}
		src.SetPeriod(c.InputLatency) // blocks as a device with that buffer delivers them
		return src, desc, nil, nil
	}
	mic, err := audio.OpenMicrophone(ctx, audio.MicConfig{Device: spec, Rate: c.InputRate, Channels: c.InputChannels,
		Channel: c.Channel(), GainDB: c.GainDB, Latency: c.InputLatency, Clean: cleanConfig(c, echo)},
		func(ok bool, err error) { report.state("microphone", ok, err) }, log.With("component", "microphone"))
	if err != nil {
		return nil, "", nil, fmt.Errorf("audio.input: %w", err)
	}
	return mic, fmt.Sprintf("%s (%s, %d Hz, echo %s)", desc, mic.Name(), mic.Rate(), c.EchoMode()), mic.Close, nil
}

// volumeSetter is a speaker whose volume can change live.
type volumeSetter interface{ SetVolume(int) }

// openSpeaker opens the output; a PortAudio speaker hands what it plays to echo.
func openSpeaker(ctx context.Context, c devices.AudioConfig, echo *audio.EchoReference, report *deviceReporter, log *slog.Logger) (agent.Speaker, string, func() error, error) {
	spec, why := resolveAudio(c.Output, c.OutputFallback, false)
	desc := "speaker " + spec
	if why != "" {
		desc += " (auto: " + why + ")"
	}
	if path, ok := strings.CutPrefix(spec, "file:"); ok || spec == "none" {
		if !ok {
			path = "" // none: a clock that plays into nothing, no file
		}
		spk := devices.NewFileSpeaker(path, realtime.OutputSampleRate)
		if err := spk.Err(); err != nil {
			return nil, "", nil, fmt.Errorf("audio.output: %w", err)
		}
		return spk, desc, spk.Close, nil
	}
	spk, err := audio.OpenSpeaker(ctx, audio.SpeakerConfig{Device: spec, Rate: c.OutputRate, Volume: *c.Volume, Latency: c.OutputLatency, Echo: echo,
		RestAfter: c.OutputRest},
		func(ok bool, err error) { report.state("speaker", ok, err) }, log.With("component", "speaker"))
	if err != nil {
		return nil, "", nil, fmt.Errorf("audio.output: %w", err)
	}
	spk.SetJitterBuffer(*c.JitterBuffer)
	return spk, fmt.Sprintf("%s (%s, %d Hz)", desc, spk.Name(), spk.Rate()), spk.Close, nil
}
