package main

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/omnisat/omnisat/devices"
	"github.com/omnisat/omnisat/devices/audio"
	"github.com/omnisat/omnisat/devices/wav"
	"github.com/omnisat/omnisat/internal/yamlconf"
	"github.com/omnisat/omnisat/mqtt"
	"github.com/omnisat/omnisat/pipeline"
	"github.com/omnisat/omnisat/realtime"
)

// Limits of the files a configuration names besides itself: a secret is a line, a reference
// voice a few seconds (16 MiB is 80 s of 48 kHz stereo), a PEM file a few certificates.
const (
	maxSecretBytes = 64 << 10
	maxVoiceBytes  = 16 << 20
	maxPEMBytes    = 1 << 20
)

// loadAndCheck is loadConfig followed by checkResources: what `config check`, `run` and a
// reload use, so that they agree. Resource warnings join the file's.
func loadAndCheck(path string, o loadOptions) (*fileConfig, error) {
	c, err := loadConfig(path, o)
	if err != nil {
		return nil, err
	}
	return c, checkLoaded(path, c)
}

// loadAndHold is loadAndCheck for run and its reloads. When the configuration names PortAudio
// devices, PortAudio stays initialised from the check until release is called (once they are
// open): its initialisation probes every ALSA card and plugin, which is most of a start-up's
// CPU and loads a hundred libraries on a machine with the ALSA plugins installed, and the
// check, the device holds and the opening would otherwise each do it again.
func loadAndHold(path string, o loadOptions) (*fileConfig, func(), error) {
	c, err := loadConfig(path, o)
	if err != nil {
		return nil, nil, err
	}
	release := holdPortAudio(c.Audio)
	if err := checkLoaded(path, c); err != nil {
		release()
		return nil, nil, err
	}
	return c, release, nil
}

// holdPortAudio keeps PortAudio initialised until the returned function is called, when the
// audio section names a PortAudio device ("auto" lists them too). It declares the devices the
// section can open, fallbacks included, so that PortAudio's start-up probe leaves out the
// ALSA plugin devices none of them names (audio.Hold).
func holdPortAudio(a devices.AudioConfig) func() {
	if !portAudioSpec(a.Input) && !portAudioSpec(a.Output) {
		return func() {}
	}
	var specs []string
	for _, spec := range []string{a.Input, a.InputFallback, a.Output, a.OutputFallback} {
		if portAudioSpec(spec) {
			specs = append(specs, spec)
		}
	}
	if release, err := audio.Hold(specs...); err == nil {
		return release
	}
	return func() {} // the check reports why PortAudio cannot start
}

// checkLoaded runs checkResources on a loaded configuration; its warnings join the file's.
func checkLoaded(path string, c *fileConfig) error {
	warnings, err := checkResources(c)
	if err != nil {
		return &configError{path: path, err: err}
	}
	c.warnings = append(c.warnings, warnings...)
	return nil
}

