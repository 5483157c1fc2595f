package pipeline

import "golang.org/x/sys/cpu"

// dot is the resampler's inner product of h and x (len(x) ≥ len(h), len(h) a multiple of 16),
// the hot loop of every sample-rate conversion: with AVX2 and FMA, eight taps per instruction
// in four independent accumulators (dot_amd64.s); dotGo on older processors. Each form always
// sums in the same order, so a stream gives the same output however it is chunked.
func dot(h, x []float32) float32 {
	x = x[:len(h)]
	if cpu.X86.HasAVX2 && cpu.X86.HasFMA {
		return dotAVX2(h, x)
	}
	return dotGo(h, x)
}

// dotAVX2 is dot with AVX2 and FMA; len(h) must be a multiple of 16 and len(x) at least len(h).
//
//go:noescape
func dotAVX2(h, x []float32) float32
