package pipeline

import (
	"encoding/binary"
	"math"
	"testing"
)

// FuzzResampler feeds arbitrary rate pairs (bounded to 1 kHz..96 kHz), audio (including NaN,
// infinities and huge values) and chunkings, and checks: NewResampler either refuses for a
// documented reason or works; nothing panics; finite input gives finite output; the stream has
// ceil(n·out/in) samples; chunked processing equals processing in one piece, bit for bit.
func FuzzResampler(f *testing.F) {
	f.Add(uint32(44100), uint32(16000), []byte{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12}, []byte{1, 5, 0, 3})
	f.Add(uint32(24000), uint32(48000), []byte{0xff, 0x7f, 0x00, 0x80, 0x12, 0x34}, []byte{2})
	f.Add(uint32(16000), uint32(16000), []byte{9, 9, 9, 9}, []byte{1})
	f.Add(uint32(22050), uint32(16000), make([]byte, 4000), []byte{200, 7, 0, 255})
	f.Add(uint32(1000), uint32(16000), []byte{0, 0, 0xc0, 0x7f}, []byte{}) // a NaN sample
	f.Add(uint32(96000), uint32(7000), []byte{0, 0, 0x80, 0x7f, 1, 1, 1, 1}, []byte{3})
	f.Fuzz(func(t *testing.T, inRate, outRate uint32, audio, chunks []byte) {
		in, out := fuzzRate(inRate), fuzzRate(outRate)
		if len(audio) > 1<<14 {
			audio = audio[:1<<14]
		}
		r, err := NewResampler(in, out)
		if err != nil {
			g := gcd(in, out)
			if in <= MaxRatio*out && out <= MaxRatio*in && coefCount(out/g, in/g) <= maxCoefs {
				t.Fatalf("NewResampler(%d, %d) refused a valid pair: %v", in, out, err)
			}
			return
		}
		if r.InRate() != in || r.OutRate() != out {
			t.Fatalf("rates %d, %d: resampler says %d, %d", in, out, r.InRate(), r.OutRate())
		}
		x := make([]float32, len(audio)/4)
		finite := true
		for i := range x {
			x[i] = math.Float32frombits(binary.LittleEndian.Uint32(audio[4*i:]))
			finite = finite && !math.IsNaN(float64(x[i])) && !math.IsInf(float64(x[i]), 0) && math.Abs(float64(x[i])) < 1e30
		}

		whole := r.Flush(r.Process(nil, x))
		if want := (len(x)*out + in - 1) / in; len(whole) != want {
			t.Fatalf("%d→%d: %d samples gave %d, want %d", in, out, len(x), len(whole), want)
		}
		if finite {
			for i, v := range whole {
				if math.IsNaN(float64(v)) || math.IsInf(float64(v), 0) {
					t.Fatalf("%d→%d: output %d is %v from finite input", in, out, i, v)
				}
			}
		}

		var got []float32
		rest := x
		for i := 0; len(rest) > 0; i++ {
			n := len(rest)
			if len(chunks) > 0 {
				n = min(int(chunks[i%len(chunks)])*7, len(rest)) // 0 is a valid chunk
				if n == 0 && i > 4*len(chunks) {
					n = len(rest) // chunk sizes of all zeros would never finish
				}
			}
			got = r.Process(got, rest[:n])
			rest = rest[n:]
		}
		got = r.Flush(got)
		if len(got) != len(whole) {
			t.Fatalf("%d→%d: chunked gave %d samples, whole %d", in, out, len(got), len(whole))
		}
		for i := range got {
			// NaN != NaN, so compare bits: the same input must give the very same output.
			if math.Float32bits(got[i]) != math.Float32bits(whole[i]) {
				t.Fatalf("%d→%d: sample %d chunked %v, whole %v", in, out, i, got[i], whole[i])
			}
		}
	})
}

// fuzzRate maps any number into 1000..96000 Hz, leaving the numbers already there alone (so the
// seeds mean what they say).
func fuzzRate(v uint32) int {
	const lo, n = 1000, 95001
	return lo + int((uint64(v)+n-lo)%n)
}
