package pipeline

import "golang.org/x/sys/cpu"

// magnitudeBits is the largest of x's samples' bits with the sign dropped (see PeakAbove):
// with AVX2, 32 samples a round in four accumulators of eight lanes (magnitude_amd64.s), the
// rest in Go.
func magnitudeBits(x []float32) uint32 {
	if !cpu.X86.HasAVX2 || len(x) < 32 {
		return magnitudeBitsGo(x)
	}
	whole := len(x) &^ 31
	var lanes [8]uint32
	magnitudeBitsAVX2(x[:whole], &lanes)
	return max(foldLanes(lanes[:]), magnitudeBitsGo(x[whole:]))
}

// magnitudeBitsAVX2 leaves in lanes the largest bits<<1 of x's samples, lane by lane;
// len(x) must be a multiple of 32.
//
//go:noescape
func magnitudeBitsAVX2(x []float32, lanes *[8]uint32)
