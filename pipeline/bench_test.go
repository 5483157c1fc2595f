package pipeline

import (
	"math"
	"testing"
)

// The figures that matter on a Pi: CPU time per second of audio, processed in 10 ms blocks as a
// device callback delivers it (the ms-cpu/s-audio metric; one benchmark op is one second).

func BenchmarkResample(b *testing.B) {
	for _, c := range []struct{ in, out int }{
		{48000, 16000}, // microphone → model
		{44100, 16000}, // microphone → model
		{24000, 48000}, // model → speaker
		{24000, 44100}, // model → speaker
	} {
		b.Run(ratioName(c.in, c.out), func(b *testing.B) {
			r := newResampler(b, c.in, c.out)
			second := noise(c.in, 9)
			block := c.in / 100
			dst := make([]float32, 0, r.OutputLen(block))
			b.ReportAllocs()
			for b.Loop() {
				for i := 0; i < len(second); i += block {
					dst = r.Process(dst[:0], second[i:i+block])
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/1e6, "ms-cpu/s-audio")
		})
	}
}

func BenchmarkNewResampler(b *testing.B) {
	for _, c := range []struct{ in, out int }{{48000, 16000}, {44100, 16000}, {24000, 44100}} {
		b.Run(ratioName(c.in, c.out), func(b *testing.B) {
			for b.Loop() {
				newResampler(b, c.in, c.out)
			}
		})
	}
}

func BenchmarkInt16StereoToMono(b *testing.B) {
	src := make([]int16, 2*48000) // one second of 48 kHz stereo
	for i := range src {
		src[i] = int16(8000 * math.Sin(float64(i)*0.01))
	}
	dst := make([]float32, 48000)
	b.ReportAllocs()
	for b.Loop() {
		var err error
		if dst, err = Int16ToMono(dst, src, 2, Mixdown, 1); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/1e6, "ms-cpu/s-audio")
}

func BenchmarkFloat32ToInt16(b *testing.B) {
	src := noise(48000, 10)
	dst := make([]int16, len(src))
	b.ReportAllocs()
	for b.Loop() {
		dst = Float32ToInt16(dst, src)
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/1e6, "ms-cpu/s-audio")
}
