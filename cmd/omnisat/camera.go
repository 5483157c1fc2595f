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

// openCamera opens what the section asks for; nil with no error means no camera.
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
	cfg := c.Config
	cfg.Source = src
	lc := &lateCamera{}
	onState := func(ok bool, err error) { report.state("camera", ok, err) }
	cam, err := camera.Open(ctx, cfg, onState, log.With("component", "camera"))
	if err == nil {
		lc.set(cam)
		return lc, desc, lc.close, nil
	}
	// A camera that is not there at start (not plugged in yet, still enumerating) is a lost
	// device, not a reason to stop: the session runs audio-only until it appears.
	report.state("camera", false, err)
	log.Warn("camera not available; continuing without frames and retrying", "source", src, "err", err)
	lc.wg.Add(1)
	go func() {
		defer lc.wg.Done()
		wait := cfg.Retry
		for {
			select {
			case <-ctx.Done():
				return
			case <-time.After(wait):
			}
			cam, err := camera.Open(ctx, cfg, onState, log.With("component", "camera"))
			if err == nil {
				lc.set(cam)
				return
			}
			wait = min(2*wait, cfg.RetryMax)
		}
	}()
	return lc, desc + " (not available yet)", lc.close, nil
}

// lateCamera is a camera that may open after start.
type lateCamera struct {
	mu  sync.Mutex
	cam *camera.Camera
	wg  sync.WaitGroup
}

func (l *lateCamera) set(c *camera.Camera) {
	l.mu.Lock()
	l.cam = c
	l.mu.Unlock()
}

// Latest implements agent.FrameSource.
func (l *lateCamera) Latest() ([]byte, bool) {
	l.mu.Lock()
	c := l.cam
	l.mu.Unlock()
	if c == nil {
		return nil, false
	}
	return c.Latest()
}

func (l *lateCamera) close() error {
	l.wg.Wait()
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.cam == nil {
		return nil
	}
	return l.cam.Close()
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
