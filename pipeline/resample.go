// Package pipeline holds the signal-processing basics between the devices and the model server:
// a streaming sample-rate converter and conversions between device PCM and float32 mono audio.
// It is pure Go (no cgo) so everything that uses it stays testable on any machine.
package pipeline

import (
	"fmt"
	"math"
	"slices"
	"time"
)

// Filter design, shared by every ratio. The prototype low-pass is a Kaiser-windowed sinc whose
// length, cutoff and transition band are fixed in units of the lower of the two rates, so every
// ratio gets the same response relative to that rate's Nyquist frequency fN:
//
//   - passband DC..0.9·fN within ±0.05 dB (designed 0.040 dB),
//   - stopband from fN up at least 75 dB down (designed 78.9 dB), so that nothing aliases back
//     below fN when downsampling and no image survives above it when upsampling,
//   - transition 0.9·fN..fN, which is what costs the 92 taps at the lower rate.
//
// The numbers come from a search over (half-width, beta, cutoff) that maximised the stopband
// attenuation with the passband limit held; the tests measure the result for every ratio.
const (
	halfWidthLow = 46    // kernel half-width in samples of the lower rate
	kaiserBeta   = 7.75  // Kaiser window shape
	cutoffFrac   = 0.945 // -6 dB point as a fraction of the lower rate's Nyquist frequency
)

// Limits on what NewResampler accepts.
const (
	// MaxRatio bounds the conversion ratio both ways (out/in in [1/MaxRatio, MaxRatio]).
	MaxRatio = 16
	// maxCoefs bounds the coefficient table (4 MB). It grows with out/gcd(in, out), the number
	// of filter phases: every pair of standard rates from 8 to 192 kHz (11025 Hz family
	// included) needs at most 2560 phases and 250 k coefficients, but 44101 → 16000 Hz would
	// need 16000 phases and 4 M coefficients.
	maxCoefs = 1 << 20
)

// blockLen is how many input samples Process buffers at a time: the working buffer has a fixed
// size whatever the caller's chunk size, so the steady state never allocates.
const blockLen = 2048

// Resampler converts a mono float32 stream from one sample rate to another with a polyphase
// windowed-sinc filter. It keeps state between calls, so a signal fed in arbitrary pieces gives
// exactly the output it gives in one piece. Output sample j stands for time j/outRate: the
// filter delay is removed (the output starts when the input starts), at the price of a latency
// of Delay, and Flush emits what the delay held back. A Resampler is not safe for concurrent use.
type Resampler struct {
	inRate, outRate int
	up, down        int // out/g and in/g: output j is at input position j·down/up

	taps  int       // coefficients per phase, a multiple of 16
	coef  []float32 // up phases × taps, phase-major, taps in input order
	adv   []int     // input positions to advance after an output with phase p
	next  []int     // phase of the following output
	delay int       // input samples of look-ahead an output needs: taps/2

	buf   []float32 // input history; buf[pos:pos+taps] is the window of the next output
	pos   int
	phase int
	nIn   int64 // input samples since the start of the stream
	nOut  int64 // output samples since the start of the stream
}

// NewResampler returns a resampler from inRate to outRate (Hz). It fails for non-positive rates,
// a ratio beyond 1/MaxRatio..MaxRatio, or rates so unrelated (44101 Hz to 16000 Hz, say) that
// the filter table would take more than 4 MB. Equal rates give a pass-through that only copies.
func NewResampler(inRate, outRate int) (*Resampler, error) {
	if inRate <= 0 || outRate <= 0 {
		return nil, fmt.Errorf("pipeline: cannot resample %d Hz to %d Hz: rates must be positive", inRate, outRate)
	}
	if float64(inRate) > MaxRatio*float64(outRate) || float64(outRate) > MaxRatio*float64(inRate) {
		return nil, fmt.Errorf("pipeline: cannot resample %d Hz to %d Hz: ratio beyond 1:%d", inRate, outRate, MaxRatio)
	}
	g := gcd(inRate, outRate)
	r := &Resampler{inRate: inRate, outRate: outRate, up: outRate / g, down: inRate / g}
	if r.up == r.down {
		return r, nil
	}
	if n := coefCount(r.up, r.down); n > maxCoefs {
		return nil, fmt.Errorf("pipeline: cannot resample %d Hz to %d Hz: %d filter phases would take %d coefficients (at most %d); use rates with a larger common divisor",
			inRate, outRate, r.up, n, maxCoefs)
	}
	r.design()
	r.buf = make([]float32, 0, r.taps+blockLen)
	r.Reset()
	return r, nil
}

