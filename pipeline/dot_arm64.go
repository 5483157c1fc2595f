package pipeline

// dot is the resampler's inner product of h and x (len(x) ≥ len(h), len(h) a multiple of 16),
// the hot loop of every sample-rate conversion: with NEON (every arm64 processor has it), four
// taps per instruction in four independent accumulators (dot_arm64.s). It always sums in the
// same order, so a stream gives the same output however it is chunked.
func dot(h, x []float32) float32 {
	x = x[:len(h)]
	return dotNEON(h, x)
}

// dotNEON is dot with NEON; len(h) must be a multiple of 16 and len(x) at least len(h).
//
//go:noescape
func dotNEON(h, x []float32) float32
