package pipeline

import "math"

// The playback queue holds 16-bit samples (see fifo). These convert its blocks: with vectors
// on amd64 (AVX2) and arm64 (NEON), sample16_*.s, and here in Go for the rest and for what is
// left of a block. Every form gives the same result to the bit (TestSample16Forms).
//
// A float32 sample x goes to the 16-bit step nearest to x·32768 (halves to even, as the vector
// conversions round), after clipping x to [-1, 1] and turning NaN into 0; +1 saturates at
// 32767. The scale is the one Int16ToMono reads PCM16 with, so 16-bit audio (an OpenVoice
// reply at the device's rate) passes through the queue unchanged.

// quantize16 is one sample's conversion.
func quantize16(x float32) int16 {
	if !(x > -1) { // below -1, or NaN
		if x != x {
			return 0
		}
		x = -1
	} else if x > 1 {
		x = 1
	}
	return int16(min(math.RoundToEven(float64(x*32768)), 32767))
}

// dequantize16 is the way back: exact, as every 16-bit step is a float32.
func dequantize16(q int16) float32 { return float32(q) * int16Scale }

func quantize16Go(dst []int16, src []float32) {
	src = src[:len(dst)]
	for i, x := range src {
		dst[i] = quantize16(x)
	}
}

func dequantize16Go(dst []float32, src []int16) {
	dst = dst[:len(src)]
	for i, q := range src {
		dst[i] = dequantize16(q)
	}
}
