package pipeline

import (
	"fmt"
	"math"
)

// Mixdown, as the channel argument of the ToMono conversions, averages all channels.
const Mixdown = -1

// Scales between integer PCM and float32 samples. Dividing by 2^15 (not 32767) makes
// int16 → float32 → int16 lossless; the price is that +1.0 clips to 32767.
const (
	int16Scale = 1.0 / 32768
	int32Scale = 1.0 / 2147483648
)

// The ToMono conversions turn one device buffer of interleaved frames into mono float32 in
// [-1, 1]. They write into dst's backing array, returning dst[:frames], and allocate only when
// cap(dst) < frames. channel picks one channel (0-based) or Mixdown for the average of all;
// gain multiplies the result (1 leaves it alone), which is then clipped to [-1, 1]. They fail
// when channels < 1, channel is neither Mixdown nor in [0, channels), or src holds a partial
// frame (a device buffer always holds whole frames, so that is a bug upstream, not audio).

// Int16ToMono converts interleaved int16 PCM to mono float32; see the ToMono notes above.
func Int16ToMono(dst []float32, src []int16, channels, channel int, gain float32) ([]float32, error) {
	frames, err := checkFrames(len(src), channels, channel)
	if err != nil {
		return dst[:0], err
	}
	dst = resize(dst, frames)
	switch {
	case channels == 1:
		g := gain * int16Scale
		for i, v := range src[:frames] {
			dst[i] = clip(float32(v) * g)
		}
	case channel != Mixdown:
		g := gain * int16Scale
		for i := range dst {
			dst[i] = clip(float32(src[i*channels+channel]) * g)
		}
	case channels == 2: // the common USB microphone: worth a loop of its own
		g := gain * int16Scale / 2
		if gain >= -1 && gain <= 1 { // the result cannot leave [-1, 1]: no clipping
			for i := range dst {
				f := (*[2]int16)(src[2*i:]) // one bounds check per frame
				dst[i] = float32(int32(f[0])+int32(f[1])) * g
			}
			break
		}
		for i := range dst {
			f := (*[2]int16)(src[2*i:]) // one bounds check per frame
			dst[i] = clip(float32(int32(f[0])+int32(f[1])) * g)
		}
	default:
		g := gain * int16Scale / float32(channels)
		for i := range dst {
			var sum int32 // exact: at most 2^15 × channels
			for _, v := range src[i*channels : i*channels+channels] {
				sum += int32(v)
			}
			dst[i] = clip(float32(sum) * g)
		}
	}
	return dst, nil
}

// Int32ToMono converts interleaved int32 PCM (full-scale 32-bit, as ALSA's S32 and S24 in the
// high bits) to mono float32; see the ToMono notes above.
func Int32ToMono(dst []float32, src []int32, channels, channel int, gain float32) ([]float32, error) {
	frames, err := checkFrames(len(src), channels, channel)
	if err != nil {
		return dst[:0], err
	}
	dst = resize(dst, frames)
	if channel != Mixdown || channels == 1 {
		channel = max(channel, 0)
		g := float64(gain) * int32Scale
		for i := range dst {
			dst[i] = clip(float32(float64(src[i*channels+channel]) * g))
		}
		return dst, nil
	}
	g := float64(gain) * int32Scale / float64(channels)
	for i := range dst {
		var sum int64 // exact for any channel count
		for _, v := range src[i*channels : i*channels+channels] {
			sum += int64(v)
		}
		dst[i] = clip(float32(float64(sum) * g))
	}
	return dst, nil
}

// Float32ToMono converts interleaved float32 samples to mono; see the ToMono notes above. NaN
// becomes 0, so one bad sample cannot poison a filter downstream. dst may be src itself: frame
// i is written only after it has been read.
func Float32ToMono(dst, src []float32, channels, channel int, gain float32) ([]float32, error) {
	frames, err := checkFrames(len(src), channels, channel)
	if err != nil {
		return dst[:0], err
	}
	dst = resize(dst, frames)
	if channel != Mixdown || channels == 1 {
		channel = max(channel, 0)
		for i := range dst {
			dst[i] = clip(src[i*channels+channel] * gain)
		}
		return dst, nil
	}
	g := gain / float32(channels)
	for i := range dst {
		var sum float32
		for _, v := range src[i*channels : i*channels+channels] {
			sum += v
		}
		dst[i] = clip(sum * g)
	}
	return dst, nil
}

