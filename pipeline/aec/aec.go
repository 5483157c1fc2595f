// Package aec cleans the microphone signal before it goes to the model: acoustic echo
// cancellation (the speaker's own output heard by the microphone, removed with what was played
// as the reference), residual echo suppression, noise suppression and automatic gain, all from
// speexdsp (Debian's libspeexdsp, the library PulseAudio's own echo-cancel module uses).
//
// It is a cgo leaf package: the rest of omnisat stays pure Go. speexdsp was chosen over the
// WebRTC audio-processing module because Debian ships it as a small C library with a stable
// API (WebRTC's is C++ with an API that changes between its packaged versions), it costs about
// 1–2% of one core at 48 kHz here (see README.md), and on the virtual sound card it meets the
// project's bar (ERLE ≥ 20 dB).
//
// Each Processor runs speexdsp on a thread of its own (omnisat-aec in top -H), which Process
// hands a batch of frames to and waits for in the Go runtime's poller: a call from Go into C
// tells the scheduler it leaves for a system call, which wakes the runtime's monitor thread out
// of its deep sleep every time (three to four wake-ups per device buffer on a Pi-like ALSA
// device, against the worker's one). The results are the same to the bit
// (TestWorkerIsTheDirectCall).
//
// While the speaker is silent the canceller has nothing to remove, and after the reference has
// been all zeros for longer than its filter (plus two seconds) it is left out: its output for
// those frames is the microphone through its DC notch, which Process computes itself, and the
// denoiser and AGC run as before. That is two thirds of the cleaning's CPU on a satellite whose
// speaker is mostly silent (BenchmarkProcess, speaker-silent). New checks that speexdsp here
// computes the notch as Process does, and leaves the canceller in for good if not; the echo of
// the next reply is cancelled within a dB of running it throughout (TestSkipIsTheCanceller).
package aec

