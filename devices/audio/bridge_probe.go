package audio

// bridgeProbe runs the bridge's callbacks (bridge.c) on buffers a test makes up, without
// a device or a PortAudio stream, so that a flush's fade and cut, the records, the drop counts
// and when the callback wakes Go are checked on the C code itself (bridge_test.go). Only the
// tests use it; it lives here because cgo is not allowed in test files.

/*
#include <stdint.h>
#include <unistd.h>
#include <portaudio.h>
#include "bridge.h"

static int omnisatProbeOutput(omnisatBridge *b, float *out, unsigned long frames, double at) {
	PaStreamCallbackTimeInfo ti = {0};
	ti.outputBufferDacTime = at;
	return omnisatBridgeCallback(NULL, out, frames, &ti, 0, b);
}

static int omnisatProbeInput(omnisatBridge *b, const float *in, unsigned long frames, double at,
		unsigned long flags) {
	PaStreamCallbackTimeInfo ti = {0};
	ti.inputBufferAdcTime = at;
	return omnisatBridgeCallback(in, NULL, frames, &ti, flags, b);
}

static uint64_t omnisatProbeWakes(omnisatBridge *b) {
	uint64_t n = 0;
	if (read(b->efd, &n, sizeof(n)) != sizeof(n))
		return 0;
	return n;
}
*/
import "C"

import (
	"sync/atomic"
	"unsafe"
)

// A bridge with the test standing in for both sides: for output the pump (Write, Cut, Records)
// and the device (Take); for input the device (Give) and the pump (Records).
type bridgeProbe struct {
	b            *C.omnisatBridge
	channels     int // the device's
	ringChannels int // per frame of the ring: one for input
	ring         []float32
	w, rr        uint64
}

// probeRecord is what the callback noted about one buffer (see omnisatRecord).
type probeRecord struct {
	At                             float64
	Pos, Frames, Filled, Lost, Cut uint64
	Info                           bufferInfo // what the pump makes of it
}

// newBridgeProbe makes an output bridge with a ring of ringFrames frames and a flush fade of
// fadeFrames; the callback never waits for Go (grace 0).
func newBridgeProbe(channels, ringFrames, fadeFrames int) *bridgeProbe {
	return newProbe(false, channels, 0, ringFrames, fadeFrames)
}

// newInputBridgeProbe makes an input bridge for channels channels with a ring of ringFrames
// frames, keeping their sum (pick < 0) or channel pick.
func newInputBridgeProbe(channels, pick, ringFrames int) *bridgeProbe {
	return newProbe(true, channels, pick, ringFrames, 1)
}

func newProbe(input bool, channels, pick, ringFrames, fadeFrames int) *bridgeProbe {
	b := C.omnisatBridgeNew(boolInt(input), C.int(channels), C.int(pick), C.uint64_t(ringFrames), 0, C.int(fadeFrames))
	if b == nil {
		panic("bridge probe: no memory")
	}
	return &bridgeProbe{b: b, channels: channels, ringChannels: int(b.channels), ring: bridgeRing(b, int(b.channels))}
}

// inputOverflow is PortAudio's flag for input the host lost before a buffer.
const inputOverflow = C.paInputOverflow

// Give runs an input callback for one device buffer of interleaved frames captured at at,
// with PortAudio's status flags.
func (o *bridgeProbe) Give(frames []float32, at float64, flags uint64) {
	C.omnisatProbeInput(o.b, (*C.float)(unsafe.Pointer(&frames[0])), C.ulong(len(frames)/o.channels), C.double(at), C.ulong(flags))
}

// Free releases the bridge and its eventfd.
func (o *bridgeProbe) Free() {
	C.close(o.b.efd)
	C.omnisatBridgeFree(o.b)
}

// Write queues interleaved frames behind what is queued, as the pump does.
func (o *bridgeProbe) Write(frames []float32) {
	ringWrite(o.ring, int(o.w)*o.channels, frames)
	o.w += uint64(len(frames) / o.channels)
	atomic.StoreUint64(counter(&o.b.w), o.w)
}

// Take runs the callback for one device buffer of frames and returns what it played.
func (o *bridgeProbe) Take(frames int, at float64) []float32 {
	out := make([]float32, frames*o.channels)
	C.omnisatProbeOutput(o.b, (*C.float)(unsafe.Pointer(&out[0])), C.ulong(frames), C.double(at))
	return out
}

// Eager asks the next callback to wake Go whatever is queued, as Speaker.wantPlayed does.
func (o *bridgeProbe) Eager() { atomic.StoreInt32(flag(&o.b.eager), 1) }

// SetIdle sets the idle flag, as the pump does while it has nothing to play.
func (o *bridgeProbe) SetIdle(on bool) { atomic.StoreInt32(flag(&o.b.idle), int32(boolInt(on))) }

// probeRecords is how many records of played buffers the bridge keeps.
const probeRecords = C.OMNISAT_RECORDS

// Cut asks the next callback to drop what is queued, as a flush does.
func (o *bridgeProbe) Cut() { atomic.StoreInt32(flag(&o.b.cut), 1) }

// Records returns the records written since the last call, and marks them read.
func (o *bridgeProbe) Records() []probeRecord {
	rw := atomic.LoadUint64(counter(&o.b.rw))
	var recs []probeRecord
	for ; o.rr < rw; o.rr++ {
		r := o.b.rec[o.rr%C.OMNISAT_RECORDS]
		recs = append(recs, probeRecord{At: float64(r.at), Pos: uint64(r.pos), Frames: uint64(r.frames),
			Filled: uint64(r.filled), Lost: uint64(r.lost), Cut: uint64(r.cut), Info: recordInfo(r)})
	}
	atomic.StoreUint64(counter(&o.b.rr), o.rr)
	return recs
}

// Queued is how many frames are queued ahead of the device.
func (o *bridgeProbe) Queued() uint64 { return o.w - atomic.LoadUint64(counter(&o.b.r)) }

// Ring is the ring's frames from position pos on (n frames), as the pump reads them.
func (o *bridgeProbe) Ring(pos uint64, n int) []float32 {
	out := make([]float32, n*o.ringChannels)
	ringRead(o.ring, int(pos)*o.ringChannels, out)
	return out
}

// Wakes is how many times the callback woke Go since the last call.
func (o *bridgeProbe) Wakes() uint64 { return uint64(C.omnisatProbeWakes(o.b)) }

// Dropped is the bridge's count of frames played as silence because Go was late.
func (o *bridgeProbe) Dropped() uint64 { return atomic.LoadUint64(counter(&o.b.dropped)) }
