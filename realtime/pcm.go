package realtime

import (
	"encoding/base64"
	"encoding/binary"
	"fmt"
	"math"
	"slices"
	"sync"
	"sync/atomic"
	"unsafe"

	asmbase64 "github.com/segmentio/asm/base64"

	"github.com/omnisat/omnisat/pipeline"
)

// The audio and frames of every message go through base64: a second of audio is 64 KB each
// way. github.com/segmentio/asm's base64 (SIMD on amd64 and arm64, encoding/base64 for the rest
// of the input and everywhere else) does it about ten times faster than encoding/base64
// (BenchmarkEncodeChunk1s, BenchmarkDecodeAudioDelta1s). encoding/base64 stays the reference:
// FuzzBase64MatchesStd holds both to the same output, and it words every error.
var fastBase64 = asmbase64.StdEncoding

// appendBase64 appends src in standard base64, as base64.StdEncoding.AppendEncode does.
func appendBase64(dst, src []byte) []byte {
	n := fastBase64.EncodedLen(len(src))
	dst = slices.Grow(dst, n)
	fastBase64.Encode(dst[len(dst):len(dst)+n], src)
	return dst[:len(dst)+n]
}

// decodeBase64 decodes standard base64 src into dst (at least DecodedLen(len(src)) long), as
// base64.StdEncoding.Decode does, with its errors.
func decodeBase64(dst, src []byte) (int, error) {
	n, err := fastBase64.Decode(dst, src)
	if err != nil {
		// The fast decoder counts an error's offset from where its vector part stopped.
		return base64.StdEncoding.Decode(dst, src)
	}
	return n, nil
}

// appendFloat32Base64 appends samples as base64 of float32 little-endian PCM, the MiniCPM-o audio
// encoding, without an intermediate string.
func appendFloat32Base64(dst []byte, samples []float32) []byte {
	if nativeLittleEndian {
		if len(samples) == 0 {
			return dst
		}
		return appendBase64(dst, unsafe.Slice((*byte)(unsafe.Pointer(&samples[0])), 4*len(samples)))
	}
	// Encode in blocks of 3 samples (12 bytes -> 16 base64 chars) so no padding appears mid-stream.
	var raw [12 * 64]byte
	for len(samples) > 0 {
		n := min(len(samples), len(raw)/4)
		if len(samples) > n {
			n -= n % 3
		}
		for i, s := range samples[:n] {
			binary.LittleEndian.PutUint32(raw[4*i:], math.Float32bits(s))
		}
		dst = appendBase64(dst, raw[:4*n])
		samples = samples[n:]
	}
	return dst
}

// nativeLittleEndian: float32 samples in memory are the wire's little-endian bytes (amd64, arm64),
// so base64 decodes straight into the sample buffer.
var nativeLittleEndian = binary.NativeEndian.Uint16([]byte{1, 0}) == 1

// decodeFloat32Base64 decodes base64 float32 little-endian PCM straight into a new sample buffer,
// with no intermediate copy. It rejects bad base64, a byte count that is not whole samples, and
// NaN or infinite samples (garbage that would wreck playback). src is only read.
func decodeFloat32Base64(src []byte) ([]float32, error) { return decodeFloat32Base64Into(nil, src) }

// decodeFloat32Base64Into is decodeFloat32Base64 into a buffer from pool (nil: a new one).
func decodeFloat32Base64Into(pool *samplePool, src []byte) ([]float32, error) {
	out := pool.get((base64.StdEncoding.DecodedLen(len(src)) + 3) / 4)
	var raw []byte
	if nativeLittleEndian && len(out) > 0 {
		raw = unsafe.Slice((*byte)(unsafe.Pointer(&out[0])), 4*len(out))
	} else {
		raw = make([]byte, 4*len(out))
	}
	n, err := decodeBase64(raw, src)
	if err != nil {
		pool.put(out)
		return nil, fmt.Errorf("audio is not valid base64: %v", err)
	}
	if n%4 != 0 {
		pool.put(out)
		return nil, fmt.Errorf("audio has %d bytes, not a whole number of float32 samples", n)
	}
	out = out[:n/4]
	if !nativeLittleEndian {
		for i := range out {
			out[i] = math.Float32frombits(binary.LittleEndian.Uint32(raw[4*i:]))
		}
	}
	if pipeline.AllFinite(out) {
		return out, nil
	}
	for i, v := range out {
		if !finite(v) {
			pool.put(out)
			return nil, fmt.Errorf("audio sample %d is %v, not a finite number", i, v)
		}
	}
	return out, nil
}

