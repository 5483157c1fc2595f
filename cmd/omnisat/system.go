package main

import (
	"context"
	"fmt"
	"log/slog"
	"path/filepath"
	"time"

	"github.com/omnisat/omnisat/agent"
	"github.com/omnisat/omnisat/devices"
	"github.com/omnisat/omnisat/devices/audio"
	"github.com/omnisat/omnisat/realtime"
	"github.com/omnisat/omnisat/satellite"
)

// systemConfig is the wiring: how the satellite is built from the file — what each device part
// is opened from (and compared by, so that a reload hands over what did not change), and the
// agent's, MQTT's and the control socket's settings. Secrets and reference voices are read here.
func systemConfig(cfg *fileConfig, env *cliEnv, log *slog.Logger) (satellite.Config, error) {
	server := cfg.Server.Config()
	token, err := readSecret(cfg.Server.Token, cfg.Server.TokenFile)
	if err != nil {
		return satellite.Config{}, fmt.Errorf("server.token_file: %w", err)
	}
	server.Token = token
	for _, ref := range []struct {
		key, path string
		dst       *[]float32
	}{{"server.ref_audio", cfg.Server.RefAudio, &server.Init.RefAudio}, {"server.tts_ref_audio", cfg.Server.TTSRefAudio, &server.Init.TTSRefAudio}} {
		if ref.path == "" {
			continue
		}
		if *ref.dst, err = readVoice(ref.path); err != nil {
			return satellite.Config{}, fmt.Errorf("%s: %w", ref.key, err)
		}
	}
	var chat *realtime.Config
	if cfg.Server.ChatURL != "" {
		c := server
		c.URL = cfg.Server.ChatURL
		c.Dialect = realtime.DialectCurrent
		chat = &c
	}
	audioCfg := cfg.Audio
	if audioCfg.InputLatency == 0 {
		// A file microphone without input_latency hands over a chunk at a time; OpenVoice's
		// small frames come as a device's 100 ms blocks do.
		audioCfg.InputLatency = cfg.Session.Chunk
		if server.AudioFrameSamples() > 0 {
			audioCfg.InputLatency = devices.DefaultInputLatency
		}
	}
	// A sample reaches the agent up to the input buffer after its capture, plus, from a
	// device, up to the half second the echo canceller waits for a late speaker: mute and stop
	// are judged by capture time within that.
	audioHold := audioCfg.InputLatency
	if !audioCfg.FileInput() {
		audioHold += 500 * time.Millisecond
	}
	volume := *audioCfg.Volume
	// The volume changes live: it is not part of what the devices are opened from.
	audioKey := audioCfg
	audioKey.Volume = nil
	return satellite.Config{
		Audio: satellite.Part[satellite.Audio]{Key: audioKey, Holds: audioHolds(audioCfg), Reports: []string{"microphone", "speaker"},
			Open: func(ctx context.Context) (satellite.Opened[satellite.Audio], error) {
				return openAudio(ctx, audioCfg, log)
			}},
		Camera: satellite.Part[agent.FrameSource]{Key: cfg.Camera, Holds: cameraHolds(cfg.Camera), Reports: []string{"camera"},
			Open: func(ctx context.Context) (satellite.Opened[agent.FrameSource], error) {
				report := &deviceReporter{}
				frames, desc, closeCam, err := openCamera(ctx, cfg.Camera, report, log)
				return satellite.Opened[agent.FrameSource]{Device: frames, Describe: desc, Close: closeCam, Attach: report.attach}, err
			}},
		Agent: agent.Options{Config: cfg.Session, Server: server, ChatServer: chat, Volume: &volume,
			AudioHold:    audioHold,
			SettingsFile: filepath.Join(cfg.StateDir, settingsFile), Voices: voicesIn(filepath.Join(cfg.StateDir, voicesDir))},
		MQTT:          satellite.MQTT{Config: cfg.MQTT, DeviceID: cfg.DeviceID, Version: version},
		ControlSocket: cfg.socketPath(),
		Console:       env.stdout,
		Stamp:         !env.journal,
		Banner: func(devices string) string {
			return fmt.Sprintf("omnisat %s: %s, %s/%s at %s; control socket %s", version, devices,
				cfg.Server.Dialect, cfg.Server.Mode, cfg.Server.URL, cfg.socketPath())
		},
		Log: log,
	}, nil
}

// openAudio opens the microphone and the speaker; what the speaker plays reaches the
// microphone's echo canceller through their shared echo reference.
func openAudio(ctx context.Context, c devices.AudioConfig, log *slog.Logger) (satellite.Opened[satellite.Audio], error) {
	report := &deviceReporter{}
	echo := audio.NewEchoReference()
	mic, micDesc, closeMic, err := openMicrophone(ctx, c, echo, report, log)
	if err != nil {
		return satellite.Opened[satellite.Audio]{}, err
	}
	spk, spkDesc, closeSpk, err := openSpeaker(ctx, c, echo, report, log)
	if err != nil {
		if closeMic != nil {
			closeMic()
		}
		return satellite.Opened[satellite.Audio]{}, err
	}
	return satellite.Opened[satellite.Audio]{Device: satellite.Audio{Microphone: mic, Speaker: spk}, Describe: micDesc + ", " + spkDesc,
		Close: func() error {
			err := closeSpk()
			if closeMic != nil {
				err = closeMic()
			}
			return err
		},
		Attach: report.attach}, nil
}

// audioHolds names the PortAudio devices the audio section opens, by PortAudio's name for them
// (two specs, "USB" and "2", may be one device).
func audioHolds(c devices.AudioConfig) []string {
	var holds []string
	var list []audio.DeviceInfo
	for _, d := range []struct {
		spec, fallback string
		input          bool
	}{{c.Input, c.InputFallback, true}, {c.Output, c.OutputFallback, false}} {
		spec, _ := resolveAudio(d.spec, d.fallback, d.input)
		if !portAudioSpec(spec) {
			continue
		}
		if list == nil {
			list, _ = audio.List()
		}
		if dev, err := audio.Select(list, spec, d.input); err == nil {
			spec = dev.Name
		}
		holds = append(holds, "audio:"+spec)
	}
	return holds
}

// cameraHolds names the V4L2 device the camera section opens, by its real path.
func cameraHolds(c cameraSection) []string {
	src, _ := resolveCamera(c)
	src, ok := videoNode(src)
	if !ok {
		return nil
	}
	if real, err := filepath.EvalSymlinks(src); err == nil {
		src = real
	}
	return []string{"camera:" + src}
}