/*
#cgo pkg-config: speexdsp
#cgo LDFLAGS: -lpthread -lm
#define _GNU_SOURCE
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/eventfd.h>
#include <speex/speex_echo.h>
#include <speex/speex_preprocess.h>

static int pp_ctl_int(SpeexPreprocessState *st, int request, int value) {
	return speex_preprocess_ctl(st, request, &value);
}
static int pp_ctl_float(SpeexPreprocessState *st, int request, float value) {
	return speex_preprocess_ctl(st, request, &value);
}
static int pp_set_echo(SpeexPreprocessState *st, SpeexEchoState *echo) {
	return speex_preprocess_ctl(st, SPEEX_PREPROCESS_SET_ECHO_STATE, echo);
}
static int echo_set_rate(SpeexEchoState *st, int rate) {
	return speex_echo_ctl(st, SPEEX_ECHO_SET_SAMPLING_RATE, &rate);
}
static int echo_ir_size(SpeexEchoState *st) {
	int n = 0;
	speex_echo_ctl(st, SPEEX_ECHO_GET_IMPULSE_RESPONSE_SIZE, &n);
	return n;
}
static void echo_ir(SpeexEchoState *st, spx_int32_t *ir) {
	speex_echo_ctl(st, SPEEX_ECHO_GET_IMPULSE_RESPONSE, ir);
}
// quiet lets process leave the canceller out while the speaker is silent. Once the reference
// has been all zeros for longer than the filter models, speexdsp's echo estimate is exactly
// zero, and its output is the microphone through its DC notch (its pre-emphasis and
// de-emphasis cancel out): quiet computes that notch itself, which costs next to nothing
// against the canceller's transforms (two thirds of the cleaning's CPU; a kiosk's speaker is
// silent most of the time). Its notch runs on every frame, so it always holds speexdsp's notch
// state; the last skipped frames are kept and fed to the canceller before it runs again, so
// that its own notch and emphasis memories (which forget within a few frames) are what they
// would have been.
enum { quiet_replay = 6 };
typedef struct {
	int frame;
	int skip_after;   // zero reference frames after which the echo estimate is zero
	int enabled;      // 0: the library does not match the notch here (quiet_check)
	int zero_frames;  // consecutive zero reference frames so far
	int kept;         // skipped frames in replay, up to quiet_replay
	long long skipped;
	float radius, den2;
	float mem[2];
	spx_int16_t *replay;  // quiet_replay frames of skipped microphone input, a ring
	spx_int16_t *scratch; // two frames: a zero reference and a discarded output
} quiet;

// quiet_new sets up the skip for a canceller of taps taps at rate; NULL when out of memory.
static quiet *quiet_new(int frame, int taps, int rate) {
	quiet *q = calloc(1, sizeof *q);
	if (!q)
		return NULL;
	q->replay = calloc((size_t)(quiet_replay + 2) * frame, sizeof(spx_int16_t));
	if (!q->replay) {
		free(q);
		return NULL;
	}
	q->scratch = q->replay + quiet_replay * frame;
	q->frame = frame;
	// The echo estimate covers taps samples, in blocks of a frame over the last two frames'
	// transform; the preprocessor's residual echo reads the last two estimates. Two seconds
	// more: speexdsp's far-end power estimate keeps falling through a silence, and how far it
	// fell sets how fast the canceller adapts when the speaker starts again; after two seconds
	// it is near its floor, and the next reply's echo is cancelled as without the skip (within
	// a dB, TestSkipIsTheCanceller), where skipping at once cost up to 3 dB of it.
	q->skip_after = (taps + frame - 1) / frame + 3 + 2 * (rate / frame);
	// speexdsp's notch radius and its denominator (mdf.c).
	q->radius = rate < 12000 ? .9f : rate < 24000 ? .982f : .992f;
	q->den2 = q->radius * q->radius + .7 * (1 - q->radius) * (1 - q->radius);
	return q;
}

static void quiet_free(quiet *q) {
	if (q) {
		free(q->replay);
		free(q);
	}
}

// quiet_reset is the state after speex_echo_state_reset.
static void quiet_reset(quiet *q) {
	q->zero_frames = 0;
	q->kept = 0;
	q->mem[0] = q->mem[1] = 0;
}

static spx_int16_t to_int16(float x) {
	return x < -32767.5f ? -32768 : x > 32766.5f ? 32767 : (spx_int16_t)floor(.5 + x);
}

// quiet_notch is speexdsp's filter_dc_notch16 (float build) to the int16 output.
static void quiet_notch(quiet *q, const spx_int16_t *in, spx_int16_t *out) {
	for (int i = 0; i < q->frame; i++) {
		float vin = in[i];
		float vout = q->mem[0] + vin;
		q->mem[0] = q->mem[1] + 2 * (-vin + q->radius * vout);
		q->mem[1] = vin - q->den2 * vout;
		float o = q->radius * vout;
		if (out)
			out[i] = to_int16(o > 32767 ? 32767 : o < -32767 ? -32767 : o);
	}
}

static int all_zero(const spx_int16_t *x, int n) {
	for (int i = 0; i < n; i++)
		if (x[i])
			return 0;
	return 1;
}

// quiet_check runs a test signal through a fresh canceller with a silent reference and
// through quiet_notch, and enables the skip only if they agree to the last bit (a fixed-point
// or otherwise different speexdsp leaves it off). It resets both afterwards.
static void quiet_check(quiet *q, SpeexEchoState *echo) {
	int n = q->frame, ok = 1;
	spx_int16_t *mic = q->replay, *zero = q->scratch, *want = q->scratch + n, *got = q->replay + n;
	memset(zero, 0, n * sizeof *zero);
	for (int f = 0; f < 12 && ok; f++) { // 120 ms of audio: about a millisecond of CPU
		for (int i = 0; i < n; i++) {
			int k = f * n + i;
			mic[i] = (spx_int16_t)(900 + 9000 * sin(k * 0.0712) + ((k * 7919) % 4001) - 2000);
		}
		speex_echo_cancellation(echo, mic, zero, want);
		quiet_notch(q, mic, got);
		for (int i = 0; i < n; i++)
			if (abs(want[i] - got[i]) > 1)
				ok = 0;
	}
	speex_echo_state_reset(echo);
	quiet_reset(q);
	q->enabled = ok;
}

// process runs frames frames of frame samples each through the canceller (when there is one)
// and the preprocessor in a single call from Go: every call from Go into C costs the Go
// scheduler a hand-over (and often a wake-up of its monitor thread), so a device buffer of
// ten 10 ms frames is one call, not ten.
static void process(SpeexEchoState *echo, SpeexPreprocessState *pre, quiet *q, int frame, int frames,
		spx_int16_t *mic, const spx_int16_t *ref, spx_int16_t *out) {
	for (int i = 0; i < frames; i++) {
		spx_int16_t *buf = mic + i * frame;
		if (echo && q) {
			const spx_int16_t *r = ref + i * frame;
			q->zero_frames = all_zero(r, frame) ? q->zero_frames + 1 : 0;
			if (q->enabled && q->zero_frames > q->skip_after) {
				quiet_notch(q, buf, out + i * frame);
				memcpy(q->replay + (q->skipped % quiet_replay) * frame, buf, frame * sizeof *buf);
				q->skipped++;
				q->kept = q->kept < quiet_replay ? q->kept + 1 : quiet_replay;
				speex_preprocess_run(pre, out + i * frame);
				continue;
			}
			for (; q->kept > 0; q->kept--) {
				spx_int16_t *old = q->replay + ((q->skipped - q->kept) % quiet_replay) * frame;
				speex_echo_cancellation(echo, old, q->scratch, q->scratch + frame);
			}
			quiet_notch(q, buf, NULL);
		}
		if (echo) {
			speex_echo_cancellation(echo, buf, ref + i * frame, out + i * frame);
			buf = out + i * frame;
		}
		speex_preprocess_run(pre, buf);
	}
}

// A worker thread runs process for Go (see the package comment for why): Go posts a job by
// bumping jobfd with a raw write and sleeps in the runtime's poller on donefd. A job with
// want_ir set also reads the echo path estimate into ir as it ends (for EchoDelay).
typedef struct {
	SpeexEchoState *echo;
	SpeexPreprocessState *pre;
	quiet *quiet;
	int frame, frames;
	spx_int16_t *mic, *ref, *out;
	spx_int32_t *ir;
	int want_ir;
	int jobfd, donefd;
	int stop;
	pthread_t thread;
} worker;

static void *work(void *p) {
	worker *w = p;
	for (;;) {
		uint64_t v;
		if (read(w->jobfd, &v, sizeof v) != sizeof v) {
			if (errno == EINTR)
				continue;
			return NULL;
		}
		if (__atomic_load_n(&w->stop, __ATOMIC_ACQUIRE))
			return NULL;
		process(w->echo, w->pre, w->quiet, w->frame, w->frames, w->mic, w->ref, w->out);
		if (w->want_ir && w->echo)
			echo_ir(w->echo, w->ir);
		uint64_t one = 1;
		ssize_t n = write(w->donefd, &one, sizeof one);
		(void)n;
	}
}

// worker_start starts the thread; NULL when it cannot (the caller calls process itself then).
static worker *worker_start(void) {
	worker *w = calloc(1, sizeof *w);
	if (!w)
		return NULL;
	w->jobfd = eventfd(0, EFD_CLOEXEC);
	w->donefd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (w->jobfd < 0 || w->donefd < 0 || pthread_create(&w->thread, NULL, work, w) != 0) {
		if (w->jobfd >= 0)
			close(w->jobfd);
		if (w->donefd >= 0)
			close(w->donefd);
		free(w);
		return NULL;
	}
	pthread_setname_np(w->thread, "omnisat-aec"); // what top -H and /proc show for it
	return w;
}

// worker_stop ends the thread and frees it; donefd belongs to Go's file by then.
static void worker_stop(worker *w) {
	__atomic_store_n(&w->stop, 1, __ATOMIC_RELEASE);
	uint64_t one = 1;
	ssize_t n = write(w->jobfd, &one, sizeof one);
	(void)n;
	pthread_join(w->thread, NULL);
	close(w->jobfd);
	free(w);
}
*/
import "C"