// checkResources opens what the configuration names — secret, voice and TLS files, WAV and
// JPEG stand-ins, the folders it will write to, PortAudio devices, the camera's source —
// without starting anything, and joins one problem per key that `run` could not use. `config
// check`, `run` and a reload call it, so that `config check` fails where `run` would. The
// warnings are what run tolerates: a V4L2 camera that is not plugged in yet.
func checkResources(c *fileConfig) (warnings []string, err error) {
	var errs []error
	problem := func(key string, err error) {
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", key, err))
		}
	}
	mqttFiles := true // MQTT's files can be read: mqtt.New may parse them
	for _, s := range []struct{ key, path string }{{"server.token_file", c.Server.TokenFile}, {"mqtt.password_file", c.MQTT.PasswordFile}} {
		if s.path != "" {
			_, err := readSecret("", s.path)
			problem(s.key, err)
			mqttFiles = mqttFiles && (err == nil || s.key != "mqtt.password_file")
		}
	}
	for _, v := range []struct{ key, path string }{{"server.ref_audio", c.Server.RefAudio}, {"server.tts_ref_audio", c.Server.TTSRefAudio}} {
		if v.path != "" {
			problem(v.key, checkVoice(v.path))
		}
	}

	var portAudio []audio.DeviceInfo
	var listErr error
	listed := false
	for _, d := range []struct {
		key, spec, fallbackKey, fallback string
		input                            bool
	}{{"audio.input", c.Audio.Input, "audio.input_fallback", c.Audio.InputFallback, true},
		{"audio.output", c.Audio.Output, "audio.output_fallback", c.Audio.OutputFallback, false}} {
		key, spec := d.key, d.spec
		if spec == "auto" {
			key = d.fallbackKey
			if spec, _ = resolveAudio(spec, d.fallback, d.input); spec == "default" {
				key = d.key
			}
		}
		switch path, isFile := strings.CutPrefix(spec, "file:"); {
		case isFile && d.input:
			problem(key, checkWAV(path))
		case isFile:
			problem(key, checkWritableFile(path))
		case spec == "none":
		default:
			if !listed {
				portAudio, listErr = audio.List()
				listed = true
			}
			if listErr != nil {
				problem(key, listErr)
				continue
			}
			_, err := audio.Select(portAudio, spec, d.input)
			if err != nil && audio.LeftOut(spec) {
				err = fmt.Errorf("%w (%s)", err, audio.NotProbed)
			}
			problem(key, err)
		}
	}

	key := "camera.source"
	src, _ := resolveCamera(c.Camera)
	if c.Camera.Source == "auto" && src == c.Camera.Fallback {
		key = "camera.fallback"
	}
	warning, err := checkCamera(src, c.Camera.EncodeFPS)
	problem(key, err)
	if warning != "" {
		warnings = append(warnings, key+": "+warning)
	}

	problem("state_dir", checkWritableDir(c.StateDir))
	if c.Control.Socket != "" {
		problem("control.socket", checkWritableDir(filepath.Dir(c.Control.Socket)))
	}
	if c.MQTT.Enabled() {
		problem("mqtt.outbox.path", checkWritableDir(c.MQTT.Outbox.Path))
		for _, f := range []struct{ key, path string }{{"mqtt.tls.ca_file", c.MQTT.TLS.CAFile},
			{"mqtt.tls.cert_file", c.MQTT.TLS.CertFile}, {"mqtt.tls.key_file", c.MQTT.TLS.KeyFile}} {
			if f.path != "" {
				_, err := yamlconf.ReadFile(f.path, maxPEMBytes)
				problem(f.key, err)
				mqttFiles = mqttFiles && err == nil
			}
		}
		if mqttFiles {
			// Building a bridge reads the password and parses the certificates; it connects
			// only when run.
			_, err := mqtt.New(c.MQTT, c.DeviceID, version, nil, nil)
			errs = append(errs, yamlconf.Problems(err)...)
		}
	}
	return warnings, errors.Join(errs...)
}

// checkCamera says whether a camera source can be opened: a folder of JPEGs is read, a video
// file must be a readable file. A V4L2 node that is not there may still be plugged in: a
// warning, as run waits for it. Pipelines and URLs cannot be checked without opening them. A
// source other than a folder needs the camera program installed.
func checkCamera(src string, fps float64) (warning string, err error) {
	switch {
	case src == "none":
		return "", nil
	case strings.HasPrefix(src, "dir:"):
		_, err := devices.OpenJPEGDir(strings.TrimPrefix(src, "dir:"), fps)
		return "", err
	}
	// Any other source is opened by the camera program: the source first, then the program.
	warning, err = checkCameraSource(src)
	if err == nil {
		_, err = findCameraProgram()
	}
	return warning, err
}

// checkCameraSource checks a source the camera program opens: a file, a V4L2 node.
func checkCameraSource(src string) (warning string, err error) {
	if strings.HasPrefix(src, "file:") {
		f, _, err := yamlconf.OpenRegular(strings.TrimPrefix(src, "file:"))
		if err != nil {
			return "", err
		}
		return "", f.Close()
	}
	node, ok := videoNode(src)
	if !ok {
		return "", nil
	}
	info, err := os.Stat(node)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return fmt.Sprintf("%s does not exist now; run waits for the camera to be plugged in", node), nil
	case err != nil:
		return "", err
	case !isVideoDevice(info):
		return "", fmt.Errorf("%s is not a camera (not a video4linux device)", node)
	}
	return "", nil
}

