package pipeline

import "math"

// The fractional-delay interpolator's shape: a Kaiser-windowed sinc of FractionalTaps taps, in
// fracPhases+1 precomputed phases. Against an ideal delay it is within -50 dB up to 0.44 of the
// sample rate (7 kHz at 16 kHz, where the resampler's passband ends) for every fraction
// (TestFractionalDelayResponse): linear interpolation, by comparison, is a low-pass that changes
// with the fraction, down 16 dB near Nyquist halfway between samples.
const (
	// FractionalTaps is how many samples At reads around the position.
	FractionalTaps = 2 * fracHalf
	fracHalf       = 16
	fracBeta       = 6
	// fracPhases: the fraction is rounded to 1/fracPhases of a sample, an error of about
	// -58 dB at 0.4 of the rate.
	fracPhases = 1024
)

// FractionalDelay reads a band-limited signal between its samples, so that a stream can be slid
// against another by fractions of a sample without the high end of its band changing with the
// fraction. Its table is read only: safe for concurrent use.
type FractionalDelay struct {
	coef []float32 // fracPhases+1 rows of FractionalTaps
}

// NewFractionalDelay builds the table (132 KB).
func NewFractionalDelay() *FractionalDelay {
	d := &FractionalDelay{coef: make([]float32, (fracPhases+1)*FractionalTaps)}
	i0beta := besselI0(fracBeta)
	var row [FractionalTaps]float64
	for p := 0; p <= fracPhases; p++ {
		if q := fracPhases - p; p > q {
			mirrorPhase(d.coef, FractionalTaps, p, q) // half the table's cost at each microphone open
			continue
		}
		frac := float64(p) / fracPhases
		var sum float64
		for k := range row {
			// Tap k multiplies x[k], which is fracHalf-1-k samples before the position's
			// integer part: the position is t = frac+fracHalf-1-k after it.
			t := frac + fracHalf - 1 - float64(k)
			v := 0.0
			if u := t / fracHalf; u > -1 && u < 1 {
				v = sinc(t) * besselI0(fracBeta*math.Sqrt(1-u*u)) / i0beta
			}
			row[k] = v
			sum += v
		}
		for k, v := range row {
			d.coef[p*FractionalTaps+k] = float32(v / sum) // unit DC gain at every fraction
		}
	}
	return d
}

// At is the signal at frac (0 ≤ frac ≤ 1) of a sample past x[fracHalf-1]: x holds the
// FractionalTaps samples around the position, from fracHalf-1 before its integer part to
// fracHalf after it.
func (d *FractionalDelay) At(x []float32, frac float64) float32 {
	p := int(frac*fracPhases + 0.5)
	p = min(max(p, 0), fracPhases)
	h := d.coef[p*FractionalTaps : (p+1)*FractionalTaps : (p+1)*FractionalTaps]
	return dot(h, x[:FractionalTaps]) // the resampler's inner product: FractionalTaps is a multiple of 16
}

// FractionalBefore is how many samples before a position's integer part At reads.
const FractionalBefore = fracHalf - 1
