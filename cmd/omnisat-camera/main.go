// Command omnisat-camera is omnisat's camera in a process of its own. The agent (omnisat run)
// starts it when camera.source is set and reads its standard output: the newest frames as
// JPEG images and whether the camera is up or lost (the format is in devices/camera). OpenCV
// and the drivers behind it (V4L2, GStreamer, FFmpeg/RTSP) live here only, so an audio-only
// satellite never loads them, and a camera driver that crashes or hangs takes this process
// down, not the conversation: the agent restarts it with backoff.
//
//	omnisat-camera --source file:cam.mp4 --encode-fps 1 > frames
//
// It exits 0 when told to stop (SIGTERM, SIGINT) and after -h, 1 when its output is gone, 2 for
// bad flags. Nothing but the frames' stream may write to its standard output: a pipe there is
// put into non-blocking mode (quietout.OwnPipe).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"runtime"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/omnisat/omnisat/devices/camera"
	"github.com/omnisat/omnisat/devices/camera/opencv"
	"github.com/omnisat/omnisat/internal/quietout"
)

// goProcs is how many threads run Go code at once unless GOMAXPROCS says otherwise, as in
// `omnisat run`: the Go side here is a few writes (and, off the agent's pipe, a copy and a
// write per encoded frame), and with more than one the runtime wakes a second thread at every
// event to look for work that is not there.
const goProcs = 1

func main() {
	if os.Getenv("GOMAXPROCS") == "" {
		runtime.GOMAXPROCS(goProcs)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	// The agent's pipe is this program's alone: the camera's thread writes the frames to it
	// itself, and the rest goes out with raw writes that wait in the runtime's poller, not
	// blocking-style calls that wake its monitor thread.
	var stdout io.Writer = os.Stdout
	framesFD := -1
	if w, ok := quietout.OwnPipe(os.Stdout); ok {
		stdout, framesFD = w, syscall.Stdout
	}
	code := run(ctx, os.Args[1:], stdout, os.Stderr, framesFD)
	stop()
	os.Exit(code)
}

// run is the program on args. With a framesFD (not -1: the file under stdout), the camera's
// grabber thread writes the frames and up messages to it directly, and this goroutine only the
// stream's header and lost messages, never at the same time (opencv.OpenWriting): a frame then
// wakes no Go code here. Otherwise every message goes through stdout.
func run(ctx context.Context, args []string, stdout, stderr io.Writer, framesFD int) int {
	fs := flag.NewFlagSet("omnisat-camera", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var cfg camera.Config
	cfg.RegisterFlags(fs)
	debug := fs.Bool("debug", false, "log at debug level")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if err := cfg.Validate(); err != nil {
		fmt.Fprintf(stderr, "omnisat-camera: %v\n", err)
		return 2
	}
	cfg = cfg.WithDefaults()
	level := slog.LevelInfo
	if *debug {
		level = slog.LevelDebug
	}
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level}))
	out := camera.NewStreamWriter(stdout)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	// A write that fails means the agent is gone (or stopped reading): nothing left to do.
	// The grabber (onState) and this goroutine both write.
	var gone atomic.Bool
	send := func(err error) {
		if err != nil && gone.CompareAndSwap(false, true) {
			log.Error("output gone; stopping", "err", err)
			cancel()
		}
	}
	onState := func(ok bool, err error) {
		switch {
		case ok && framesFD < 0:
			send(out.Up())
		case !ok:
			send(out.Lost(err.Error()))
		}
	}
	open := opencv.Open
	if framesFD >= 0 {
		open = func(ctx context.Context, cfg camera.Config, onState func(bool, error), log *slog.Logger) (*opencv.Camera, error) {
			return opencv.OpenWriting(ctx, cfg, framesFD, onState, log)
		}
		if err := out.Begin(); err != nil {
			log.Error("output gone; stopping", "err", err)
			return 1
		}
	}

	// The camera may not be there yet: say so, and keep trying with backoff.
	var cam *opencv.Camera
	for backoff := cfg.Retry; ; backoff = min(2*backoff, cfg.RetryMax) {
		var err error
		if cam, err = open(ctx, cfg, onState, log); err == nil {
			break
		}
		if ctx.Err() != nil {
			return exitCode(gone.Load())
		}
		log.Warn("camera not available; retrying", "in", backoff, "err", err)
		send(out.Lost(err.Error()))
		t := time.NewTimer(backoff)
		select {
		case <-ctx.Done():
			t.Stop()
			return exitCode(gone.Load())
		case <-t.C:
		}
	}
	defer func() {
		if err := cam.Close(); err != nil {
			log.Error("close", "err", err)
		}
	}()
	for {
		select {
		case <-ctx.Done():
			return exitCode(gone.Load())
		case <-cam.Updated():
			if jpg, ok := cam.Latest(); ok {
				send(out.Frame(jpg))
			}
		}
	}
}

func exitCode(outputGone bool) int {
	if outputGone {
		return 1
	}
	return 0
}
