package signaltest

import (
	"math"
	"math/rand/v2"
	"time"
)

// SpeechLike is a stand-in for speech that needs no files: noise shaped into syllables (a
// 4 Hz envelope with pauses) through a resonant band-pass around a moving formant, peaking at
// -6 dBFS. The same seed gives the same signal.
func SpeechLike(rate int, d time.Duration, seed uint64) []float32 {
	rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	n := int(d.Seconds() * float64(rate))
	out := make([]float32, n)
	var y1, y2 float64
	for i := range out {
		t := float64(i) / float64(rate)
		env := math.Max(0, math.Sin(2*math.Pi*3.7*t+float64(seed))) * (0.6 + 0.4*math.Sin(2*math.Pi*0.31*t))
		f := 500 + 900*(0.5+0.5*math.Sin(2*math.Pi*0.8*t+float64(seed)))
		r := 0.97
		w := 2 * math.Pi * f / float64(rate)
		x := rng.NormFloat64()
		y := x + 2*r*math.Cos(w)*y1 - r*r*y2
		y2, y1 = y1, y
		out[i] = float32(env * y)
	}
	// Normalise to a peak of -6 dBFS: the resonator's gain depends on the rate.
	var peak float32
	for _, v := range out {
		peak = max(peak, v, -v)
	}
	for i := range out {
		out[i] *= 0.5 / peak
	}
	return out
}

// Room is an echo path: a bulk delay, then gain and an exponentially decaying, randomly signed
// 40 ms tail.
func Room(rate int, delay time.Duration, gain float64, seed uint64) []float64 {
	rng := rand.New(rand.NewPCG(seed, 7))
	d := int(delay.Seconds() * float64(rate))
	tail := rate * 40 / 1000
	h := make([]float64, d+tail)
	h[d] = gain
	for i := 1; i < tail; i++ {
		h[d+i] = gain * 0.3 * rng.NormFloat64() * math.Exp(-float64(i)/float64(tail/6))
	}
	return h
}

// Convolve is x through the impulse response h (as long as x).
func Convolve(x []float32, h []float64) []float32 {
	out := make([]float32, len(x))
	for i := range x {
		var acc float64
		for k, hk := range h {
			if hk == 0 || i-k < 0 {
				continue
			}
			acc += hk * float64(x[i-k])
		}
		out[i] = float32(acc)
	}
	return out
}

// LevelDB is the mean power of s in dBFS (-200 for silence).
func LevelDB(s []float32) float64 {
	var e float64
	for _, v := range s {
		e += float64(v) * float64(v)
	}
	return 10 * math.Log10(e/float64(max(len(s), 1))+1e-20)
}
