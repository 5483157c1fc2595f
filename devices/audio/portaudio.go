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
// PortAudio's static archive (hostapis.c says why) and what it needs; these flags serve the
// whole package.
#cgo LDFLAGS: -l:libportaudio.a -lm -lpthread -Wl,--wrap=snd_pcm_poll_descriptors_revents
#cgo pkg-config: alsa
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <fcntl.h>
#include <unistd.h>
#include <dlfcn.h>
#include <portaudio.h>
#include "bridge.h"

// alsawait.c: readiness a device's descriptors gave and the device denied, in this process.
long long omnisatDeniedReadiness(void);

// omnisatDropProbes frees ALSA's global configuration, and with it the plugin libraries it
// loaded that nothing else holds: Pa_Initialize opens every ALSA device and plugin the
// system's configuration defines, and ALSA keeps each plugin's library (the a52 encoder alone
// brings libavcodec and ~90 libraries: 10-12 MB of pages no other process shares, measured)
// until its configuration is freed. The next open reads the configuration whole again. Safe
// only when no stream is open. Looked up at run time: PortAudio may be built without ALSA.
static void omnisatDropProbes(void) {
	int (*freeGlobal)(void) = (int (*)(void))dlsym(RTLD_DEFAULT, "snd_config_update_free_global");
	if (freeGlobal)
		freeGlobal();
}

