package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/omnisat/omnisat/agent"
	"github.com/omnisat/omnisat/devices"
	"github.com/omnisat/omnisat/devices/camera"
)

// cameraSection is the `camera:` section: the camera package's settings, plus the sources the
// command resolves itself.
//
// source: "none"; "dir:PATH" (a folder of JPEGs, shown at encode_fps); "auto" (the first V4L2
// camera if there is one, else fallback); anything else is a camera for OpenCV (see
// devices/camera/README.md).
type cameraSection struct {
	camera.Config `yaml:",inline"`
	// Fallback is what "auto" uses when no camera is found ("none" or "dir:PATH").
	Fallback string `yaml:"fallback"`
}

func (c cameraSection) withDefaults() cameraSection {
	if c.Source == "" {
		c.Source = "none"
	}
	if c.Fallback == "" {
		c.Fallback = "none"
	}
	c.Config = c.Config.WithDefaults()
	return c
}

func (c cameraSection) validate() error {
	var errs []error
	for _, s := range []struct{ key, v string }{{"source", c.Source}, {"fallback", c.Fallback}} {
		if p, ok := strings.CutPrefix(s.v, "dir:"); ok && p == "" {
			errs = append(errs, fmt.Errorf("camera.%s: %q names no folder", s.key, s.v))
		}
	}
	if c.Fallback != "none" && !strings.HasPrefix(c.Fallback, "dir:") {
		errs = append(errs, fmt.Errorf("camera.fallback: %q is not none or dir:PATH", c.Fallback))
	}
	cfg := c.Config
	if c.Source == "none" || c.Source == "auto" || strings.HasPrefix(c.Source, "dir:") {
		cfg.Source = "0" // not an OpenCV source, but the other settings still have to make sense
	}
	return errors.Join(append(errs, cfg.Validate())...)
}

// resolveCamera picks the source "auto" stands for, and says why.
func resolveCamera(c cameraSection) (source, why string) {
	if c.Source != "auto" {
		return c.Source, ""
	}
	infos, err := camera.List()
	if err == nil && len(infos) > 0 {
		return infos[0].Path, fmt.Sprintf("found %s (%s)", infos[0].Path, infos[0].Name)
	}
	return c.Fallback, "no camera found"
}

// cameraStartWait bounds how long start-up waits for the camera's first frame, so that the first
// chunks carry one; a camera that takes longer (an RTSP stream, a slow GStreamer pipeline)
// joins when it is ready.
const cameraStartWait = 15 * time.Second

// cameraProgram is the camera's own program (cmd/omnisat-camera): OpenCV lives there only.
func cameraProgram() helperProgram {
	return helperProgram{name: "omnisat-camera", env: "OMNISAT_CAMERA_PROGRAM", what: "the camera program", neededBy: "camera.source is set"}
}

// findCameraProgram finds the camera program (see findProgram).
func findCameraProgram() (string, error) {
	return findProgram(cameraProgram())
}

// openCamera opens what the section asks for; nil with no error means no camera. A camera
// proper runs in the camera program, which is started here and supervised like a device.
func openCamera(ctx context.Context, c cameraSection, report *deviceReporter, log *slog.Logger) (agent.FrameSource, string, func() error, error) {
	src, why := resolveCamera(c)
	desc := "camera " + src
	if why != "" {
		desc += " (auto: " + why + ")"
	}
	switch {
	case src == "none":
		return nil, desc, nil, nil
	case strings.HasPrefix(src, "dir:"):
		cam, err := devices.OpenJPEGDir(strings.TrimPrefix(src, "dir:"), c.EncodeFPS)
		if err != nil {
			return nil, "", nil, fmt.Errorf("camera.source: %w", err)
		}
		return cam, desc, nil, nil
	}
	program, err := findCameraProgram()
	if err != nil {
		return nil, "", nil, err
	}
	cfg := c.Config
	cfg.Source = src
	cam, err := camera.StartProcess(ctx, program, cfg, func(ok bool, err error) { report.state("camera", ok, err) },
		log.With("component", "camera"))
	if err != nil {
		return nil, "", nil, fmt.Errorf("camera.source: %w", err)
	}
	wait, cancel := context.WithTimeout(ctx, cameraStartWait)
	defer cancel()
	if !cam.WaitStarted(wait) {
		// A camera that is not there at start (not plugged in yet, still enumerating) is a lost
		// device, not a reason to stop: the session runs audio-only until it appears.
		log.Warn("camera not available yet; continuing without frames", "source", src)
		desc += " (not available yet)"
	}
	return cam, desc, cam.Close, nil
}

// deviceReporter forwards device health to the agent, which is built after the devices: reports
// that come before it exists are kept and handed over once it does.
type deviceReporter struct {
	mu      sync.Mutex
	sup     *agent.Supervisor
	pending []deviceReport
}

type deviceReport struct {
	device string
	ok     bool
	err    error
}

func (r *deviceReporter) state(device string, ok bool, err error) {
	r.mu.Lock()
	sup := r.sup
	if sup == nil {
		r.pending = append(r.pending, deviceReport{device, ok, err})
	}
	r.mu.Unlock()
	if sup != nil {
		sup.DeviceState(device, ok, err)
	}
}

func (r *deviceReporter) attach(sup *agent.Supervisor) {
	r.mu.Lock()
	r.sup = sup
	pending := r.pending
	r.pending = nil
	r.mu.Unlock()
	for _, p := range pending {
		sup.DeviceState(p.device, p.ok, p.err)
	}
}
