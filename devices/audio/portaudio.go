// Package audio is the real microphone and speaker, through PortAudio (cgo): device listing and
// selection, a capture stream that delivers 16 kHz mono float32 (agent.AudioSource), a playback
// stream fed by pipeline.Playback (agent.Speaker), and recovery when a device goes away.
//
// It talks to PortAudio through the small cgo layer in this file rather than through
// github.com/gordonklaus/portaudio: that binding passes an integer stream id to C as an
// unsafe.Pointer, which the race detector's pointer checks (checkptr) turn into a fatal error
// for every stream after the first, and it calls the stream callback through reflection, which
// allocates. Here the callback is a plain function on the device's own buffers.
//
// See README.md in this folder for the device strings, the settings, the loss and recovery
// behaviour and what was measured on PulseAudio.
package audio

/*
#cgo pkg-config: portaudio-2.0
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <fcntl.h>
#include <unistd.h>
#include <portaudio.h>

// omnisatQuietInit runs Pa_Initialize with stderr pointed at /dev/null: probing every ALSA
// and JACK device prints dozens of lines ("cannot find card", "jack server is not running")
// that are not errors of ours and would bury the service's log. Errors still come back as
// the return code.
static PaError omnisatQuietInit(int quiet) {
	if (!quiet) {
		return Pa_Initialize();
	}
	fflush(stderr);
	int saved = dup(2);
	int null = open("/dev/null", O_WRONLY);
	if (saved < 0 || null < 0) {
		if (saved >= 0) close(saved);
		if (null >= 0) close(null);
		return Pa_Initialize();
	}
	dup2(null, 2);
	PaError err = Pa_Initialize();
	fflush(stderr);
	dup2(saved, 2);
	close(saved);
	close(null);
	return err;
}

extern void omnisatAudioCallback(uintptr_t handle, float *in, float *out, unsigned long frames, double at);

// The time handed on is when the buffer's first frame met the converter (ADC for input, DAC for
// output) on PortAudio's stream clock, or the callback's own time when the host API gives none:
// the echo canceller lines the speaker's output up with the microphone's input by it.
static int omnisatPaCallback(const void *in, void *out, unsigned long frames,
		const PaStreamCallbackTimeInfo *timeInfo, PaStreamCallbackFlags flags, void *user) {
	double at = 0;
	if (timeInfo) {
		at = in ? timeInfo->inputBufferAdcTime : timeInfo->outputBufferDacTime;
		if (at == 0) at = timeInfo->currentTime;
	}
	omnisatAudioCallback((uintptr_t)user, (float *)in, (float *)out, frames, at);
	return paContinue;
}

extern void omnisatStreamFinished(uintptr_t handle);

// PortAudio calls this when the stream stops for any reason, from its own thread: the ALSA
// host's callback thread runs it as it exits, also when it gave up on a failed device.
static void omnisatPaFinished(void *user) {
	omnisatStreamFinished((uintptr_t)user);
}

// omnisatOpen opens a float32 interleaved callback stream, input or output. The handle
// travels as the callback's user data; it is an integer, converted to a pointer here in C.
static PaError omnisatOpen(PaStream **s, int device, int channels, int input, double latency,
		double rate, unsigned long framesPerBuffer, uintptr_t handle) {
	PaStreamParameters p;
	p.device = device;
	p.channelCount = channels;
	p.sampleFormat = paFloat32;
	p.suggestedLatency = latency;
	p.hostApiSpecificStreamInfo = NULL;
	PaError err = Pa_OpenStream(s, input ? &p : NULL, input ? NULL : &p, rate, framesPerBuffer,
		paNoFlag, omnisatPaCallback, (void *)handle);
	if (err == paNoError) {
		err = Pa_SetStreamFinishedCallback(*s, omnisatPaFinished);
		if (err != paNoError) {
			Pa_CloseStream(*s);
		}
	}
	return err;
}

static const char *omnisatHostError(void) {
	const PaHostErrorInfo *e = Pa_GetLastHostErrorInfo();
	return e && e->errorText ? e->errorText : "";
}
*/
import "C"

import (
	"errors"
	"fmt"
	"os"
	"runtime/cgo"
	"sync"
	"time"
	"unsafe"
)

