// The bridge between PortAudio's thread and Go (see bridge.c).
#ifndef OMNISAT_BRIDGE_H
#define OMNISAT_BRIDGE_H

#include <stdint.h>
#include <portaudio.h>

// Records of device buffers not yet read by Go: more than a patient microphone's block (a second)
// of 5 ms buffers, the shortest ALSA commonly gives, so that Go may sleep through a block.
#define OMNISAT_RECORDS 256

// One device buffer: when its first frame met the converter (PortAudio's stream clock), where
// it starts in the ring's frame count, how many frames it held and (output) how many of them
// came from the ring (the rest was silence), how many frames just before it Go never saw
// (input lost because Go was a whole ring behind; output played as silence when there was no
// room to record it), (output) how many queued frames after it a flush dropped unplayed, and
// PortAudio's status flags (an xrun: the host restarted the device).
typedef struct {
	double at;
	uint64_t pos;
	uint64_t frames;
	uint64_t filled;
	uint64_t lost;
	uint64_t cut;
	uint64_t flags;
} omnisatRecord;

// A single-producer, single-consumer ring of float32 frames (interleaved for output, one
// channel for input) between the stream callback and Go, with a record per callback and an
// eventfd that wakes Go once per buffer.
// Counters only grow; each side stores its own with release and loads the other's with acquire.
typedef struct {
	float *data;
	uint64_t cap;     // frames
	uint64_t w;       // frames written: by the callback (input) or by Go (output)
	uint64_t r;       // frames read: by Go (input) or by the callback (output)
	omnisatRecord rec[OMNISAT_RECORDS];
	uint64_t rw, rr;  // records written (callback) and read (Go)
	uint64_t dropped; // input: frames lost because Go fell a ring behind; output: silence played because Go was late
	uint64_t lost;    // the callback's own: frames since the last record that no record reports yet
	int32_t finished; // PortAudio stopped the stream
	int32_t cut;      // output: set by Go, taken by the next callback: fade out and drop what is queued
	int32_t eager;    // output: set by Go, taken by the next callback: wake Go however much is queued
	// output: set by Go while it has nothing to play: the callback plays silence where the ring
	// runs dry without waking Go or counting Go late, so that no silence need be queued.
	int32_t idle;
	int32_t fadeFrames; // output: the length of that fade
	int32_t graceMs;  // output: how long a callback waits for Go when the ring runs short
	int32_t channels; // per frame of the ring: the device's for output, one for input
	// input: the device's channels, and what of each frame the ring keeps: their sum (pick < 0;
	// the pump divides it by inChannels with the gain) or channel pick. A mono ring holds a
	// second of a stereo capture in half the memory, and Go copies half as much.
	int32_t inChannels;
	int32_t pick;
	int32_t input;
	int32_t efd;
	// input: when set, the callback wakes Go only once the frames Go has not taken reach this
	// threshold (Go sets it, atomically, before it sleeps; 1 or less: every buffer), or when the
	// ring or the records run short, or the host flags the buffer. The cell is the
	// microphone's, not the stream's, so that Go may write it while a stream is replaced.
	const int64_t *wakeAfter;
} omnisatBridge;

omnisatBridge *omnisatBridgeNew(int input, int channels, int pick, uint64_t frames, int graceMs, int fadeFrames);
void omnisatBridgeFree(omnisatBridge *b);
int omnisatBridgeCallback(const void *in, void *out, unsigned long frames,
	const PaStreamCallbackTimeInfo *timeInfo, PaStreamCallbackFlags flags, void *user);
void omnisatBridgeFinished(void *user);

#endif
