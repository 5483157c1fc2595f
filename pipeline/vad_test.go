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
