// PortAudio's stream callbacks stay in C: calling into Go from PortAudio's own thread leaves a
// Go scheduler slot parked with that thread between buffers, which the Go runtime then has to
// take back (and its monitor spins on) at every buffer: ~1,000 wake-ups a second for a
// microphone and a speaker. Here the callback only copies between the device buffer and a ring
// in C memory, notes the buffer's converter time, and bumps an eventfd; a Go goroutine waiting
// on that eventfd through the runtime's poller does the rest, once per buffer (or, for a
// microphone whose reader waits for a longer block, once per block: see wakeAfter).
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <sys/eventfd.h>
#include "bridge.h"

// omnisatBridgeNew makes a bridge for a stream of channels channels. An input bridge's ring
// keeps one channel: their sum (pick < 0) or channel pick of each frame.
omnisatBridge *omnisatBridgeNew(int input, int channels, int pick, uint64_t frames, int graceMs, int fadeFrames) {
	omnisatBridge *b = calloc(1, sizeof(*b));
	if (!b)
		return NULL;
	int ringChannels = input ? 1 : channels;
	b->data = calloc(frames * (uint64_t)ringChannels, sizeof(float));
	b->efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	if (!b->data || b->efd < 0) {
		if (b->efd >= 0)
			close(b->efd);
		free(b->data);
		free(b);
		return NULL;
	}
	b->cap = frames;
	b->channels = ringChannels;
	b->inChannels = channels;
	b->pick = pick < channels ? pick : channels - 1;
	b->input = input;
	b->graceMs = graceMs;
	b->fadeFrames = fadeFrames;
	return b;
}

// omnisatBridgeFree frees the memory; the eventfd belongs to Go's file by then.
void omnisatBridgeFree(omnisatBridge *b) {
	free(b->data);
	free(b);
}

static void wake(omnisatBridge *b) {
	uint64_t one = 1;
	ssize_t n = write(b->efd, &one, sizeof(one));
	(void)n; // a full counter (2^64 - 2 wake-ups unread) cannot happen
}

// ringCopy copies n frames between a ring position and a flat buffer.
static void ringCopy(omnisatBridge *b, uint64_t pos, float *flat, uint64_t n, int toRing) {
	uint64_t ch = (uint64_t)b->channels, at = pos % b->cap, first = n < b->cap - at ? n : b->cap - at;
	float *ring = b->data + at * ch;
	if (toRing) {
		memcpy(ring, flat, first * ch * sizeof(float));
		memcpy(b->data, flat + first * ch, (n - first) * ch * sizeof(float));
	} else {
		memcpy(flat, ring, first * ch * sizeof(float));
		memcpy(flat + first * ch, b->data, (n - first) * ch * sizeof(float));
	}
}

// ringPutInput writes n frames of the device's interleaved input into the ring at pos, one
// sample a frame: the frame's sum over its channels (added in channel order from zero, as
// pipeline.Float32ToMono adds them) or its channel pick.
static void ringPutInput(omnisatBridge *b, uint64_t pos, const float *in, uint64_t n) {
	int ch = b->inChannels;
	if (ch == 1) {
		ringCopy(b, pos, (float *)in, n, 1);
		return;
	}
	uint64_t at = pos % b->cap;
	for (uint64_t i = 0; i < n; i++, at = at + 1 == b->cap ? 0 : at + 1) {
		const float *f = in + i * (uint64_t)ch;
		float v;
		if (b->pick >= 0) {
			v = f[b->pick];
		} else {
			v = 0;
			for (int c = 0; c < ch; c++)
				v += f[c];
		}
		b->data[at] = v;
	}
}

// fadeOut ramps n frames of the ring from position pos down towards silence, in place, as
// pipeline.Playback fades a cut: the played record then reads what the device played.
static void fadeOut(omnisatBridge *b, uint64_t pos, uint64_t n) {
	uint64_t ch = (uint64_t)b->channels;
	for (uint64_t i = 0; i < n; i++) {
		float g = (float)(n - 1 - i) / (float)n;
		float *f = b->data + ((pos + i) % b->cap) * ch;
		for (uint64_t c = 0; c < ch; c++)
			f[c] *= g;
	}
}

