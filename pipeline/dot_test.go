package pipeline

import (
	"math"
	"math/rand/v2"
	"testing"
)

// TestDotMatchesPlainGo holds the resampler's vector inner product (dot_*.s where the
// architecture has one) to the plain Go one, for every length a filter can have up to 1024
// taps, windows at every alignment and values from tiny to large: the two may differ only by
// float32 rounding, bounded by the sum of the products' magnitudes.
func TestDotMatchesPlainGo(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for taps := 16; taps <= 1024; taps += 16 {
		h := make([]float32, taps)
		x := make([]float32, taps+8)
		for trial := range 4 {
			scale := float32(math.Pow(10, float64(trial*3-4))) // 1e-4 .. 1e5
			for i := range h {
				h[i] = float32(rng.NormFloat64()) / float32(taps)
			}
			for i := range x {
				x[i] = scale * float32(rng.NormFloat64())
			}
			for off := range 8 { // every alignment of the window within a cache line's floats
				w := x[off : off+taps]
				got, want := dot(h, w), dotGo(h, w)
				var mag float64
				for i := range h {
					mag += math.Abs(float64(h[i]) * float64(w[i]))
				}
				if d := math.Abs(float64(got) - float64(want)); d > 1e-5*mag || math.IsNaN(float64(got)) {
					t.Fatalf("taps %d, scale %g, offset %d: dot %g, plain Go %g (difference %g, bound %g)",
						taps, scale, off, got, want, d, 1e-5*mag)
				}
			}
		}
	}
}

// TestDotExact checks the vector inner product on sums float32 holds exactly (small integers),
// tap by tap: a tap it skips, reads twice or takes from the wrong place changes the result.
func TestDotExact(t *testing.T) {
	for taps := 16; taps <= 512; taps += 16 {
		h := make([]float32, taps)
		x := make([]float32, taps+3) // a longer window: only the first taps count
		var want float32
		for i := range h {
			h[i] = float32(i%7 + 1)
			x[i] = float32(i%5 + 1 + i/16)
			want += h[i] * x[i]
		}
		x[taps], x[taps+1], x[taps+2] = 1e9, 1e9, 1e9
		if got := dot(h, x); got != want {
			t.Fatalf("taps %d: dot %g, want %g", taps, got, want)
		}
	}
}

func BenchmarkDot(b *testing.B) {
	h, x := make([]float32, 288), make([]float32, 288) // 48 kHz → 16 kHz
	for i := range h {
		h[i], x[i] = float32(i)/288, float32(288-i)/288
	}
	var s float32
	for b.Loop() {
		s += dot(h, x)
	}
	if s == 42 {
		b.Log(s)
	}
}
