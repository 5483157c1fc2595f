package pipeline

// magnitudeBits is the largest of x's samples' bits with the sign dropped (see PeakAbove):
// with NEON (every arm64 processor has it), 16 samples a round in four accumulators of four
// lanes (magnitude_arm64.s), the rest in Go.
func magnitudeBits(x []float32) uint32 {
	if len(x) < 16 {
		return magnitudeBitsGo(x)
	}
	whole := len(x) &^ 15
	var lanes [8]uint32
	magnitudeBitsNEON(x[:whole], &lanes)
	return max(foldLanes(lanes[:4]), magnitudeBitsGo(x[whole:]))
}

// magnitudeBitsNEON leaves in lanes[:4] the largest bits<<1 of x's samples, lane by lane;
// len(x) must be a multiple of 16.
//
//go:noescape
func magnitudeBitsNEON(x []float32, lanes *[8]uint32)