// finite: the exponent is not all ones (Inf or NaN).
func finite(v float32) bool { return math.Float32bits(v)&0x7f800000 != 0x7f800000 }

// samplePool keeps reply sample buffers that the caller handed back (Session's RecycleAudio) for
// the next audio deltas, so that a second of reply audio a second does not cost a new 96 KB
// buffer (and the page faults of fresh memory) each time. A nil pool allocates.
type samplePool struct {
	mu   sync.Mutex
	free [][]float32
	made atomic.Int64 // buffers made for the pool (none kept was long enough)
}

// The pool keeps a few buffers, none longer than ten seconds of 24 kHz audio.
const (
	maxPooledBuffers = 4
	maxPooledSamples = 10 * OutputSampleRate
	pooledSizeStep   = OutputSampleRate / 2
)

// get returns a buffer of n samples (its contents are whatever they were).
func (p *samplePool) get(n int) []float32 {
	if p != nil {
		p.mu.Lock()
		for i := len(p.free) - 1; i >= 0; i-- {
			if b := p.free[i]; cap(b) >= n {
				p.free = slices.Delete(p.free, i, i+1)
				p.mu.Unlock()
				return b[:n]
			}
		}
		p.mu.Unlock()
		if n <= maxPooledSamples {
			p.made.Add(1)
			// Rounded up to half a second, so that a buffer serves the next delta of a
			// similar length instead of missing it by a few samples.
			return make([]float32, n, (n+pooledSizeStep-1)/pooledSizeStep*pooledSizeStep)
		}
	}
	return make([]float32, n)
}

// put keeps b for a later get; nothing may use b afterwards.
func (p *samplePool) put(b []float32) {
	if p == nil || cap(b) == 0 || cap(b) > maxPooledSamples {
		return
	}
	p.mu.Lock()
	if len(p.free) < maxPooledBuffers {
		p.free = append(p.free, b[:0])
	}
	p.mu.Unlock()
}

// stringBytes views s as bytes without copying; the bytes must only be read.
func stringBytes(s string) []byte { return unsafe.Slice(unsafe.StringData(s), len(s)) }

// appendPCM16 appends samples as signed 16-bit little-endian PCM, clipping to [-1, 1].
func appendPCM16(dst []byte, samples []float32) []byte {
	dst = slices.Grow(dst, 2*len(samples))
	for _, s := range samples {
		v := s * 32767
		switch {
		case v > 32767:
			v = 32767
		case v < -32768:
			v = -32768
		case v != v: // NaN
			v = 0
		}
		dst = binary.LittleEndian.AppendUint16(dst, uint16(int16(v)))
	}
	return dst
}

// decodePCM16 turns signed 16-bit little-endian PCM into samples in [-1, 1).
func decodePCM16(raw []byte) ([]float32, error) { return decodePCM16Into(nil, raw) }

// decodePCM16Into is decodePCM16 into a buffer from pool (nil: a new one).
func decodePCM16Into(pool *samplePool, raw []byte) ([]float32, error) {
	if len(raw)%2 != 0 {
		return nil, fmt.Errorf("PCM16 frame has %d bytes, not a whole number of samples", len(raw))
	}
	out := pool.get(len(raw) / 2)
	for i := range out {
		out[i] = float32(int16(binary.LittleEndian.Uint16(raw[2*i:]))) / 32768
	}
	return out, nil
}
