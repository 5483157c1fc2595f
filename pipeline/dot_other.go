//go:build !amd64 && !arm64

package pipeline

// dot is the resampler's inner product of h and x (len(x) ≥ len(h), len(h) a multiple of 16);
// vector versions exist for amd64 and arm64 (dot_*.s).
func dot(h, x []float32) float32 { return dotGo(h, x) }