import (
	"errors"
	"fmt"
	"math"
	"os"
	"syscall"
	"time"
	"unsafe"

	"github.com/omnisat/omnisat/internal/counterwait"
)

// Config sets up a Processor. Zero fields take the defaults of WithDefaults.
type Config struct {
	// Rate is the sample rate in Hz, 8000..96000 (the microphone cleans at 16 kHz, or at its
	// capture rate when that is lower).
	Rate int
	// Frame is how much audio one Process call takes (default 10 ms, speexdsp's sweet spot).
	Frame time.Duration
	// EchoCancel turns the echo canceller on; without it Process ignores the reference.
	EchoCancel bool
	// FilterLength is the longest echo path the canceller models: the room's reverberation
	// tail plus whatever delay the reference alignment leaves (default 200 ms).
	FilterLength time.Duration
	// EchoSuppressDB and EchoSuppressActiveDB are the residual echo suppression (after the
	// canceller) while only the far end talks and while both do (defaults -40 and -15 dB).
	EchoSuppressDB, EchoSuppressActiveDB int
	// Denoise turns the noise suppressor on; NoiseSuppressDB is its most attenuation (default -30).
	Denoise         bool
	NoiseSuppressDB int
	// AGC turns automatic gain on; AGCLevel is its target loudness in dBFS (default -20) and
	// AGCMaxGainDB its most gain (default 30).
	AGC          bool
	AGCLevel     float64
	AGCMaxGainDB int
}

