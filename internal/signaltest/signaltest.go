// Package signaltest measures recorded audio for tests: where a known signal sits in a
// recording and how closely it matches (normalised cross-correlation), whether it plays whole
// through the silences a starved device inserts, and when a recording falls silent.
package signaltest

import (
	"math"
	"math/cmplx"
)

// Align finds where ref best matches inside sig (sig[lag:lag+len(ref)] ≈ ref, lag may be
// negative when sig starts inside ref) and returns the lag and the normalised cross-correlation
// over the overlap (1 = identical shape, 0 = unrelated). The search uses an FFT, so long
// recordings are cheap.
func Align(ref, sig []float32) (lag int, ncc float64) {
	if len(ref) == 0 || len(sig) == 0 {
		return 0, 0
	}
	n := 1
	for n < len(ref)+len(sig) {
		n <<= 1
	}
	a := make([]complex128, n)
	b := make([]complex128, n)
	for i, v := range sig {
		a[i] = complex(float64(v), 0)
	}
	for i, v := range ref {
		b[i] = complex(float64(v), 0)
	}
	fft(a, false)
	fft(b, false)
	for i := range a {
		a[i] *= cmplx.Conj(b[i])
	}
	fft(a, true)
	best, bestLag := math.Inf(-1), 0
	for i := 0; i < n; i++ {
		l := i
		if i > n-len(ref) { // negative lags wrap around
			l = i - n
		}
		if l <= -len(ref) || l >= len(sig) {
			continue
		}
		if v := real(a[i]); v > best {
			best, bestLag = v, l
		}
	}
	return bestLag, NCC(ref, sig, bestLag)
}

// NCC is the normalised cross-correlation of ref against sig shifted by lag, over their overlap.
func NCC(ref, sig []float32, lag int) float64 {
	var dot, er, es float64
	for i, r := range ref {
		j := i + lag
		if j < 0 || j >= len(sig) {
			continue
		}
		s := float64(sig[j])
		dot += float64(r) * s
		er += float64(r) * float64(r)
		es += s * s
	}
	if er == 0 || es == 0 {
		return 0
	}
	return dot / math.Sqrt(er*es)
}

// fft is an in-place radix-2 FFT (len(x) a power of two); inverse scales by 1/n.
func fft(x []complex128, inverse bool) {
	n := len(x)
	for i, j := 1, 0; i < n; i++ {
		bit := n >> 1
		for ; j&bit != 0; bit >>= 1 {
			j ^= bit
		}
		j ^= bit
		if i < j {
			x[i], x[j] = x[j], x[i]
		}
	}
	sign := -1.0
	if inverse {
		sign = 1
	}
	for size := 2; size <= n; size <<= 1 {
		w := cmplx.Rect(1, sign*2*math.Pi/float64(size))
		for start := 0; start < n; start += size {
			wk := complex(1, 0)
			for k := 0; k < size/2; k++ {
				u, v := x[start+k], x[start+k+size/2]*wk
				x[start+k], x[start+k+size/2] = u+v, u-v
				wk *= w
			}
		}
	}
	if inverse {
		for i := range x {
			x[i] /= complex(float64(n), 0)
		}
	}
}

// RMS is the root mean square of s.
func RMS(s []float32) float64 {
	if len(s) == 0 {
		return 0
	}
	var sum float64
	for _, v := range s {
		sum += float64(v) * float64(v)
	}
	return math.Sqrt(sum / float64(len(s)))
}

// SilentFrom returns the first sample index at or after from where the signal stays below
// threshold (linear RMS over windows of win samples) until the end of the next hold samples;
// -1 if it never does.
func SilentFrom(s []float32, from, win, hold int, threshold float64) int {
	for i := max(from, 0); i+win <= len(s); i += win {
		quiet := true
		for j := i; j < min(i+hold, len(s)-win+1); j += win {
			if RMS(s[j:j+win]) >= threshold {
				quiet = false
				break
			}
		}
		if quiet {
			return i
		}
	}
	return -1
}