// kernelShape gives the kernel's half-width and cutoff in input samples for a conversion by
// up/down, and the taps per phase: the whole kernel, padded to the unrolled dot product.
func kernelShape(up, down int) (half, cutoff float64, taps int) {
	// rho is the lower rate over the input rate, so the kernel's width and cutoff scale with
	// the input rate when downsampling and stay put when upsampling.
	rho := math.Min(1, float64(up)/float64(down))
	half = halfWidthLow / rho
	cutoff = cutoffFrac * rho / 2 // cycles per input sample
	return half, cutoff, 16 * int(math.Ceil(2*half/16))
}

// coefCount is the size of the coefficient table for a conversion by up/down.
func coefCount(up, down int) int {
	if up > maxCoefs { // no overflow below
		return up
	}
	_, _, taps := kernelShape(up, down)
	return up * taps
}

// design fills the polyphase coefficient table and the phase-step tables.
func (r *Resampler) design() {
	var half, fc float64
	half, fc, r.taps = kernelShape(r.up, r.down)
	r.delay = r.taps / 2 // the window of an output at n covers inputs n-delay+1 .. n+delay
	r.coef = make([]float32, r.up*r.taps)
	r.adv = make([]int, r.up)
	r.next = make([]int, r.up)
	i0beta := besselI0(kaiserBeta)
	row := make([]float64, r.taps)
	for p := 0; p < r.up; p++ {
		r.adv[p] = (p + r.down) / r.up
		r.next[p] = (p + r.down) % r.up
		if q := r.up - p; p > q {
			mirrorPhase(r.coef, r.taps, p, q)
			continue
		}
		frac := float64(p) / float64(r.up)
		var sum float64
		for k := range row {
			// Tap k multiplies input n-delay+1+k for an output at n+frac.
			tau := float64(r.delay-1-k) + frac
			v := 0.0
			if x := tau / half; x > -1 && x < 1 {
				v = 2 * fc * sinc(2*fc*tau) * besselI0(kaiserBeta*math.Sqrt(1-x*x)) / i0beta
			}
			row[k] = v
			sum += v
		}
		// Unit DC gain for every phase, so a constant input gives a constant output instead of
		// a faint pattern repeating with the phase sequence.
		for k, v := range row {
			r.coef[p*r.taps+k] = float32(v / sum)
		}
	}
}

// Reset forgets the stream: the next Process starts a new one.
func (r *Resampler) Reset() {
	r.nIn, r.nOut, r.pos, r.phase = 0, 0, 0, 0
	if r.up == r.down {
		return
	}
	// Silence before the stream: delay-1 zeros put the window of output 0 at buf[0:taps].
	r.buf = r.buf[:r.delay-1]
	clear(r.buf)
}

// Process appends to dst the output that src makes available and returns the extended slice.
// Because of the filter's look-ahead the output lags the input by Delay; Flush ends the stream.
// With cap(dst)-len(dst) ≥ OutputLen(len(src)) it does not allocate.
func (r *Resampler) Process(dst, src []float32) []float32 {
	if r.up == r.down {
		return append(dst, src...)
	}
	r.nIn += int64(len(src))
	for len(src) > 0 {
		n := min(len(src), cap(r.buf)-len(r.buf))
		r.buf = append(r.buf, src[:n]...)
		src = src[n:]
		dst = r.run(dst, math.MaxInt64, false)
	}
	return dst
}

// Silence appends what Process appends for n zero samples. While the history is silent too,
// every output is zero and it computes none of the products: a speaker's record of the silence
// it plays between replies costs next to nothing to bring to the microphone's rate.
func (r *Resampler) Silence(dst []float32, n int) []float32 {
	if r.up == r.down {
		dst = slices.Grow(dst, n)
		l := len(dst)
		dst = dst[:l+n]
		clear(dst[l:])
		return dst
	}
	r.nIn += int64(n)
	return r.zeros(dst, n, math.MaxInt64)
}

// zeros feeds n zeros into the history and appends their outputs, up to output number limit.
// While the history before them is silent, the outputs are zeros and no product is computed.
func (r *Resampler) zeros(dst []float32, n int, limit int64) []float32 {
	for n > 0 && r.nOut < limit {
		silent := PeakAbove(0, r.buf) == 0 // false for a NaN: the products decide then
		k := min(n, cap(r.buf)-len(r.buf))
		l := len(r.buf)
		r.buf = r.buf[:l+k]
		clear(r.buf[l:])
		n -= k
		dst = r.run(dst, limit, silent)
	}
	return dst
}

// Flush appends the rest of the stream, the outputs the filter delay held back, so that the
// whole stream gives ceil(inputs·outRate/inRate) samples. It then resets the resampler.
func (r *Resampler) Flush(dst []float32) []float32 {
	if r.up == r.down {
		return dst
	}
	// Outputs at times before the end of the input: j·down/up < nIn.
	want := (r.nIn*int64(r.up) + int64(r.down) - 1) / int64(r.down)
	// delay zeros complete the window of every such output.
	dst = r.zeros(dst, r.delay, want)
	r.Reset()
	return dst
}

