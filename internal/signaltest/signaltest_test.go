package signaltest

import (
	"math"
	"math/rand/v2"
	"testing"
)

func TestAlignFindsShiftedCopy(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	ref := make([]float32, 3000)
	for i := range ref {
		ref[i] = float32(rng.NormFloat64() * 0.1)
	}
	for _, lag := range []int{0, 1, 777, 5000, -100} {
		sig := make([]float32, 9000)
		for i, v := range ref {
			if j := i + lag; j >= 0 && j < len(sig) {
				sig[j] = 0.5*v + float32(rng.NormFloat64()*0.005)
			}
		}
		got, ncc := Align(ref, sig)
		if got != lag || ncc < 0.95 {
			t.Errorf("lag %d: found %d with ncc %.3f", lag, got, ncc)
		}
	}
	// Unrelated noise does not match.
	other := make([]float32, 9000)
	for i := range other {
		other[i] = float32(rng.NormFloat64() * 0.1)
	}
	if _, ncc := Align(ref, other); ncc > 0.2 {
		t.Errorf("noise matched with ncc %.3f", ncc)
	}
}

func TestSilentFrom(t *testing.T) {
	s := make([]float32, 10000)
	for i := 0; i < 6000; i++ {
		s[i] = float32(0.5 * math.Sin(float64(i)/5))
	}
	if got := SilentFrom(s, 0, 100, 1000, 0.01); got != 6000 {
		t.Fatalf("silence found at %d, want 6000", got)
	}
	if got := SilentFrom(s[:5000], 0, 100, 1000, 0.01); got != -1 {
		t.Fatalf("found silence in a loud signal at %d", got)
	}
}