// pa is the package's only mutable package-level state, and it has to be: PortAudio's
// Pa_Initialize and Pa_Terminate are process-global (a reference count inside the C library),
// and Pa_Terminate closes every stream still open in the process. So every device of this
// package shares one reference count: the first user initialises PortAudio, the last one
// terminates it, and every call into PortAudio other than the stream callbacks happens under
// one mutex, because PortAudio's functions are not documented as thread-safe.
//
// Closing a stream is the exception: it runs outside the mutex (counted in closing, and no
// Terminate or rescan happens while one runs), because PortAudio can hang closing the stream of
// a device that died, and that must not block every other device of the process.
var pa struct {
	mu      sync.Mutex
	refs    int  // holders: open devices, and List while it runs
	inited  bool // PortAudio is initialised (false after a failed rescan)
	closing int  // stream closes under way outside mu
}

// paAcquire adds a holder, initialising PortAudio for the first one.
func paAcquire() error {
	pa.mu.Lock()
	defer pa.mu.Unlock()
	if !pa.inited {
		if err := paInit(); err != nil {
			return err
		}
	}
	pa.refs++
	return nil
}

// paRelease drops a holder, terminating PortAudio after the last one.
func paRelease() {
	pa.mu.Lock()
	defer pa.mu.Unlock()
	if pa.refs <= 0 {
		return
	}
	pa.refs--
	paTerminateIfUnused()
}

// paTerminateIfUnused terminates PortAudio when nothing holds or closes anything. Called
// with mu held.
func paTerminateIfUnused() {
	if pa.refs == 0 && pa.closing == 0 && pa.inited {
		C.Pa_Terminate()
		pa.inited = false
	}
}

// paClose closes a stream outside the mutex (see pa); the caller must hold a reference.
func paClose(s *paStream) error {
	pa.mu.Lock()
	pa.closing++
	pa.mu.Unlock()
	err := s.close()
	pa.mu.Lock()
	pa.closing--
	paTerminateIfUnused()
	pa.mu.Unlock()
	return err
}

// paDo runs f with PortAudio initialised, serialised with every other PortAudio call. The
// caller must hold a reference.
func paDo(f func() error) error {
	pa.mu.Lock()
	defer pa.mu.Unlock()
	if !pa.inited {
		if err := paInit(); err != nil {
			return err
		}
	}
	return f()
}

func paInit() error {
	// OMNISAT_AUDIO_DEBUG=1 lets ALSA's and JACK's own messages through, for diagnosing devices.
	quiet := C.int(1)
	if os.Getenv("OMNISAT_AUDIO_DEBUG") == "1" {
		quiet = 0
	}
	if err := paError(C.omnisatQuietInit(quiet)); err != nil {
		return fmt.Errorf("initialise PortAudio: %w", err)
	}
	pa.inited = true
	return nil
}

// paRescan re-reads the device list. PortAudio enumerates devices only in Pa_Initialize, so a
// USB device plugged in again may have a new entry that only a Terminate/Initialize cycle
// finds; but Terminate would close every other stream in the process, so it is done only when
// the caller is the only holder (its own stream already closed). Otherwise the list made at
// start-up is kept, which is enough for ALSA names that survive (pulse, default, a card that
// comes back with the same number).
func paRescan() {
	pa.mu.Lock()
	defer pa.mu.Unlock()
	if pa.refs != 1 || pa.closing != 0 || !pa.inited {
		return
	}
	C.Pa_Terminate()
	pa.inited = false
	paInit()
}

// paError turns a PortAudio error code into an error (nil for paNoError).
func paError(code C.PaError) error {
	if code >= 0 {
		return nil
	}
	msg := C.GoString(C.Pa_GetErrorText(code))
	if code == C.paUnanticipatedHostError {
		if host := C.GoString(C.omnisatHostError()); host != "" {
			msg += ": " + host
		}
	}
	return errors.New(msg)
}

// paDevice is PortAudio's record of a device.
type paDevice struct {
	index                    int
	name, hostAPI            string
	maxIn, maxOut            int
	rate                     float64
	highInLatency, highOutLt time.Duration
}