// WithDefaults fills in unset fields.
func (c Config) WithDefaults() Config {
	if c.Frame == 0 {
		c.Frame = 10 * time.Millisecond
	}
	if c.FilterLength == 0 {
		c.FilterLength = 200 * time.Millisecond
	}
	if c.EchoSuppressDB == 0 {
		c.EchoSuppressDB = -40
	}
	if c.EchoSuppressActiveDB == 0 {
		c.EchoSuppressActiveDB = -15
	}
	if c.NoiseSuppressDB == 0 {
		c.NoiseSuppressDB = -30
	}
	if c.AGCLevel == 0 {
		c.AGCLevel = -20
	}
	if c.AGCMaxGainDB == 0 {
		c.AGCMaxGainDB = 30
	}
	return c
}

// Validate names the first unusable setting.
func (c Config) Validate() error {
	switch {
	case c.Rate < 8000 || c.Rate > 96000:
		return fmt.Errorf("aec rate %d Hz: want 8000..96000", c.Rate)
	case c.Frame < 2*time.Millisecond || c.Frame > 40*time.Millisecond:
		return fmt.Errorf("aec frame %v: want 2ms..40ms", c.Frame)
	case c.FilterLength < 10*time.Millisecond || c.FilterLength > time.Second:
		return fmt.Errorf("aec filter length %v: want 10ms..1s", c.FilterLength)
	case c.EchoSuppressDB < -90 || c.EchoSuppressDB > 0 || c.EchoSuppressActiveDB < -90 || c.EchoSuppressActiveDB > 0:
		return fmt.Errorf("aec echo suppression %d/%d dB: want -90..0", c.EchoSuppressDB, c.EchoSuppressActiveDB)
	case c.NoiseSuppressDB < -90 || c.NoiseSuppressDB > 0:
		return fmt.Errorf("aec noise suppression %d dB: want -90..0", c.NoiseSuppressDB)
	case math.IsNaN(c.AGCLevel) || c.AGCLevel < -60 || c.AGCLevel > 0:
		return fmt.Errorf("aec agc level %v dBFS: want -60..0", c.AGCLevel)
	case c.AGCMaxGainDB < 0 || c.AGCMaxGainDB > 60:
		return fmt.Errorf("aec agc max gain %d dB: want 0..60", c.AGCMaxGainDB)
	}
	return nil
}

// Processor runs the canceller and the preprocessor on one mono stream, in frames of
// FrameSize samples, as many as a call brings. It is not safe for concurrent use; Close frees
// its C state.
type Processor struct {
	cfg   Config
	frame int
	echo  *C.SpeexEchoState // nil without echo cancellation
	quiet *C.quiet          // leaves the canceller out while the reference is silent; with echo
	pre   *C.SpeexPreprocessState
	// Buffers in C memory for up to frames frames: speexdsp never sees a Go pointer, so nothing
	// here can trip cgo's pointer checks, and Go views them through unsafe.Slice. They grow to
	// the largest batch asked for.
	cbuf          unsafe.Pointer
	frames        int
	mic, ref, out []int16
	irBuf         unsafe.Pointer // the echo path estimate, for EchoDelay
	ir            []int32
	// irWanted: the next Process reads the estimate into ir on the worker (WantEchoDelay);
	// irFresh: ir holds the estimate as the last Process left it.
	irWanted, irFresh bool
	irCalls           int64 // EchoDelay's own calls into speexdsp (the tests count them)
	// The worker thread (nil: Process calls speexdsp itself), the file of its done counter and
	// the wait on it in the runtime's poller.
	worker *C.worker
	done   *os.File
	wait   func() error
}

