//go:build !amd64 && !arm64

package pipeline

// magnitudeBits is the largest of x's samples' bits with the sign dropped (see PeakAbove);
// vector versions exist for amd64 and arm64 (magnitude_*.s).
func magnitudeBits(x []float32) uint32 { return magnitudeBitsGo(x) }