// Float32ToInt16 converts samples to int16 PCM for a speaker, writing into dst's backing array
// (allocating only when cap(dst) < len(src)) and returning dst[:len(src)]. It scales by 32768,
// rounds to nearest (halves up), clips to [-32768, 32767] and turns NaN into 0.
func Float32ToInt16(dst []int16, src []float32) []int16 {
	if cap(dst) < len(src) {
		dst = make([]int16, len(src))
	}
	dst = dst[:len(src)]
	for i, s := range src {
		// Offset into [0, 65535] so truncation rounds: no data-dependent sign branch, which
		// audio would mispredict half the time. Exact in float64.
		v := float64(s)*32768 + 32768.5
		if v > 65535 {
			v = 65535
		}
		if !(v >= 0) {
			v = 0
			if s != s { // NaN
				v = 32768
			}
		}
		dst[i] = int16(int32(v) - 32768)
	}
	return dst
}

// checkFrames validates a ToMono call and returns the number of frames in n samples.
func checkFrames(n, channels, channel int) (int, error) {
	if channels < 1 {
		return 0, fmt.Errorf("pipeline: %d channels: need at least 1", channels)
	}
	if channel != Mixdown && (channel < 0 || channel >= channels) {
		return 0, fmt.Errorf("pipeline: channel %d out of range for %d channels (0..%d, or Mixdown)", channel, channels, channels-1)
	}
	if n%channels != 0 {
		return 0, fmt.Errorf("pipeline: %d samples is not a whole number of %d-channel frames", n, channels)
	}
	return n / channels, nil
}

// resize returns dst with length n, reusing its backing array when it is big enough.
func resize(dst []float32, n int) []float32 {
	if cap(dst) < n {
		return make([]float32, n)
	}
	return dst[:n]
}

// clipInto writes clip(v) for every sample of src into dst (at least as long). Audio within
// range, nearly every sample played, is one vector pass over its magnitudes (magnitudeBits)
// and a copy; a block with a sample out of range or a NaN is clipped sample by sample, with
// one integer comparison on each magnitude's bits instead of clip's three floating-point ones.
func clipInto(dst, src []float32) {
	dst = dst[:len(src)]
	if magnitudeBits(src) <= oneBits {
		copy(dst, src)
		return
	}
	for i, v := range src {
		if math.Float32bits(v)&^signBit > oneBits {
			v = clip(v)
		}
		dst[i] = v
	}
}

// PeakAbove is the largest magnitude in block, or peak (≥ 0) if that is larger: a peak meter
// over played audio, on every sample a speaker without a device plays. It compares the
// magnitudes' bits as integers (non-negative floats order as their bits do), branch-free and
// in vector registers where there are some (magnitudeBits). A NaN anywhere makes the result
// NaN, as the builtin max does (played audio holds none: Playback clips it).
func PeakAbove(peak float32, block []float32) float32 {
	return math.Float32frombits(max(math.Float32bits(peak), magnitudeBits(block)))
}

// AllFinite reports whether every sample of s is finite: no magnitude reaches an infinity's
// bits (a NaN's lie above them). Decoders of outside audio check with it before anything plays.
func AllFinite(s []float32) bool { return magnitudeBits(s) < infBits }

// magnitudeBitsGo is magnitudeBits in Go: four running maxima, then the tail.
func magnitudeBitsGo(block []float32) uint32 {
	var m0, m1, m2, m3 uint32
	for len(block) >= 4 {
		b := (*[4]float32)(block)
		m0 = max(m0, math.Float32bits(b[0])&^signBit)
		m1 = max(m1, math.Float32bits(b[1])&^signBit)
		m2 = max(m2, math.Float32bits(b[2])&^signBit)
		m3 = max(m3, math.Float32bits(b[3])&^signBit)
		block = block[4:]
	}
	for _, v := range block {
		m0 = max(m0, math.Float32bits(v)&^signBit)
	}
	return max(m0, m1, m2, m3)
}

// foldLanes is the largest of the vector kernels' lanes, which hold magnitudes' bits shifted
// left by one (a shift drops the sign as well as a mask, and needs no constant), shifted back.
func foldLanes(lanes []uint32) uint32 {
	var m uint32
	for _, v := range lanes {
		m = max(m, v)
	}
	return m >> 1
}

// The bits of a float32's sign, of 1.0 and of +Inf.
const (
	signBit = 1 << 31
	oneBits = 0x3f800000
	infBits = 0x7f800000
)

// clip limits v to [-1, 1] and turns NaN into 0.
func clip(v float32) float32 {
	switch {
	case v > 1:
		return 1
	case v < -1:
		return -1
	case v == v:
		return v
	default: // NaN
		return 0
	}
}