// ErrClosed is returned by Process after Close.
var ErrClosed = errors.New("aec: processor is closed")

// New builds a processor for cfg (zero fields take their defaults).
func New(cfg Config) (*Processor, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	frame := int(int64(cfg.Rate) * int64(cfg.Frame) / int64(time.Second))
	p := &Processor{cfg: cfg, frame: frame}
	if !p.room(1) {
		return nil, errors.New("aec: out of memory")
	}
	if cfg.EchoCancel {
		taps := int(int64(cfg.Rate) * int64(cfg.FilterLength) / int64(time.Second))
		p.echo = C.speex_echo_state_init(C.int(frame), C.int(taps))
		if p.echo == nil {
			p.Close()
			return nil, errors.New("aec: speex_echo_state_init failed")
		}
		C.echo_set_rate(p.echo, C.int(cfg.Rate))
		p.quiet = C.quiet_new(C.int(frame), C.int(taps), C.int(cfg.Rate))
		if p.quiet == nil {
			p.Close()
			return nil, errors.New("aec: out of memory")
		}
		C.quiet_check(p.quiet, p.echo)
	}
	p.pre = C.speex_preprocess_state_init(C.int(frame), C.int(cfg.Rate))
	if p.pre == nil {
		p.Close()
		return nil, errors.New("aec: speex_preprocess_state_init failed")
	}
	C.pp_ctl_int(p.pre, C.SPEEX_PREPROCESS_SET_DENOISE, boolInt(cfg.Denoise))
	C.pp_ctl_int(p.pre, C.SPEEX_PREPROCESS_SET_NOISE_SUPPRESS, C.int(cfg.NoiseSuppressDB))
	C.pp_ctl_int(p.pre, C.SPEEX_PREPROCESS_SET_AGC, boolInt(cfg.AGC))
	// The AGC level is a loudness in int16 units.
	C.pp_ctl_float(p.pre, C.SPEEX_PREPROCESS_SET_AGC_LEVEL, C.float(32768*math.Pow(10, cfg.AGCLevel/20)))
	C.pp_ctl_int(p.pre, C.SPEEX_PREPROCESS_SET_AGC_MAX_GAIN, C.int(cfg.AGCMaxGainDB))
	if p.echo != nil {
		C.pp_set_echo(p.pre, p.echo)
		C.pp_ctl_int(p.pre, C.SPEEX_PREPROCESS_SET_ECHO_SUPPRESS, C.int(cfg.EchoSuppressDB))
		C.pp_ctl_int(p.pre, C.SPEEX_PREPROCESS_SET_ECHO_SUPPRESS_ACTIVE, C.int(cfg.EchoSuppressActiveDB))
	}
	p.startWorker()
	return p, nil
}

func boolInt(b bool) C.int {
	if b {
		return 1
	}
	return 0
}

// room makes the C buffers hold at least n frames; false when out of memory.
func (p *Processor) room(n int) bool {
	if n <= p.frames {
		return true
	}
	size := 3 * n * p.frame
	buf := C.calloc(C.size_t(size), C.size_t(unsafe.Sizeof(C.spx_int16_t(0))))
	if buf == nil {
		return false
	}
	if p.cbuf != nil {
		C.free(p.cbuf)
	}
	p.cbuf, p.frames = buf, n
	all := unsafe.Slice((*int16)(buf), size)
	k := n * p.frame
	p.mic, p.ref, p.out = all[:k:k], all[k:2*k:2*k], all[2*k:]
	return true
}

// FrameSize is the number of samples of one frame: Process takes whole frames.
func (p *Processor) FrameSize() int { return p.frame }

// Rate is the sample rate in Hz.
func (p *Processor) Rate() int { return p.cfg.Rate }

