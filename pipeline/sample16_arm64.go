package pipeline

// quantize16Into converts src into dst (len(dst) == len(src)): with NEON (every arm64
// processor has it), 8 samples a round (sample16_arm64.s), the rest in Go.
func quantize16Into(dst []int16, src []float32) {
	whole := len(src) &^ 7
	if whole > 0 {
		quantize16NEON(dst[:whole], src[:whole])
	}
	quantize16Go(dst[whole:len(src)], src[whole:])
}

// dequantize16Into converts src into dst (len(dst) == len(src)): with NEON, 8 samples a
// round, the rest in Go.
func dequantize16Into(dst []float32, src []int16) {
	whole := len(src) &^ 7
	if whole > 0 {
		dequantize16NEON(dst[:whole], src[:whole])
	}
	dequantize16Go(dst[whole:len(src)], src[whole:])
}

// quantize16NEON and dequantize16NEON convert len(src) samples, a multiple of 8; dst is as
// long.
//
//go:noescape
func quantize16NEON(dst []int16, src []float32)

//go:noescape
func dequantize16NEON(dst []float32, src []int16)
