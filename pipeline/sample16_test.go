package pipeline

import (
	"math"
	"math/rand/v2"
	"testing"
)

// TestSample16: a sample goes to the nearest 16-bit step of x·32768 (halves to even), clipped,
// with NaN as 0, and comes back exactly.
func TestSample16(t *testing.T) {
	for _, c := range []struct {
		in   float32
		want int16
	}{{0, 0}, {1, 32767}, {-1, -32768}, {1.5, 32767}, {-7, -32768},
		{float32(math.Inf(1)), 32767}, {float32(math.Inf(-1)), -32768}, {float32(math.NaN()), 0},
		{0.4 / 32768, 0}, {0.6 / 32768, 1}, {-0.6 / 32768, -1}, {0.5 / 32768, 0}, {1.5 / 32768, 2}, {-2.5 / 32768, -2}} {
		if got := quantize16(c.in); got != c.want {
			t.Errorf("quantize16(%v) = %d, want %d", c.in, got, c.want)
		}
	}
	for q := math.MinInt16; q <= math.MaxInt16; q++ {
		if back := quantize16(dequantize16(int16(q))); back != int16(q) {
			t.Fatalf("%d comes back as %d", q, back)
		}
	}
	rng := rand.New(rand.NewPCG(7, 7))
	for range 100000 {
		x := float32(rng.Float64()*2.4 - 1.2)
		back := float64(dequantize16(quantize16(x)))
		if d := math.Abs(back - math.Max(-1, math.Min(1, float64(x)))); d > queueStepHalf && !(x > 32767.5/32768 && back == 32767.0/32768) { // +1 saturates
			t.Fatalf("quantize16(%v) comes back as %v", x, back)
		}
	}
}

// TestSample16Forms: the block conversions (vector code where there is some) give what the
// one-sample conversions give, at every length and offset, for ordinary audio and for the
// edges (halves, clipping, NaN, infinities, the 16-bit extremes).
func TestSample16Forms(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 9))
	src := make([]float32, 301)
	for i := range src {
		switch i % 7 {
		case 0:
			src[i] = float32(rng.IntN(65537)-32768) / 32768 // a step exactly
		case 1:
			src[i] = (float32(rng.IntN(65536)-32768) + 0.5) / 32768 // a half between two
		case 2:
			src[i] = []float32{float32(math.NaN()), float32(math.Inf(1)), float32(math.Inf(-1)), 1, -1, 1.0001, -3, 0}[rng.IntN(8)]
		default:
			src[i] = float32(rng.NormFloat64() * 0.4)
		}
	}
	q := make([]int16, len(src))
	back := make([]float32, len(src))
	for off := range 20 {
		for n := 0; off+n <= len(src); n += 1 + n/7 {
			s := src[off : off+n]
			clear(q)
			quantize16Into(q[:n], s)
			for i, x := range s {
				if want := quantize16(x); q[i] != want {
					t.Fatalf("offset %d, length %d: sample %d (%v) = %d, want %d", off, n, i, x, q[i], want)
				}
			}
			clear(back)
			dequantize16Into(back[:n], q[:n])
			for i := range n {
				if want := dequantize16(q[i]); math.Float32bits(back[i]) != math.Float32bits(want) {
					t.Fatalf("offset %d, length %d: step %d comes back as %v, want %v", off, n, q[i], back[i], want)
				}
			}
		}
	}
}

// BenchmarkSample16 is a second of 48 kHz audio into the queue and out of it.
func BenchmarkSample16(b *testing.B) {
	src := make([]float32, 48000)
	for i := range src {
		src[i] = float32(0.5 * math.Sin(float64(i)/7))
	}
	q := make([]int16, len(src))
	b.SetBytes(int64(len(src)) * 4)
	for b.Loop() {
		quantize16Into(q, src)
		dequantize16Into(src, q)
	}
}