// Process cleans whole frames: out gets mic with the echo of ref removed (when echo
// cancellation is on), denoised and gain-controlled as configured. mic, ref and out hold the
// same whole number of frames (FrameSize samples each) in [-1, 1] (ref may be nil without echo
// cancellation); out may be mic. All the frames go through speexdsp in one call from Go: hand
// over a device buffer at a time.
func (p *Processor) Process(out, mic, ref []float32) error {
	if p.pre == nil {
		return ErrClosed
	}
	n := len(mic) / p.frame
	if n == 0 || len(mic)%p.frame != 0 || len(out) != len(mic) || (p.echo != nil && len(ref) != len(mic)) {
		return fmt.Errorf("aec: whole frames of %d samples wanted, got mic %d, ref %d, out %d", p.frame, len(mic), len(ref), len(out))
	}
	if !p.room(n) {
		return errors.New("aec: out of memory")
	}
	k := n * p.frame
	mic16 := p.mic[:k]
	toInt16(mic16, mic)
	buf, ref16 := mic16, mic16 // ref16: any valid pointer without a canceller
	if p.echo != nil {
		toInt16(p.ref[:k], ref)
		buf, ref16 = p.out[:k], p.ref[:k]
	}
	micP, refP, outP := (*C.spx_int16_t)(unsafe.Pointer(&mic16[0])), (*C.spx_int16_t)(unsafe.Pointer(&ref16[0])),
		(*C.spx_int16_t)(unsafe.Pointer(&p.out[0]))
	wantIR := p.irWanted // WantEchoDelay set it only once the estimate's buffer was there
	p.irWanted, p.irFresh = false, false
	if p.onWorker(n, micP, refP, outP, wantIR) {
		p.irFresh = wantIR
	} else {
		C.process(p.echo, p.pre, p.quiet, C.int(p.frame), C.int(n), micP, refP, outP)
	}
	for i, v := range buf {
		out[i] = float32(v) / 32768
	}
	return nil
}

// startWorker starts the worker thread; without one, Process calls speexdsp itself.
func (p *Processor) startWorker() {
	w := C.worker_start()
	if w == nil {
		return
	}
	done := os.NewFile(uintptr(w.donefd), "aec-done")
	wait := counterwait.Waiter(done)
	w.echo, w.pre, w.quiet, w.frame = p.echo, p.pre, p.quiet, C.int(p.frame)
	p.worker, p.done, p.wait = w, done, wait
}

// stopWorker ends the worker thread; Process calls speexdsp itself from then on.
func (p *Processor) stopWorker() {
	if p.worker != nil {
		C.worker_stop(p.worker)
		p.done.Close()
		p.worker, p.done, p.wait = nil, nil, nil
	}
}

// onWorker runs the job on the worker thread and waits for it (reading the echo path
// estimate as it ends when wantIR); false when there is no worker (or posting the job failed:
// the caller runs it itself).
func (p *Processor) onWorker(frames int, mic, ref, out *C.spx_int16_t, wantIR bool) bool {
	w := p.worker
	if w == nil {
		return false
	}
	w.frames, w.mic, w.ref, w.out = C.int(frames), mic, ref, out
	w.ir, w.want_ir = (*C.spx_int32_t)(p.irBuf), boolInt(wantIR)
	one := uint64(1)
	if _, _, errno := syscall.RawSyscall(syscall.SYS_WRITE, uintptr(w.jobfd), uintptr(unsafe.Pointer(&one)), 8); errno != 0 {
		return false
	}
	if err := p.wait(); err != nil {
		// Only Close closes the file, and never during Process; should the poller fail all
		// the same, the job is still the worker's: wait for it without the poller.
		var count [8]byte
		for {
			if _, err := syscall.Read(int(w.donefd), count[:]); err != syscall.EAGAIN {
				break
			}
			time.Sleep(time.Millisecond)
		}
	}
	return true
}

