package pipeline

import (
	"math"
	"math/rand/v2"
	"testing"
)

// plainMagnitudeBits is the definition magnitudeBits must meet, one sample at a time.
func plainMagnitudeBits(x []float32) uint32 {
	var m uint32
	for _, v := range x {
		m = max(m, math.Float32bits(v)&^signBit)
	}
	return m
}

// oddSamples are values whose bits a vector kernel could get wrong: signs, zeros, the edges of
// the range, infinities and NaNs with different payloads and signs.
var oddSamples = []float32{
	0, float32(math.Copysign(0, -1)), 1, -1, math.Nextafter32(1, 2), math.Nextafter32(-1, -2),
	math.SmallestNonzeroFloat32, -math.SmallestNonzeroFloat32, math.MaxFloat32, -math.MaxFloat32,
	float32(math.Inf(1)), float32(math.Inf(-1)), math.Float32frombits(0x7fc00000),
	math.Float32frombits(0xffc00001), math.Float32frombits(0x7f800001), math.Float32frombits(0xffffffff),
}

// TestMagnitudeBitsMatchesPlain holds the vector kernels (and their tails in Go) to the
// one-sample-at-a-time definition: every length up to a few rounds, every start within a
// vector (unaligned loads), the largest magnitude at every position, odd values anywhere.
func TestMagnitudeBitsMatchesPlain(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	buf := make([]float32, 300)
	for n := 0; n <= 200; n++ {
		for off := range 9 {
			x := buf[off : off+n]
			for i := range x {
				x[i] = rng.Float32()*2 - 1
			}
			if got, want := magnitudeBits(x), plainMagnitudeBits(x); got != want {
				t.Fatalf("%d samples at offset %d: %#x, want %#x", n, off, got, want)
			}
			if n == 0 {
				continue
			}
			at := rng.IntN(n)
			for _, odd := range oddSamples {
				saved := x[at]
				x[at] = odd
				if got, want := magnitudeBits(x), plainMagnitudeBits(x); got != want {
					t.Fatalf("%d samples at offset %d, %v (%#x) at %d: %#x, want %#x", n, off, odd, math.Float32bits(odd), at, got, want)
				}
				x[at] = saved
			}
		}
	}
}

// TestClipIntoMatchesClip checks the vector decision of clipInto: blocks within range are
// copied as they are, and a block with one sample out of range or a NaN anywhere is clipped
// exactly as clip does, sample by sample.
func TestClipIntoMatchesClip(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	src := make([]float32, 100)
	dst := make([]float32, 100)
	for n := 1; n <= len(src); n++ {
		for trial := range 4 {
			x := src[:n]
			for i := range x {
				x[i] = rng.Float32()*2 - 1
			}
			if trial > 0 {
				x[rng.IntN(n)] = oddSamples[rng.IntN(len(oddSamples))]
			}
			clipInto(dst, x)
			for i, v := range x {
				if got, want := dst[i], clip(v); math.Float32bits(got) != math.Float32bits(want) {
					t.Fatalf("%d samples, trial %d: clipInto(%v) at %d = %v, want %v", n, trial, v, i, got, want)
				}
			}
		}
	}
}

// BenchmarkPeakAboveSecond is the peak meter over a second of 24 kHz reply audio, in the
// 100 ms blocks a speaker plays it in.
func BenchmarkPeakAboveSecond(b *testing.B) {
	reply := make([]float32, 24000)
	for i := range reply {
		reply[i] = float32(i%101)/101 - 0.5
	}
	var peak float32
	for b.Loop() {
		for i := 0; i < len(reply); i += 2400 {
			peak = PeakAbove(peak, reply[i:i+2400])
		}
	}
	if peak == 0 {
		b.Fatal("no peak")
	}
}