// run appends every output whose window is in buf, up to output number limit, then moves the
// unused history to the front of buf. silent: buf holds only zeros, and so do the outputs.
func (r *Resampler) run(dst []float32, limit int64, silent bool) []float32 {
	buf, taps, pos, p := r.buf, r.taps, r.pos, r.phase
	coef, adv, next := r.coef, r.adv, r.next
	n := r.nOut
	for pos+taps <= len(buf) && n < limit {
		if silent {
			dst = append(dst, 0)
		} else {
			dst = append(dst, dot(coef[p*taps:p*taps+taps], buf[pos:pos+taps]))
		}
		n++
		pos += adv[p]
		p = next[p]
	}
	r.nOut, r.phase = n, p
	// The window never starts past the end of buf, because taps ≥ the largest step.
	r.buf = buf[:copy(buf, buf[pos:])]
	r.pos = 0
	return dst
}

// dotGo is the inner product of h and x (len(x) ≥ len(h), len(h) a multiple of 16) in plain
// Go, about one clock cycle per tap: what dot runs where it has no vector version (dot_*.go).
// Unrolled by 16 into four accumulators, so that bounds are checked once per 16 taps
// (converting to array pointers is what lets the compiler drop the per-element checks) and the
// adders do not wait on one another. The order of the sums is fixed, so the result does not
// depend on how the stream was chunked. Measured against a plain loop it is about 2× faster;
// inlining it into run, 8-way or 8-accumulator versions were slower.
func dotGo(h, x []float32) float32 {
	var s0, s1, s2, s3 float32
	x = x[:len(h)]
	for i := 0; i+16 <= len(h); i += 16 {
		hh := (*[16]float32)(h[i:])
		xx := (*[16]float32)(x[i:])
		s0 += (hh[0]*xx[0] + hh[4]*xx[4]) + (hh[8]*xx[8] + hh[12]*xx[12])
		s1 += (hh[1]*xx[1] + hh[5]*xx[5]) + (hh[9]*xx[9] + hh[13]*xx[13])
		s2 += (hh[2]*xx[2] + hh[6]*xx[6]) + (hh[10]*xx[10] + hh[14]*xx[14])
		s3 += (hh[3]*xx[3] + hh[7]*xx[7]) + (hh[11]*xx[11] + hh[15]*xx[15])
	}
	return (s0 + s1) + (s2 + s3)
}

// OutputLen is an upper bound on the samples Process appends for n input samples, and, with
// n = 0, on what Flush appends (so OutputLen(n) also bounds Process followed by Flush).
func (r *Resampler) OutputLen(inSamples int) int {
	if r.up == r.down {
		return inSamples
	}
	ceilDiv := func(a, b int) int { return (a + b - 1) / b }
	return ceilDiv(inSamples*r.up, r.down) + ceilDiv(r.delay*r.up, r.down) + 2
}

// Delay is the latency the filter adds: the output for an instant comes out once the input
// Delay later has gone in. For latency accounting; it is zero for equal rates.
func (r *Resampler) Delay() time.Duration {
	return time.Duration(float64(r.delay) / float64(r.inRate) * float64(time.Second))
}

// InRate is the input sample rate in Hz.
func (r *Resampler) InRate() int { return r.inRate }

// OutRate is the output sample rate in Hz.
func (r *Resampler) OutRate() int { return r.outRate }

func gcd(a, b int) int {
	for b != 0 {
		a, b = b, a%b
	}
	return a
}

func sinc(x float64) float64 {
	if x == 0 {
		return 1
	}
	return math.Sin(math.Pi*x) / (math.Pi * x)
}

// mirrorPhase fills phase p of a polyphase table of taps coefficients a phase with phase q
// reversed: in a symmetric kernel, phases at fractions f and 1-f have their taps at negated
// offsets, so one costs a copy instead of a design.
func mirrorPhase(coef []float32, taps, p, q int) {
	dst := coef[p*taps : (p+1)*taps]
	copy(dst, coef[q*taps:(q+1)*taps])
	slices.Reverse(dst)
}

// besselI0 is the modified Bessel function of the first kind, order 0, by its power series
// (converges fast for the arguments a Kaiser window needs, x ≤ 20).
func besselI0(x float64) float64 {
	sum, term := 1.0, 1.0
	q := x * x / 4
	for k := 1.0; k < 500; k++ {
		term *= q / (k * k)
		sum += term
		if term < sum*1e-17 {
			break
		}
	}
	return sum
}
