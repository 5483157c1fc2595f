package pipeline

import (
	"math"
	"testing"
)

// The quality promises, measured with sines for every ratio in ratios:
//
//   - passband: a sine from DC to 0.9 × the lower rate's Nyquist frequency keeps its amplitude
//     within ±0.1 dB;
//   - stopband: everything else in the output (aliases of sines above the output's Nyquist
//     frequency when downsampling, images above the input's Nyquist frequency when
//     upsampling, and whatever else the polyphase structure leaks) is at least 70 dB below the
//     input sine.
const (
	maxRippleDB   = 0.1
	minStopbandDB = 70.0
)

// toneFit fits a·cos(2πfi) + b·sin(2πfi) to y by least squares (f in cycles per sample) and
// returns the fitted amplitude and the RMS of what is left over.
func toneFit(y []float32, f float64) (amp, resid float64) {
	var cc, ss, cs, yc, ys float64
	for i, v := range y {
		s, c := math.Sincos(2 * math.Pi * f * float64(i))
		cc += c * c
		ss += s * s
		cs += c * s
		yc += float64(v) * c
		ys += float64(v) * s
	}
	det := cc*ss - cs*cs
	a := (yc*ss - ys*cs) / det
	b := (ys*cc - yc*cs) / det
	var e float64
	for i, v := range y {
		s, c := math.Sincos(2 * math.Pi * f * float64(i))
		d := float64(v) - a*c - b*s
		e += d * d
	}
	return math.Hypot(a, b), math.Sqrt(e / float64(len(y)))
}

func rms(y []float32) float64 {
	var e float64
	for _, v := range y {
		e += float64(v) * float64(v)
	}
	return math.Sqrt(e / float64(len(y)))
}

// toneResult is what a sine of freq Hz became.
type toneResult struct {
	freq   float64
	gainDB float64 // output amplitude at freq over input amplitude (NaN above the output Nyquist)
	spurDB float64 // everything else in the output, dB below the input sine
}

// measureTone resamples 0.25 s of a sine at freq Hz and measures, on the output away from the
// start-up transient, the sine that came through and everything else.
func measureTone(t testing.TB, in, out int, freq float64) toneResult {
	const amp = 0.5
	r := newResampler(t, in, out)
	x := make([]float32, in/4)
	for i := range x {
		x[i] = float32(amp * math.Sin(2*math.Pi*freq*float64(i)/float64(in)+0.3))
	}
	y := r.Process(nil, x) // no Flush: the tail would be a transient
	skip := int(r.Delay().Seconds()*float64(out)) + 2
	y = y[skip:]
	inRMS := amp / math.Sqrt2
	res := toneResult{freq: freq, gainDB: math.NaN()}
	if freq < float64(out)/2 {
		a, resid := toneFit(y, freq/float64(out))
		res.gainDB = 20 * math.Log10(a/amp)
		res.spurDB = 20 * math.Log10(inRMS/resid)
	} else {
		res.spurDB = 20 * math.Log10(inRMS/rms(y))
	}
	return res
}

// testFreqs are the sines each ratio is measured with: a passband sweep, the transition band,
// and (when downsampling) a sweep from just above the output's Nyquist frequency to just below
// the input's.
func testFreqs(in, out int) (pass, other []float64) {
	nyqLow := float64(min(in, out)) / 2
	pass = []float64{20, 100}
	for f := 0.05; f < 0.9; f += 0.05 {
		pass = append(pass, f*nyqLow)
	}
	pass = append(pass, 0.87*nyqLow, 0.89*nyqLow, 0.9*nyqLow)
	// The transition band: no gain promise, but the images of these sines when upsampling lie
	// just above fN, where the stopband is at its weakest.
	for _, f := range []float64{0.93, 0.96, 0.98, 0.988, 0.994, 0.998} {
		other = append(other, f*nyqLow)
	}
	if out < in {
		nyqIn, nyqOut := float64(in)/2, float64(out)/2
		for _, f := range []float64{1.002, 1.006, 1.012, 1.02} { // the weakest sidelobes
			other = append(other, f*nyqOut)
		}
		for f := nyqOut * 1.035; f < 0.995*nyqIn; f *= 1.17 {
			other = append(other, f)
		}
		other = append(other, 0.995*nyqIn)
	}
	return pass, other
}

func TestQuality(t *testing.T) {
	for _, c := range ratios {
		t.Run(ratioName(c.in, c.out), func(t *testing.T) {
			t.Parallel()
			pass, other := testFreqs(c.in, c.out)
			ripple, spur := 0.0, math.Inf(1)
			var spurAt float64
			for _, f := range pass {
				m := measureTone(t, c.in, c.out, f)
				if math.Abs(m.gainDB) > maxRippleDB {
					t.Errorf("%.0f Hz: gain %+.3f dB, want within ±%v dB", f, m.gainDB, maxRippleDB)
				}
				ripple = math.Max(ripple, math.Abs(m.gainDB))
				if m.spurDB < spur {
					spur, spurAt = m.spurDB, f
				}
			}
			for _, f := range other {
				m := measureTone(t, c.in, c.out, f)
				if m.spurDB < spur {
					spur, spurAt = m.spurDB, f
				}
			}
			if spur < minStopbandDB {
				t.Errorf("a %.0f Hz sine left spurious output only %.1f dB down, want ≥ %v dB", spurAt, spur, minStopbandDB)
			}
			t.Logf("%5d→%5d Hz: passband ripple ±%.3f dB (DC..%.0f Hz), stopband ≥ %.1f dB (worst: %.0f Hz in)",
				c.in, c.out, ripple, 0.9*float64(min(c.in, c.out))/2, spur, spurAt)
		})
	}
}

// TestQualityCanFail makes sure the measurements see a bad resampler: taking every third sample
// (48 → 16 kHz with no filter) must break the stopband promise, and averaging two neighbours
// before that (a filter, but a poor one) the passband one.
func TestQualityCanFail(t *testing.T) {
	const in, out = 48000, 16000
	_, other := testFreqs(in, out)
	f := other[len(other)-1] // just below 24 kHz, aliases to ~8 kHz
	x := make([]float32, in/4)
	for i := range x {
		x[i] = float32(0.5 * math.Sin(2*math.Pi*f*float64(i)/in))
	}
	y := make([]float32, len(x)/3)
	for i := range y {
		y[i] = x[3*i]
	}
	if db := 20 * math.Log10(0.5/math.Sqrt2/rms(y)); db >= minStopbandDB {
		t.Errorf("decimation without a filter measured %.1f dB down", db)
	}
	// A two-tap average has a gain of cos(πf/fs): -1 dB at 0.9 × 8 kHz.
	g := 7200.0
	for i := range x {
		x[i] = float32(0.5 * math.Sin(2*math.Pi*g*float64(i)/in))
	}
	for i := range y {
		y[i] = (x[3*i] + x[3*i+1]) / 2
	}
	if a, _ := toneFit(y, g/out); math.Abs(20*math.Log10(a/0.5)) <= maxRippleDB {
		t.Errorf("a two-tap average measured %.3f dB at %v Hz", 20*math.Log10(a/0.5), g)
	}
}
