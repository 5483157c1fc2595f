package pipeline

import "golang.org/x/sys/cpu"

// quantize16Into converts src into dst (len(dst) == len(src)): with AVX2, 16 samples a round
// (sample16_amd64.s), the rest in Go.
func quantize16Into(dst []int16, src []float32) {
	whole := 0
	if cpu.X86.HasAVX2 {
		whole = len(src) &^ 15
		if whole > 0 {
			quantize16AVX2(dst[:whole], src[:whole])
		}
	}
	quantize16Go(dst[whole:len(src)], src[whole:])
}

// dequantize16Into converts src into dst (len(dst) == len(src)): with AVX2, 16 samples a
// round, the rest in Go.
func dequantize16Into(dst []float32, src []int16) {
	whole := 0
	if cpu.X86.HasAVX2 {
		whole = len(src) &^ 15
		if whole > 0 {
			dequantize16AVX2(dst[:whole], src[:whole])
		}
	}
	dequantize16Go(dst[whole:len(src)], src[whole:])
}

// quantize16AVX2 and dequantize16AVX2 convert len(src) samples, a multiple of 16; dst is as
// long.
//
//go:noescape
func quantize16AVX2(dst []int16, src []float32)

//go:noescape
func dequantize16AVX2(dst []float32, src []int16)
