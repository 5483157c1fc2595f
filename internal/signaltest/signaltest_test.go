package signaltest

import (
	"math"
	"math/rand/v2"
	"slices"
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

// Follow finds a reference through the silences a starved device inserts, and only then.
func TestFollowThroughGaps(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	const rate = 8000
	ref := make([]float32, 3*rate)
	for i := range ref {
		// noise with a pause in the middle, as speech has
		if i < 14000 || i > 16000 {
			ref[i] = float32(rng.NormFloat64() * 0.1)
		}
	}
	noisy := func(parts ...[]float32) []float32 {
		var s []float32
		for _, p := range parts {
			s = append(s, p...)
		}
		for i := range s {
			s[i] = 0.5*s[i] + float32(rng.NormFloat64()*0.002)
		}
		return s
	}
	silence := func(n int) []float32 { return make([]float32, n) }
	piece, maxGap, tol := rate/2, rate, rate/200

	for _, tt := range []struct {
		name  string
		sig   []float32
		gaps  []int
		worse bool // something of ref is missing: the worst piece must show it
	}{
		{"unbroken", noisy(silence(800), ref, silence(800)), nil, false},
		{"gaps inside and between pieces", noisy(silence(800), ref[:1300], silence(160), ref[1300:8000], silence(1600),
			ref[8000:19100], silence(400), ref[19100:], silence(800)), []int{160, 1600, 400}, false},
		{"two gaps in one piece", noisy(silence(800), ref[:1300], silence(160), ref[1300:2600], silence(240),
			ref[2600:], silence(800)), []int{160, 240}, false},
		{"a stretch of it lost", noisy(silence(800), ref[:6000], ref[6800:], silence(1600)), nil, true},
		{"a stretch of it lost for silence", noisy(silence(800), ref[:6000], silence(800), ref[6800:]), nil, true},
	} {
		gaps, worst := Follow(ref, tt.sig, 800, piece, maxGap, tol)
		switch {
		case tt.worse && worst > 0.9:
			t.Errorf("%s: worst piece ncc %.3f, want it to show the loss", tt.name, worst)
		case !tt.worse && (worst < 0.98 || !slices.Equal(gaps, tt.gaps)):
			t.Errorf("%s: gaps %v, worst ncc %.3f; want gaps %v, ncc ≥ 0.98", tt.name, gaps, worst, tt.gaps)
		}
	}
	// Unrelated sound is not the reference.
	other := make([]float32, len(ref)+1600)
	for i := range other {
		other[i] = float32(rng.NormFloat64() * 0.1)
	}
	if _, worst := Follow(ref, other, 800, piece, maxGap, tol); worst > 0.3 {
		t.Errorf("noise followed with worst ncc %.3f", worst)
	}
}
