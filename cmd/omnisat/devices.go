package main

import (
	"context"
	"fmt"
	"strings"

	"github.com/omnisat/omnisat/devices/audio"
	"github.com/omnisat/omnisat/devices/camera"
)

// runDevices lists what omnisat can use: PortAudio devices and V4L2 cameras.
func runDevices(_ context.Context, env *cliEnv, args []string) int {
	fs := newFlagSet("devices", env, "")
	if code, done := parseFlags(fs, args); done {
		return code
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(env.stderr, "omnisat devices: unexpected argument %q\n", fs.Arg(0))
		return exitUsage
	}
	code := exitOK
	fmt.Fprintln(env.stdout, "audio devices (audio.input / audio.output take \"default\", the index, or part of the name):")
	devs, err := audio.List()
	switch {
	case err != nil:
		fmt.Fprintf(env.stdout, "  none: %v\n", err)
		code = exitFailure
	case len(devs) == 0:
		fmt.Fprintln(env.stdout, "  none found")
	}
	for _, d := range devs {
		var tags []string
		if d.DefaultInput {
			tags = append(tags, "default input")
		}
		if d.DefaultOutput {
			tags = append(tags, "default output")
		}
		tag := ""
		if len(tags) > 0 {
			tag = "  [" + strings.Join(tags, ", ") + "]"
		}
		fmt.Fprintf(env.stdout, "  %2d  %-40q in %d  out %d  %g Hz  %s%s\n", d.Index, d.Name, d.MaxInputChannels,
			d.MaxOutputChannels, d.DefaultSampleRate, d.HostAPI, tag)
	}
	fmt.Fprintln(env.stdout, "cameras (camera.source takes the index, the path, file:PATH or a GStreamer pipeline):")
	cams, err := camera.List()
	switch {
	case err != nil:
		fmt.Fprintf(env.stdout, "  none: %v\n", err)
		code = exitFailure
	case len(cams) == 0:
		fmt.Fprintln(env.stdout, "  none found (no /dev/video* capture device)")
	}
	for _, c := range cams {
		fmt.Fprintf(env.stdout, "  %s  %q  %s  %s\n", c.Path, c.Name, c.Driver, c.Bus)
		for _, f := range c.Formats {
			var sizes []string
			for _, s := range f.Sizes {
				sizes = append(sizes, fmt.Sprintf("%dx%d", s.X, s.Y))
			}
			if len(sizes) == 0 && f.Max.X > 0 {
				sizes = append(sizes, fmt.Sprintf("%dx%d..%dx%d", f.Min.X, f.Min.Y, f.Max.X, f.Max.Y))
			}
			fmt.Fprintf(env.stdout, "      %s (%s): %s\n", f.FourCC, f.Description, strings.Join(sizes, " "))
		}
	}
	return code
}