// paDevices lists the devices and the default input and output indexes (-1: none). Called
// under paDo.
func paDevices() ([]paDevice, int, int, error) {
	n := int(C.Pa_GetDeviceCount())
	if n < 0 {
		return nil, -1, -1, paError(C.PaError(n))
	}
	devs := make([]paDevice, 0, n)
	for i := range n {
		info := C.Pa_GetDeviceInfo(C.PaDeviceIndex(i))
		if info == nil {
			continue
		}
		d := paDevice{
			index:         i,
			name:          C.GoString(info.name),
			maxIn:         int(info.maxInputChannels),
			maxOut:        int(info.maxOutputChannels),
			rate:          float64(info.defaultSampleRate),
			highInLatency: seconds(info.defaultHighInputLatency),
			highOutLt:     seconds(info.defaultHighOutputLatency),
		}
		if h := C.Pa_GetHostApiInfo(info.hostApi); h != nil {
			d.hostAPI = C.GoString(h.name)
		}
		devs = append(devs, d)
	}
	return devs, int(C.Pa_GetDefaultInputDevice()), int(C.Pa_GetDefaultOutputDevice()), nil
}

func seconds(t C.PaTime) time.Duration { return time.Duration(float64(t) * float64(time.Second)) }

// paStream is an open callback stream.
type paStream struct {
	s      unsafe.Pointer // *C.PaStream
	handle cgo.Handle     // to the callback, passed through C as an integer
	closed bool
}

// streamCallback is what a stream calls with each buffer: in for an input stream, out (to
// fill) for an output stream, interleaved float32 frames. It runs on PortAudio's thread and
// must not block. at is when the buffer's first frame met the converter, in seconds on
// PortAudio's stream clock (shared by the streams of one process), 0 when unknown.
type streamCallback func(in, out []float32, at float64)

type callbackInfo struct {
	fn       streamCallback
	finished func() // the stream has stopped (nil: nothing to do)
	channels int
	input    bool
}

//export omnisatStreamFinished
func omnisatStreamFinished(handle C.uintptr_t) {
	if c := cgo.Handle(handle).Value().(*callbackInfo); c.finished != nil {
		c.finished()
	}
}

//export omnisatAudioCallback
func omnisatAudioCallback(handle C.uintptr_t, in, out *C.float, frames C.ulong, at C.double) {
	c := cgo.Handle(handle).Value().(*callbackInfo)
	n := int(frames) * c.channels
	if c.input {
		if in != nil {
			c.fn(unsafe.Slice((*float32)(unsafe.Pointer(in)), n), nil, float64(at))
		}
		return
	}
	if out != nil {
		c.fn(nil, unsafe.Slice((*float32)(unsafe.Pointer(out)), n), float64(at))
	}
}

// paOpen opens and starts a stream on a device; finished (may be nil) runs when the stream
// stops, on PortAudio's thread. Called under paDo.
func paOpen(dev paDevice, input bool, channels int, latency time.Duration, rate, framesPerBuffer int, fn streamCallback, finished func()) (*paStream, error) {
	h := cgo.NewHandle(&callbackInfo{fn: fn, finished: finished, channels: channels, input: input})
	var s unsafe.Pointer // a *C.PaStream, which is a void*
	code := C.omnisatOpen(&s, C.int(dev.index), C.int(channels), boolInt(input), C.double(latency.Seconds()),
		C.double(rate), C.ulong(framesPerBuffer), C.uintptr_t(h))
	if err := paError(code); err != nil {
		h.Delete()
		return nil, fmt.Errorf("open stream on %q at %d Hz, %d channels: %w", dev.name, rate, channels, err)
	}
	st := &paStream{s: s, handle: h}
	if err := paError(C.Pa_StartStream(s)); err != nil {
		st.close()
		return nil, fmt.Errorf("start stream on %q: %w", dev.name, err)
	}
	return st, nil
}

func boolInt(b bool) C.int {
	if b {
		return 1
	}
	return 0
}

// active reports whether the stream still runs: PortAudio's ALSA thread stops the stream when
// the device fails (a server gone, a USB device unplugged). Called under paDo.
func (s *paStream) active() bool {
	return !s.closed && C.Pa_IsStreamActive(s.s) == 1
}

// close aborts and closes the stream; no callback runs after it returns. Called through
// paClose (or under paDo when the stream never got out of paOpen).
func (s *paStream) close() error {
	if s.closed {
		return nil
	}
	s.closed = true
	C.Pa_AbortStream(s.s)
	err := paError(C.Pa_CloseStream(s.s))
	s.handle.Delete()
	return err
}