// The time handed on is when the buffer's first frame met the converter (ADC for input, DAC for
// output) on PortAudio's stream clock, or the callback's own time when the host API gives none:
// the echo canceller lines the speaker's output up with the microphone's input by it.
int omnisatBridgeCallback(const void *in, void *out, unsigned long frames,
		const PaStreamCallbackTimeInfo *timeInfo, PaStreamCallbackFlags flags, void *user) {
	omnisatBridge *b = user;
	double at = 0;
	if (timeInfo) {
		at = in ? timeInfo->inputBufferAdcTime : timeInfo->outputBufferDacTime;
		if (at == 0)
			at = timeInfo->currentTime;
	}
	uint64_t rw = b->rw, rr = __atomic_load_n(&b->rr, __ATOMIC_ACQUIRE);
	if (b->input) {
		uint64_t w = b->w, r = __atomic_load_n(&b->r, __ATOMIC_ACQUIRE);
		if (!in || frames > b->cap - (w - r) || rw - rr >= OMNISAT_RECORDS) {
			// Go is a whole ring behind: these frames are lost, and the next record says how
			// many, so that the capture's sample count stays true.
			b->lost += frames;
			__atomic_fetch_add(&b->dropped, frames, __ATOMIC_RELAXED);
			return paContinue;
		}
		ringPutInput(b, w, in, frames);
		b->rec[rw % OMNISAT_RECORDS] = (omnisatRecord){
			.at = at, .pos = w, .frames = frames, .filled = frames, .lost = b->lost, .flags = flags};
		b->lost = 0;
		__atomic_store_n(&b->w, w + frames, __ATOMIC_RELEASE);
		__atomic_store_n(&b->rw, rw + 1, __ATOMIC_RELEASE);
		if (b->wakeAfter) {
			// Go waits for a block of several buffers: let it sleep until the block is here,
			// as long as two more buffers and their records still fit.
			int64_t want = __atomic_load_n(b->wakeAfter, __ATOMIC_ACQUIRE);
			uint64_t held = w + frames - r;
			if (!flags && (int64_t)held < want && held + 2 * frames <= b->cap && rw + 3 - rr < OMNISAT_RECORDS)
				return paContinue;
		}
	} else {
		float *o = out;
		if (rw - rr >= OMNISAT_RECORDS) {
			// No room to record what is played (Go has not looked for that many buffers):
			// play silence, which the next record reports, so that the echo reference still
			// holds what the speaker played, sample for sample.
			memset(o, 0, frames * (uint64_t)b->channels * sizeof(float));
			b->lost += frames;
			__atomic_fetch_add(&b->dropped, frames, __ATOMIC_RELAXED);
			wake(b);
			return paContinue;
		}
		uint64_t r = b->r, w = __atomic_load_n(&b->w, __ATOMIC_ACQUIRE), cut = 0;
		int flush = __atomic_exchange_n(&b->cut, 0, __ATOMIC_ACQUIRE);
		// Go has nothing to play: silence where the ring runs dry is what it wants.
		int idle = __atomic_load_n(&b->idle, __ATOMIC_ACQUIRE);
		if (flush) {
			// A flush (the user talks over the model): play what is queued for a short fade
			// down to silence and drop the rest, so the device falls silent within this buffer
			// however far ahead Go has queued. Go writes only beyond w, so the frames before it
			// are the callback's to change.
			uint64_t keep = w - r;
			if (keep > (uint64_t)b->fadeFrames)
				keep = (uint64_t)b->fadeFrames;
			if (keep > frames)
				keep = frames;
			fadeOut(b, r, keep);
			cut = w - r - keep;
			w = r + keep;
		} else if (w - r < frames && w > 0 && !idle) {
			// Go is late with the next frames (a busy board): wake it and give it a few
			// milliseconds, as a callback into Go would have waited for it; the device's own
			// buffer covers the wait. Only then play silence in their place.
			wake(b);
			struct timespec ms = {0, 1000000};
			for (int i = 0; i < b->graceMs && w - r < frames; i++) {
				nanosleep(&ms, NULL);
				w = __atomic_load_n(&b->w, __ATOMIC_ACQUIRE);
			}
		}
		uint64_t n = frames < w - r ? frames : w - r;
		ringCopy(b, r, o, n, 0);
		memset(o + n * (uint64_t)b->channels, 0, (frames - n) * (uint64_t)b->channels * sizeof(float));
		if (n < frames && w > 0 && !flush && !idle)
			__atomic_fetch_add(&b->dropped, frames - n, __ATOMIC_RELAXED);
		b->rec[rw % OMNISAT_RECORDS] = (omnisatRecord){
			.at = at, .pos = r, .frames = frames, .filled = n, .lost = b->lost, .cut = cut, .flags = flags};
		b->lost = 0;
		__atomic_store_n(&b->rw, rw + 1, __ATOMIC_RELEASE);
		__atomic_store_n(&b->r, r + n + cut, __ATOMIC_RELEASE);
		// Someone waits for what was played (the microphone, for its echo reference): wake Go
		// now, however much is queued. Wake it too once the records are three quarters
		// used, before their running out turns what is queued into silence counted lost.
		int eager = __atomic_exchange_n(&b->eager, 0, __ATOMIC_ACQ_REL);
		if ((w - (r + n) >= frames || idle) && !eager && rw + 1 - rr < OMNISAT_RECORDS * 3 / 4)
			return paContinue; // the next buffer is queued already, or silence will do: Go refills later
	}
	wake(b);
	return paContinue;
}

// PortAudio calls this when the stream stops for any reason, from its own thread: the ALSA
// host's callback thread runs it as it exits, also when it gave up on a failed device.
void omnisatBridgeFinished(void *user) {
	omnisatBridge *b = user;
	__atomic_store_n(&b->finished, 1, __ATOMIC_RELEASE);
	wake(b);
}