// omnisatQuietInit runs Pa_Initialize with stderr pointed at /dev/null: probing every ALSA
// device and plugin prints dozens of lines ("cannot find card", "jack server is not running")
// that are not errors of ours and would bury the service's log. Errors still come back as
// the return code.
static PaError omnisatQuietInit(int quiet) {
	if (!quiet)
		return Pa_Initialize();
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

// omnisatOpen opens a float32 interleaved callback stream, input or output, whose callback
// moves the buffers through b (bridge.c).
static PaError omnisatOpen(PaStream **s, int device, int channels, int input, double latency,
		double rate, unsigned long framesPerBuffer, omnisatBridge *b) {
	PaStreamParameters p;
	p.device = device;
	p.channelCount = channels;
	p.sampleFormat = paFloat32;
	p.suggestedLatency = latency;
	p.hostApiSpecificStreamInfo = NULL;
	PaError err = Pa_OpenStream(s, input ? &p : NULL, input ? NULL : &p, rate, framesPerBuffer,
		paNoFlag, omnisatBridgeCallback, b);
	if (err == paNoError) {
		err = Pa_SetStreamFinishedCallback(*s, omnisatBridgeFinished);
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
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/omnisat/omnisat/internal/counterwait"
	"github.com/omnisat/omnisat/pipeline"
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
	inits   int  // initialisations so far (each probes every device: see Hold)

	declared   []string // the device strings the process opens (Hold); nil: not said
	narrowed   bool     // the current initialisation left ALSA plugin devices out (probeOnly)
	narrowedTo []string // the names it kept devices for (see probeLeftOut)
}

// paAcquire adds a holder, initialising PortAudio for the first one.
func paAcquire() error {
	pa.mu.Lock()
	defer pa.mu.Unlock()
	if !pa.inited {
		if err := paInit(false); err != nil {
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
		if err := paInit(false); err != nil {
			return err
		}
	}
	return f()
}

// paInit initialises PortAudio. Its probe of ALSA's plugin devices is narrowed to the devices
// the process said it opens (see probeOnly), unless every device is wanted.
func paInit(everyDevice bool) error {
	// OMNISAT_AUDIO_DEBUG=1 lets ALSA's own messages through, for diagnosing devices.
	quiet := C.int(1)
	if os.Getenv("OMNISAT_AUDIO_DEBUG") == "1" {
		quiet = 0
	}
	// No stream is open here (the first holder, or a rescan by the only one, its stream
	// closed). An earlier initialisation may have left a narrowed configuration in memory
	// (below); PortAudio's ALSA Pa_Terminate frees it, and freeing it here too keeps this one
	// starting from the files whatever PortAudio's version does.
	C.omnisatDropProbes()
	left, narrowing := 0, false
	names, ok := probeNames(pa.declared)
	if ok && !everyDevice {
		// On an error the probe is simply not narrowed; Pa_Initialize reports what it finds.
		var err error
		left, err = probeOnly(names)
		narrowing = err == nil
	}
	err := paError(C.omnisatQuietInit(quiet))
	if !narrowing {
		// Let ALSA unload the plugins the whole probe loaded and no stream will use. A
		// narrowed probe loaded only what the process opens, so its configuration is kept:
		// reading it again at the first open cost start-up about 3 ms of CPU on a plain ALSA
		// card, and a connection to the server from PulseAudio's configuration hook.
		C.omnisatDropProbes()
	}
	if err != nil {
		return fmt.Errorf("initialise PortAudio: %w", err)
	}
	pa.inited = true
	pa.narrowed, pa.narrowedTo = left > 0, nil
	if pa.narrowed {
		pa.narrowedTo = names
	}
	pa.inits++
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
	paReinit(false)
}

// paProbeEverything initialises PortAudio again with every device probed, when the current
// list was narrowed and the caller (holding mu) is its only holder; true when it did.
func paProbeEverything() bool {
	return pa.narrowed && paReinit(true)
}

// paReinit terminates PortAudio and initialises it again (see paInit), when the caller
// (holding mu) is its only holder and no close is under way; true when it did and the
// initialisation succeeded.
func paReinit(everyDevice bool) bool {
	if pa.refs != 1 || pa.closing != 0 || !pa.inited {
		return false
	}
	C.Pa_Terminate()
	pa.inited = false
	return paInit(everyDevice) == nil
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

// deniedReadiness counts the times, in this process, that a device's descriptors were ready
// and the device said it was not, each answered with a pause instead of PortAudio's next poll
// (alsawait.c).
func deniedReadiness() int64 { return int64(C.omnisatDeniedReadiness()) }

func seconds(t C.PaTime) time.Duration { return time.Duration(float64(t) * float64(time.Second)) }

// paStream is an open callback stream. Its callback runs in C (bridge.c); a pump goroutine,
// woken through the bridge's eventfd when the callback needs Go, runs the stream's Go side.
type paStream struct {
	s      unsafe.Pointer // *C.PaStream
	bridge *C.omnisatBridge
	wake   *os.File      // the bridge's eventfd, read through the runtime's poller
	pumped chan struct{} // closed when the pump has stopped
	out    *outputPump   // an output stream's Go side; nil for input
	closed bool
	lost   int64 // at close: frames dropped (see dropped)
}

// streamCallback is what a stream's pump calls: in for an input stream (a buffer the device
// delivered), out (to fill) for an output stream (frames the device will take next; info.at is
// when the first of them is expected to). Frames are interleaved float32. It must not block.
// An output callback returns how many of out's frames are sound: those come first, silence
// after them (an input callback returns 0).
type streamCallback func(in, out []float32, info bufferInfo) int

// playedFunc gets what an output device played, buffer by buffer (the silence it played when
// the pump was late included).
type playedFunc func(frames []float32, info bufferInfo)

// outputHooks is what an output stream's Go side asks of its speaker.
type outputHooks struct {
	played  playedFunc    // what the device played, buffer by buffer (nil: not wanted)
	flushes *atomic.Int64 // counts flushes: each new one drops what the ring holds (bridge.c)
	sound   func() bool   // whether sound waits to be queued
	idle    func(bool)    // (may be nil) the pump has nothing to play, or has again
}

// outputAhead is how much an output stream keeps queued in its ring (at least two device
// buffers): the device's callback wakes the pump only when less than a buffer is left, so with
// 25 ms buffers the pump wakes every fifth buffer instead of every other one, and a microphone
// that services the speaker at its reads (every 100 ms while a reply plays, two buffers of a
// Pi-like card: see Speaker.service and the agent's brief reads) keeps it from waking at all:
// a read's 100 ms leaves two such buffers queued (at 80 ms the ring ran low before each read
// and woke the pump about ten times a second of reply). A flush drops what the ring holds
// within the next device buffer (bridge.c), and a reply starting while it holds silence drops
// that silence first, so neither an interrupt nor the start of a reply waits behind it; a
// volume change is heard after it, up to this much later. With nothing to play, nothing is
// queued: the callback plays silence itself and wakes nobody for it (the bridge's idle flag),
// so the pump sleeps however long a patient microphone's block is.
const outputAhead = 150 * time.Millisecond

// bufferInfo is what the bridge noted about one device buffer.
type bufferInfo struct {
	// at is when its first frame met the converter, in seconds on PortAudio's stream clock
	// (shared by the streams of one process), 0 when unknown.
	at float64
	// lost is how many frames just before it the pump never saw: input the pump was a whole
	// ring too late for, or output the device played as silence while there was no room to
	// record it. The sample count stays true: they count as silence.
	lost int
	// xrun: the host reported an overflow or underflow before it (ALSA restarted the device),
	// so the stream's timeline jumped by an amount nobody counted.
	xrun bool
	// woke (input): the callback woke the pump for this buffer's batch, of which it is the
	// first: one per buffer, or one per block for a patient reader (Microphone.ReadPatiently).
	woke bool
}

// xrunFlags are PortAudio's callback flags that say samples were lost or inserted by the host.
const xrunFlags = C.paInputUnderflow | C.paInputOverflow | C.paOutputUnderflow | C.paOutputOverflow

// timeline is what the buffer says about its stream's timeline; first: the stream's first.
func (b bufferInfo) timeline(first bool) timelineEvent {
	switch {
	case first:
		return timelineNew
	case b.xrun:
		return timelineXrun
	}
	return timelineGoesOn
}

func recordInfo(rec C.omnisatRecord) bufferInfo {
	return bufferInfo{at: float64(rec.at), lost: int(rec.lost), xrun: rec.flags&xrunFlags != 0}
}

// maxFramesPerBuffer bounds a stream's buffer.
const maxFramesPerBuffer = 1 << 16

// halfLatencyFrames is a stream's buffer: the configured one, or half the latency, two device
// periods a buffer (see MicConfig.FramesPerBuffer and SpeakerConfig.FramesPerBuffer).
func halfLatencyFrames(configured int, latency time.Duration, rate int) int {
	if configured > 0 || latency <= 0 {
		return configured // 0 without a latency: PortAudio chooses
	}
	return min(max(1, int(latency.Seconds()*float64(rate)/2)), maxFramesPerBuffer)
}

// inputRingFrames is the room of an input bridge's ring: how far the pump may fall behind the
// device. The pump takes every buffer as it comes (a loaded board can hold a goroutine back for
// a while; the microphone's own ring behind it holds a second more): a second and a quarter, a
// patient microphone's block (a second, readPass) and two 100 ms buffers (the callback lets a
// block gather only while two more buffers fit), or four device buffers if longer: 240 KB at
// 48 kHz, whatever the device's channels (the callback keeps one sample a frame).
func inputRingFrames(rate, framesPerBuffer int) int {
	return max(rate*5/4, 4*framesPerBuffer)
}

// outputRingFrames is the room of an output bridge's ring. The pump keeps the larger of
// outputAhead and two device buffers queued in it (none while it has nothing to play), and a
// device buffer is the one asked for or at most about the latency asked for: four of either,
// and outputAhead and a tenth of a second, leave room to spare, where a second of stereo at
// 48 kHz kept 384 KB.
func outputRingFrames(latency time.Duration, rate, framesPerBuffer int) int {
	return max(int(max(4*latency.Seconds(), outputAhead.Seconds()+0.1)*float64(rate)), 4*framesPerBuffer)
}

// paOpen opens and starts a stream on a device; out (output streams only) is what its Go side
// asks of the speaker, finished (may be nil) runs when the stream stops. They and fn run on the
// stream's pump goroutine (an output stream's also where Speaker.service runs it). An input
// stream hands fn one sample a frame: the sum of its channels (pick < 0) or channel pick
// (bridge.c). Called under paDo.
func paOpen(dev paDevice, input bool, channels, pick int, latency time.Duration, rate, framesPerBuffer int,
	fn streamCallback, out *outputHooks, wake wakeCell, finished func()) (*paStream, error) {
	// An output callback may wait for Go up to half its buffer's latency (at most 25 ms).
	grace := min(25, max(2, int(latency.Milliseconds()/2)))
	fade := max(1, int(pipeline.PlaybackFade.Seconds()*float64(rate)))
	frames := inputRingFrames(rate, framesPerBuffer)
	if !input {
		frames = outputRingFrames(latency, rate, framesPerBuffer)
	}
	b := C.omnisatBridgeNew(boolInt(input), C.int(channels), C.int(pick), C.uint64_t(max(4096, frames)), C.int(grace), C.int(fade))
	if b == nil {
		return nil, fmt.Errorf("open stream on %q: no memory for its buffers", dev.name)
	}
	if input {
		b.wakeAfter = wake.p
	}
	var s unsafe.Pointer // a *C.PaStream, which is a void*
	code := C.omnisatOpen(&s, C.int(dev.index), C.int(channels), boolInt(input), C.double(latency.Seconds()),
		C.double(rate), C.ulong(framesPerBuffer), b)
	if err := paError(code); err != nil {
		C.close(b.efd)
		C.omnisatBridgeFree(b)
		return nil, fmt.Errorf("open stream on %q at %d Hz, %d channels: %w", dev.name, rate, channels, err)
	}
	st := &paStream{s: s, bridge: b, wake: os.NewFile(uintptr(b.efd), "audio stream wake-up"), pumped: make(chan struct{})}
	if !input {
		if out == nil {
			out = &outputHooks{}
		}
		st.out = newOutputPump(b, channels, rate, fn, *out)
	}
	go st.pump(fn, finished, int(b.channels), input)
	if err := paError(C.Pa_StartStream(s)); err != nil {
		st.close()
		return nil, fmt.Errorf("start stream on %q: %w", dev.name, err)
	}
	return st, nil
}

// wakeCell holds how many frames an input stream's callback lets gather before it wakes the
// pump (bridge.h, wakeAfter): the microphone's, in C memory, so that it outlives each stream
// and Read may set it while the supervisor replaces a stream. The zero cell (no memory) leaves
// the callback waking the pump at every buffer.
type wakeCell struct{ p *C.int64_t }

func newWakeCell() wakeCell { return wakeCell{(*C.int64_t)(C.calloc(1, C.sizeof_int64_t))} }

// set stores the threshold in frames (1 or less: every buffer).
func (c wakeCell) set(frames int64) {
	if c.p != nil {
		atomic.StoreInt64((*int64)(unsafe.Pointer(c.p)), frames)
	}
}

// free releases the cell; no stream may use it any more.
func (c wakeCell) free() { C.free(unsafe.Pointer(c.p)) }

// counter is a pointer to one of the bridge's counters, for atomic access.
func counter(p *C.uint64_t) *uint64 { return (*uint64)(unsafe.Pointer(p)) }

// flag is a pointer to one of the bridge's flags, for atomic access.
func flag(p *C.int32_t) *int32 { return (*int32)(unsafe.Pointer(p)) }

// bridgeRing is the bridge's ring of interleaved frames and bridgeRecords its records, as Go
// slices over the C memory.
func bridgeRing(b *C.omnisatBridge, channels int) []float32 {
	return unsafe.Slice((*float32)(unsafe.Pointer(b.data)), int(b.cap)*channels)
}

func bridgeRecords(b *C.omnisatBridge) []C.omnisatRecord {
	return unsafe.Slice(&b.rec[0], C.OMNISAT_RECORDS)
}

// pump runs the stream's Go side each time the callback wakes it, until the stream is closed:
// fn for the buffers an input stream delivered, the output pump for an output stream.
func (s *paStream) pump(fn streamCallback, finished func(), channels int, input bool) {
	defer close(s.pumped)
	b := s.bridge
	ring, records := bridgeRing(b, channels), bridgeRecords(b)
	var scratch []float32
	wait := counterwait.Waiter(s.wake) // one wake-up per bump, sysmon left asleep

	var rr uint64 // input: records read
	for {
		if err := wait(); err != nil {
			return // closed
		}
		if input {
			rw := atomic.LoadUint64(counter(&b.rw))
			for first := rr; rr < rw; rr++ {
				rec := records[rr%C.OMNISAT_RECORDS]
				n := int(rec.frames) * channels
				if cap(scratch) < n {
					scratch = make([]float32, n)
				}
				ringRead(ring, int(rec.pos)*channels, scratch[:n])
				info := recordInfo(rec)
				info.woke = rr == first
				fn(scratch[:n], nil, info)
				atomic.StoreUint64(counter(&b.r), uint64(rec.pos+rec.frames))
			}
			atomic.StoreUint64(counter(&b.rr), rr)
		} else {
			s.out.service()
		}
		if finished != nil && atomic.LoadInt32(flag(&b.finished)) != 0 {
			finished()
			finished = nil
		}
	}
}

// outputPump is an output stream's Go side: it hands what the device played to the speaker
// (the echo reference), keeps outputAhead queued in the ring, and passes flushes on to the
// callback. The stream's pump runs it when the callback wakes it; Speaker.service runs it from
// other goroutines (the microphone, a flush). One at a time, and never after the stream closed.
type outputPump struct {
	mu     sync.Mutex
	closed bool // the stream is closed: the bridge is gone

	b         *C.omnisatBridge
	ring      []float32
	records   []C.omnisatRecord
	channels  int
	rate      float64
	fn        streamCallback
	hooks     outputHooks
	flushSeen int64  // the flush count last passed on
	ahead     uint64 // frames to keep queued
	idle      bool   // the bridge's idle flag as last set: nothing to play

	w, rr      uint64          // frames written; records read
	soundTo    uint64          // the ring position after the last frame of sound written
	silenceCut bool            // the silence queued since was dropped for a reply (see service)
	maxFrames  uint64          // the largest device buffer seen
	last       C.omnisatRecord // the newest record
	scratch    []float32
	heard      []float32
}

func newOutputPump(b *C.omnisatBridge, channels, rate int, fn streamCallback, hooks outputHooks) *outputPump {
	o := &outputPump{b: b, channels: channels, rate: float64(rate), fn: fn, hooks: hooks,
		ring: bridgeRing(b, channels), records: bridgeRecords(b),
		ahead: uint64(outputAhead.Seconds() * float64(rate))}
	if hooks.flushes != nil {
		o.flushSeen = hooks.flushes.Load() // flushes before this stream have nothing to drop here
	}
	return o
}

// service publishes what the device played since the last call, passes on a flush, and tops
// the ring up to the larger of outputAhead and two device buffers. It does not block (the
// callback never holds anything Go waits for) and does not allocate once the buffers have
// grown to the device's buffer.
func (o *outputPump) service() {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.closed {
		return
	}
	b, ch := o.b, o.channels
	cut := false
	if o.hooks.flushes != nil {
		if f := o.hooks.flushes.Load(); f != o.flushSeen {
			o.flushSeen, cut = f, true
		}
	}
	rw := atomic.LoadUint64(counter(&b.rw))
	if rw > o.rr {
		// What the device played, buffer by buffer: the frames it took from the ring (the
		// record says how many), then silence if the ring ran dry. Those frames are intact:
		// nothing is written over them before the refill below.
		if o.hooks.played != nil {
			for i := o.rr; i < rw; i++ {
				rec := o.records[i%C.OMNISAT_RECORDS]
				frames, filled := int(rec.frames)*ch, int(rec.filled)*ch
				if cap(o.heard) < frames {
					o.heard = make([]float32, frames)
				}
				ringRead(o.ring, int(rec.pos)*ch, o.heard[:filled])
				clear(o.heard[filled:frames])
				o.hooks.played(o.heard[:frames], recordInfo(rec))
			}
		}
		o.last = o.records[(rw-1)%C.OMNISAT_RECORDS]
		o.maxFrames = max(o.maxFrames, uint64(o.last.frames))
		o.rr = rw
		atomic.StoreUint64(counter(&b.rr), rw)
	}
	if o.maxFrames == 0 {
		return // the device has not asked for anything yet
	}
	r := atomic.LoadUint64(counter(&b.r))
	queued := o.w - r
	// Nothing to play (the last sound has played, none is queued): the callback plays silence
	// where the ring runs dry, without waking this pump (bridge.c), so none is queued. Set
	// before anything is written for a reply, so the callback waits for it as for any late
	// refill, and wakes the pump after a cut.
	idle := o.soundTo <= r && (o.hooks.sound == nil || !o.hooks.sound())
	if idle != o.idle {
		o.idle = idle
		atomic.StoreInt32(flag(&b.idle), int32(boolInt(idle)))
		if o.hooks.idle != nil {
			o.hooks.idle(idle)
		}
	}
	if idle {
		return
	}
	if !cut && !o.silenceCut && o.soundTo <= r && queued > o.maxFrames {
		// All sound played and yet not idle: a reply starts while the ring holds only silence
		// (the tail queued behind the last sound): drop that first, rather than have the reply
		// wait up to outputAhead behind it. The callback wakes this pump when it has, and the
		// reply is queued then (queued now, it would be dropped with the silence). Once per
		// silence: a jitter buffer holding the reply back fills the ring with silence again,
		// which then plays.
		cut, o.silenceCut = true, true
	}
	cutFlag := flag(&b.cut)
	if cut {
		atomic.StoreInt32(cutFlag, 1)
	}
	if atomic.LoadInt32(cutFlag) != 0 {
		return // what is queued now would be dropped with the rest: refill once the callback has cut
	}
	target := max(2*o.maxFrames, o.ahead)
	if queued >= target {
		return
	}
	k := int(min(target-queued, uint64(b.cap)-queued))
	if cap(o.scratch) < k*ch {
		o.scratch = make([]float32, k*ch)
	}
	// Frame w meets the converter after the newest buffer and what is queued before w (the
	// frames a flush dropped never play).
	last := o.last
	next := uint64(last.pos + last.filled + last.cut)
	at := float64(last.at) + (float64(last.frames)+float64(o.w-min(o.w, next)))/o.rate
	sound := o.fn(nil, o.scratch[:k*ch], bufferInfo{at: at})
	ringWrite(o.ring, int(o.w)*ch, o.scratch[:k*ch])
	if sound > 0 {
		o.soundTo, o.silenceCut = o.w+uint64(sound), false
	}
	o.w += uint64(k)
	atomic.StoreUint64(counter(&b.w), o.w)
}

// wakeNext asks the device's next callback to wake the pump whatever is queued: someone waits
// for what it plays (the microphone, for its echo reference; see Speaker.wantPlayed).
func (o *outputPump) wakeNext() {
	o.mu.Lock()
	defer o.mu.Unlock()
	if !o.closed {
		atomic.StoreInt32(flag(&o.b.eager), 1)
	}
}

// isIdle reports whether the pump had nothing to play when it last looked.
func (o *outputPump) isIdle() bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.idle && !o.closed
}

// stop makes service do nothing from now on: the bridge is about to be freed.
func (o *outputPump) stop() {
	o.mu.Lock()
	o.closed = true
	o.mu.Unlock()
}

// ringRead copies len(dst) samples from ring position at (in samples), wrapping.
func ringRead(ring []float32, at int, dst []float32) {
	at %= len(ring)
	k := copy(dst, ring[at:])
	copy(dst[k:], ring)
}

// ringWrite copies src into the ring from position at (in samples), wrapping.
func ringWrite(ring []float32, at int, src []float32) {
	at %= len(ring)
	k := copy(ring[at:], src)
	copy(ring, src[k:])
}

// dropped is the bridge's count of lost frames: input the pump fell a whole ring behind on,
// or output silence played because the pump was late.
func (s *paStream) dropped() int64 {
	return int64(atomic.LoadUint64(counter(&s.bridge.dropped)))
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

// close aborts and closes the stream; no callback runs after it returns, and the pump has
// stopped. Called through paClose (or under paDo when the stream never got out of paOpen).
func (s *paStream) close() error {
	if s.closed {
		return nil
	}
	s.closed = true
	C.Pa_AbortStream(s.s)
	err := paError(C.Pa_CloseStream(s.s))
	s.wake.Close() // no callback writes to it any more; the pump's Read returns
	<-s.pumped
	if s.out != nil {
		s.out.stop() // Speaker.service may still hold it
	}
	s.lost = s.dropped()
	C.omnisatBridgeFree(s.bridge)
	return err
}