// isVideoDevice says whether info is a video4linux character device (major number 81).
func isVideoDevice(info fs.FileInfo) bool {
	st, ok := info.Sys().(*syscall.Stat_t)
	return ok && info.Mode()&fs.ModeCharDevice != 0 && unix.Major(uint64(st.Rdev)) == v4l2Major
}

// v4l2Major is the character device major number of video4linux (Linux's devices.txt).
const v4l2Major = 81

// videoNode is the device node of a camera source that names one (an index or a /dev path).
func videoNode(src string) (string, bool) {
	if src != "" && strings.Trim(src, "0123456789") == "" {
		src = "/dev/video" + src
	}
	return src, strings.HasPrefix(src, "/dev/")
}

// checkWAV reads a WAV file as the microphone stand-in would.
func checkWAV(path string) error {
	f, _, err := yamlconf.OpenRegular(path)
	if err != nil {
		return err
	}
	defer f.Close()
	a, err := wav.Probe(bufio.NewReader(f)) // run decodes it; checking needs no samples
	if err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	if a.Frames == 0 {
		return fmt.Errorf("%s holds no samples", path)
	}
	return nil
}

// checkWritableFile says whether a file can be written at path (a WAV speaker's recording).
func checkWritableFile(path string) error {
	if info, err := os.Stat(path); err == nil && !info.Mode().IsRegular() {
		return fmt.Errorf("%s is %s, not a file to write", path, info.Mode().Type())
	}
	return checkWritableDir(filepath.Dir(path))
}

// checkWritableDir says whether files can be made in dir, creating it as run would: the
// nearest folder that exists must be a folder this process can write in. It writes and
// removes a probe file, which says more than permission bits (read-only mounts, ACLs).
func checkWritableDir(dir string) error {
	for p := dir; ; p = filepath.Dir(p) {
		info, err := os.Stat(p)
		if (errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ENOTDIR)) && filepath.Dir(p) != p {
			continue
		}
		if err != nil {
			return err
		}
		if !info.IsDir() {
			if p == dir {
				return fmt.Errorf("%s is a file, not a folder", dir)
			}
			return fmt.Errorf("%s cannot be made: %s is a file", dir, p)
		}
		probe, err := os.CreateTemp(p, ".omnisat-check-*")
		if err != nil {
			return fmt.Errorf("%s is not writable: %w", p, errors.Unwrap(err))
		}
		probe.Close()
		return os.Remove(probe.Name())
	}
}

// readVoice reads a reference voice WAV as 16 kHz mono.
func readVoice(path string) ([]float32, error) {
	b, err := yamlconf.ReadFile(path, maxVoiceBytes)
	if err != nil {
		return nil, fmt.Errorf("reference voice: %w", err)
	}
	a, err := wav.Decode(bytes.NewReader(b))
	if err != nil {
		return nil, fmt.Errorf("reference voice %s: %w", path, err)
	}
	samples, err := devices.Resample(a.Mono(), a.Rate, realtime.InputSampleRate)
	if err != nil {
		return nil, fmt.Errorf("reference voice %s: %w", path, err)
	}
	return samples, nil
}

// checkVoice fails where readVoice would, without decoding or resampling the samples: run
// reads the voice itself, and a voice may be up to maxVoiceBytes.
func checkVoice(path string) error {
	b, err := yamlconf.ReadFile(path, maxVoiceBytes)
	if err != nil {
		return fmt.Errorf("reference voice: %w", err)
	}
	info, err := wav.Probe(bytes.NewReader(b))
	if err == nil {
		_, err = pipeline.NewResampler(info.Rate, realtime.InputSampleRate)
	}
	if err != nil {
		return fmt.Errorf("reference voice %s: %w", path, err)
	}
	return nil
}

// readSecret returns value, or the trimmed content of file when value is empty.
func readSecret(value, file string) (string, error) {
	if value != "" || file == "" {
		return value, nil
	}
	b, err := yamlconf.ReadFile(file, maxSecretBytes)
	if err != nil {
		return "", err
	}
	return strings.TrimSpace(string(b)), nil
}