// EchoDelay is where the canceller's estimate of the echo path peaks, in samples (with a
// fraction, interpolated) after the reference; ok is false without echo cancellation. Followed
// over time it shows the echo drifting against the reference (two clocks, or a resampler in
// the path), which the canceller itself only chases and never catches.
//
// After WantEchoDelay and a Process it reads what the worker thread read as the job ended;
// otherwise it asks speexdsp itself, a call into C from Go, which wakes the runtime's monitor
// thread out of its sleep (a few wake-ups each time).
func (p *Processor) EchoDelay() (samples float64, ok bool) {
	if !p.irRoom() {
		return 0, false
	}
	if !p.irFresh {
		p.irCalls++
		C.echo_ir(p.echo, (*C.spx_int32_t)(p.irBuf))
	}
	best := 1
	for i := 1; i < len(p.ir)-1; i++ {
		if abs32(p.ir[i]) > abs32(p.ir[best]) {
			best = i
		}
	}
	// A parabola through the peak and its neighbours places it between samples.
	l, c, r := float64(abs32(p.ir[best-1])), float64(abs32(p.ir[best])), float64(abs32(p.ir[best+1]))
	frac := 0.0
	if d := l - 2*c + r; d != 0 {
		frac = math.Max(-0.5, math.Min(0.5, 0.5*(l-r)/d))
	}
	return float64(best) + frac, c > 0
}

func abs32(v int32) int64 { return max(int64(v), -int64(v)) }

// WantEchoDelay asks the next Process to read the echo path estimate on the worker thread as
// it ends, so that EchoDelay after it makes no call into C (a caller that looks every few
// blocks asks before the block it will look after).
func (p *Processor) WantEchoDelay() {
	p.irWanted = p.irRoom()
}

// EchoDelayCalls is how many times EchoDelay called into speexdsp itself, from Go (the rest it
// read from what the worker read): each such call wakes the runtime's monitor thread.
func (p *Processor) EchoDelayCalls() int64 { return p.irCalls }

// irRoom allocates the estimate's buffer once; false without echo cancellation (or memory).
func (p *Processor) irRoom() bool {
	if p.echo == nil {
		return false
	}
	if p.irBuf == nil {
		n := int(C.echo_ir_size(p.echo))
		if n <= 2 {
			return false
		}
		p.irBuf = C.calloc(C.size_t(n), C.size_t(unsafe.Sizeof(C.spx_int32_t(0))))
		if p.irBuf == nil {
			return false
		}
		p.ir = unsafe.Slice((*int32)(p.irBuf), n)
	}
	return true
}

// Reset forgets what the canceller learnt (after the echo path changed beyond repair, e.g.
// a device was re-opened).
func (p *Processor) Reset() {
	p.irFresh = false
	if p.echo != nil {
		C.speex_echo_state_reset(p.echo)
		C.quiet_reset(p.quiet)
	}
}

// Skipped is how many frames the canceller was left out of because the reference had been
// silent for longer than its filter: speexdsp's output for them is the microphone through its
// DC notch, which Process computes itself (see quiet in the C code above).
func (p *Processor) Skipped() int64 {
	if p.quiet == nil {
		return 0
	}
	return int64(p.quiet.skipped)
}

// neverSkip turns the skip off: the tests compare the two.
func (p *Processor) neverSkip() {
	if p.quiet != nil {
		p.quiet.enabled = 0
	}
}

// canSkip reports what New's check found: speexdsp here computes the notch as quiet does.
func (p *Processor) canSkip() bool { return p.quiet != nil && p.quiet.enabled != 0 }

// Close frees the C state. Closing twice is fine.
func (p *Processor) Close() {
	p.stopWorker()
	if p.pre != nil {
		C.speex_preprocess_state_destroy(p.pre)
		p.pre = nil
	}
	if p.echo != nil {
		C.speex_echo_state_destroy(p.echo)
		p.echo = nil
	}
	if p.quiet != nil {
		C.quiet_free(p.quiet)
		p.quiet = nil
	}
	if p.irBuf != nil {
		C.free(p.irBuf)
		p.irBuf, p.ir = nil, nil
	}
	if p.cbuf != nil {
		C.free(p.cbuf)
		p.cbuf, p.frames = nil, 0
		p.mic, p.ref, p.out = nil, nil, nil
	}
}

func toInt16(dst []int16, src []float32) {
	for i, v := range src {
		switch {
		case v >= 32767.0/32768:
			dst[i] = 32767
		case v <= -1:
			dst[i] = -32768
		case v == v: // NaN becomes 0
			dst[i] = int16(math.Round(float64(v) * 32768))
		default:
			dst[i] = 0
		}
	}
}
