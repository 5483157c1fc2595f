package pipeline

import (
	"math"
	"math/cmplx"
	"testing"
)

// TestFractionalDelayResponse measures the interpolator against an ideal delay: for every
// fraction, a sinusoid read between its samples is the sinusoid at that time, within -50 dB up
// to 0.44 of the sample rate; linear interpolation misses by far more (checked too, so that the
// measure itself can fail).
func TestFractionalDelayResponse(t *testing.T) {
	d := NewFractionalDelay()
	worst := func(read func(x []float32, frac float64) float32) (db float64, at float64) {
		var w float64
		for _, f := range []float64{0.01, 0.1, 0.2, 0.3, 0.35, 0.4, 0.42, 0.44} {
			for p := 0; p <= 97; p++ { // off the table's grid: its rounding counts too
				frac := float64(p) / 97
				// The complex response: read cos and sin, compare with the ideal value at the position.
				x := make([]float32, FractionalTaps)
				y := make([]float32, FractionalTaps)
				for k := range x {
					ph := 2 * math.Pi * f * float64(k-FractionalBefore)
					x[k], y[k] = float32(math.Cos(ph)), float32(math.Sin(ph))
				}
				got := complex(float64(read(x, frac)), float64(read(y, frac)))
				want := cmplx.Exp(complex(0, 2*math.Pi*f*frac))
				if e := cmplx.Abs(got - want); e > w {
					w, at = e, f
				}
			}
		}
		return 20 * math.Log10(w), at
	}
	db, f := worst(d.At)
	if db > -50 {
		t.Errorf("windowed sinc: worst error %.1f dB (at %.2f of the rate), want ≤ -50 dB", db, f)
	}
	linear := func(x []float32, frac float64) float32 {
		return float32((1-frac)*float64(x[FractionalBefore]) + frac*float64(x[FractionalBefore+1]))
	}
	if ldb, _ := worst(linear); ldb < -20 {
		t.Errorf("linear interpolation: worst error %.1f dB; the measure cannot tell it from the sinc", ldb)
	}
	t.Logf("worst error: windowed sinc %.1f dB at %.2f of the rate", db, f)
}

// TestFractionalDelayExactAtSamples: at fraction 0 and 1 it returns the samples themselves.
func TestFractionalDelayExactAtSamples(t *testing.T) {
	d := NewFractionalDelay()
	x := make([]float32, FractionalTaps)
	for k := range x {
		x[k] = float32(math.Sin(float64(k) * 1.3))
	}
	if got, want := d.At(x, 0), x[FractionalBefore]; math.Abs(float64(got-want)) > 1e-6 {
		t.Errorf("At(0) = %v, want %v", got, want)
	}
	if got, want := d.At(x, 1), x[FractionalBefore+1]; math.Abs(float64(got-want)) > 1e-6 {
		t.Errorf("At(1) = %v, want %v", got, want)
	}
}

func BenchmarkFractionalDelay(b *testing.B) {
	d := NewFractionalDelay()
	x := make([]float32, FractionalTaps+1600)
	b.SetBytes(4 * 1600)
	for b.Loop() {
		for i := 0; i < 1600; i++ {
			_ = d.At(x[i:], 0.37)
		}
	}
}

// BenchmarkNewFractionalDelay is the table's cost, paid at each microphone open with echo
// cancellation: start-up CPU.
func BenchmarkNewFractionalDelay(b *testing.B) {
	for b.Loop() {
		NewFractionalDelay()
	}
}