// Follow follows ref through sig, which plays it from sig[lag] on but may hold stretches of
// silence that ref does not (a starved device that underran plays silence, then goes on where
// it was), piece samples of ref at a time. Each piece is found at most maxGap later than the
// one before it ended, whole or cut once by a gap of its own; a piece that two gaps or more cut
// is followed as two halves (and so on, down to pieces of 32 tol). tol samples of jitter are
// allowed either way. It returns the gaps found (samples each, in order) and the lowest
// normalised cross-correlation of a piece: near 1 when sig is ref with gaps, low when
// something of ref is missing, distorted or out of order.
func Follow(ref, sig []float32, lag, piece, maxGap, tol int) (gaps []int, worst float64) {
	f := follower{ref: ref, sig: sig, maxGap: maxGap, tol: tol, quiet: 0.01 * RMS(ref), off: lag, worst: 1}
	for at := 0; at < len(ref); at += piece {
		if !f.piece(at, min(len(ref), at+piece)) {
			return f.gaps, 0
		}
	}
	return f.gaps, f.worst
}

// follower is Follow's state: off is sig index − ref index, gaps included.
type follower struct {
	ref, sig    []float32
	maxGap, tol int
	quiet       float64 // a piece this quiet is a pause: nothing to find
	off         int
	gaps        []int
	worst       float64
	back        bool // a piece was found earlier than where the last one left off
}

// piece follows ref[at:end]; false when sig has ended before it.
func (f *follower) piece(at, end int) bool {
	r, off, tol := f.ref[at:end], f.off, f.tol
	if RMS(r) <= f.quiet {
		return true
	}
	// The whole piece, after a gap of up to maxGap before it (or none).
	from := max(0, at+off-tol)
	to := min(len(f.sig), at+off+len(r)+f.maxGap+tol)
	if from >= to {
		return false
	}
	l, best := Align(r, f.sig[from:to])
	next := from + l - at
	if best < 0.98 {
		// A gap inside the piece: its head where the last piece left off, its tail later.
		// Only a clear improvement counts, so that a misplaced scrap of tail never does.
		step := max(1, len(r)/50)
		for cut := step; cut < len(r); cut += step {
			head, tail := r[:cut], r[cut:]
			tFrom := max(0, at+cut+off-tol)
			tTo := min(len(f.sig), at+cut+off+len(tail)+f.maxGap+tol)
			if tFrom >= tTo {
				break
			}
			tl, _ := Align(tail, f.sig[tFrom:tTo])
			tailOff := tFrom + tl - at - cut
			if tailOff <= off+tol {
				continue // no gap: the whole piece covers it
			}
			if c := nccParts(head, tail, f.sig, at+off, at+cut+tailOff); c > best+0.02 {
				best, next = c, tailOff
			}
		}
	}
	if best < 0.98 && len(r) >= 64*tol {
		// Two gaps or more: the halves, each with a gap of its own at most, if they clearly
		// do better and neither is found earlier than where the one before it left off (that
		// is a loss, not a gap: a scrap of what follows matching part of a half).
		halves := *f // from where this piece starts, with gaps, worst and back of its own
		halves.gaps, halves.worst, halves.back = nil, 1, false
		mid := at + len(r)/2
		if halves.piece(at, mid) && halves.piece(mid, end) && !halves.back && halves.worst > best+0.02 {
			f.gaps, f.off, f.worst = append(f.gaps, halves.gaps...), halves.off, min(f.worst, halves.worst)
			return true
		}
	}
	f.worst = min(f.worst, best)
	f.back = f.back || next < off-tol
	if next > off+tol {
		f.gaps = append(f.gaps, next-off)
	}
	f.off = next
	return true
}

// nccParts is the normalised cross-correlation of head+tail against sig with head at sig[h]
// and tail at sig[t].
func nccParts(head, tail, sig []float32, h, t int) float64 {
	var dot, er, es float64
	for _, p := range []struct {
		r  []float32
		at int
	}{{head, h}, {tail, t}} {
		for i, r := range p.r {
			er += float64(r) * float64(r)
			if j := p.at + i; j >= 0 && j < len(sig) {
				dot += float64(r) * float64(sig[j])
				es += float64(sig[j]) * float64(sig[j])
			}
		}
	}
	if er == 0 || es == 0 {
		return 0
	}
	return dot / math.Sqrt(er*es)
}
