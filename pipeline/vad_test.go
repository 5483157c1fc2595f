package pipeline

import "testing"

// frames builds 20 ms frames at 16 kHz: true is loud (-10 dBFS), false silent.
func vadFrames(pattern ...bool) [][]float32 {
	out := make([][]float32, len(pattern))
	for i, loud := range pattern {
		f := make([]float32, 320)
		if loud {
			for j := range f {
				f[j] = 0.3
			}
		}
		out[i] = f
	}
	return out
}

// TestEnergyVADAttack: speech is confirmed after the minimum duration of loud frames; Rising
// reports the attack under way; a stop closure breaks the attack unless SetAttackGap bridges it.
func TestEnergyVADAttack(t *testing.T) {
	const L, Q = true, false
	stop := vadFrames(L, L, L, Q, Q, L, L, L, L) // 3 loud, a 40 ms closure, 4 loud
	for _, gap := range []int{0, 2} {
		v := NewEnergyVAD(16000, -30, 140, 300) // 7 frames
		v.SetAttackGap(gap)
		confirmedAt := -1
		for i, f := range stop {
			if i == 0 && v.Rising() {
				t.Error("rising before any sound")
			}
			if speaking, changed := v.Process(f); speaking && changed {
				confirmedAt = i
			}
			if i == 0 && !v.Rising() {
				t.Error("not rising after the first loud frame")
			}
		}
		want := -1
		if gap > 0 {
			want = len(stop) - 1
		}
		if confirmedAt != want {
			t.Errorf("attack gap %d: confirmed at frame %d, want %d", gap, confirmedAt, want)
		}
		if gap > 0 && v.Rising() {
			t.Error("still rising after confirming")
		}
	}
}

// BenchmarkEnergyVADSecond: one op is a second of 16 kHz microphone audio analysed in the
// capture loop's 20 ms steps, as the agent does for its listening and barge-in detectors.
func BenchmarkEnergyVADSecond(b *testing.B) {
	sig := make([]float32, 16000)
	for i := range sig {
		sig[i] = float32(i%97)/97 - 0.5
	}
	v := NewEnergyVAD(16000, -40, 100, 600)
	b.ReportAllocs()
	for b.Loop() {
		for i := 0; i < len(sig); i += 320 {
			v.Process(sig[i : i+320])
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/1e6, "ms-cpu/s")
}

// sumSquares takes every sample once, whatever the length (the vector bulk and the plain tail),
// and agrees with a float64 sum to float32 rounding.
func TestSumSquares(t *testing.T) {
	x := make([]float32, 100)
	for i := range x {
		x[i] = float32(i%13)/13 - 0.4
	}
	for n := range len(x) + 1 {
		want := 0.0
		for _, v := range x[:n] {
			want += float64(v) * float64(v)
		}
		if got := sumSquares(x[:n]); got < want*(1-1e-6) || got > want*(1+1e-6) {
			t.Fatalf("%d samples: %g, want %g", n, got, want)
		}
	}
	x[37] = 1e3 // one loud sample anywhere counts whole
	if got := sumSquares(x[32:48]); got < 1e6 {
		t.Fatalf("a sample inside the vector bulk was skipped: %g", got)
	}
}
