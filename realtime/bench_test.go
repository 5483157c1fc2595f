package realtime

import (
	"math"
	"testing"
)

// The figures that matter on a Pi: CPU time per second of media for the wire encoding (upstream,
// one 1 s chunk a second) and decoding (downstream, 1 s of 24 kHz reply audio a second).

func sine(n int) []float32 {
	s := make([]float32, n)
	for i := range s {
		s[i] = float32(0.3 * math.Sin(float64(i)*0.05))
	}
	return s
}

func BenchmarkEncodeChunk1s(b *testing.B) {
	for _, bc := range []struct {
		name  string
		c     *miniCPM
		frame []byte
	}{
		{"current_audio", &miniCPM{mode: ModeAudio}, nil},
		{"current_video_40KB_jpeg", &miniCPM{mode: ModeVideo}, make([]byte, 40<<10)},
		{"legacy_audio", &miniCPM{legacy: true, mode: ModeAudio}, nil},
	} {
		b.Run(bc.name, func(b *testing.B) {
			ch := Chunk{Audio: sine(InputSampleRate)}
			if bc.frame != nil {
				ch.Frames = [][]byte{bc.frame}
			}
			b.ReportAllocs()
			var size int
			for b.Loop() {
				m, err := bc.c.chunk(ch, Init{}, nil)
				if err != nil {
					b.Fatal(err)
				}
				size = len(m.data)
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/1e6, "ms-cpu/s-media")
			b.ReportMetric(float64(size), "bytes/chunk")
		})
	}
}

func BenchmarkDecodeAudioDelta1s(b *testing.B) {
	audio := string(appendFloat32Base64(nil, sine(OutputSampleRate)))
	current := []byte(`{"type":"response.output.delta","kind":"audio","session_id":"sess_1","response_id":"r","audio":"` + audio + `","metrics":{"kv_cache_length":1024}}`)
	legacy := []byte(`{"type":"response.output_audio.delta","text":"hello","audio":"` + audio + `","end_of_turn":false,"kv_cache_length":1024}`)
	// "recycled" is the session's path when the speaker hands the samples back
	// (AudioRecycler); the others keep every delta, as a caller that holds on to them does.
	pool := &samplePool{}
	for _, bc := range []struct {
		name  string
		c     codec
		frame []byte
		pool  *samplePool
	}{
		{"current", newCodec(Config{Mode: ModeAudio}, nil), current, nil},
		{"legacy", newCodec(Config{Mode: ModeAudio, Dialect: DialectLegacy}, nil), legacy, nil},
		{"current-recycled", newCodec(Config{Mode: ModeAudio}, pool), current, pool},
	} {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(bc.frame)))
			for b.Loop() {
				n := 0
				bc.c.decode(false, bc.frame, func(ev Event) {
					if d, ok := ev.(AudioDelta); ok {
						n += len(d.Samples)
						bc.pool.put(d.Samples)
					}
				})
				if n != OutputSampleRate {
					b.Fatalf("decoded %d samples", n)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/1e6, "ms-cpu/s-media")
		})
	}
}

// OpenVoice's PCM16 paths: one second of 16 kHz microphone audio into 40 ms binary frames, and one
// second of 24 kHz TTS audio (4096-byte frames, as the server sends them) back to samples.
func BenchmarkOpenVoicePCM16(b *testing.B) {
	b.Run("encode_1s", func(b *testing.B) {
		o := &openVoice{frame: 640}
		ch := Chunk{Audio: sine(InputSampleRate)}
		b.ReportAllocs()
		for b.Loop() {
			if _, err := o.chunk(ch, Init{}, nil); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/1e6, "ms-cpu/s-media")
	})
	b.Run("decode_1s", func(b *testing.B) {
		o := &openVoice{ttsRate: 24000}
		pcm := appendPCM16(nil, sine(24000))
		b.ReportAllocs()
		for b.Loop() {
			n := 0
			for f := pcm; len(f) > 0; f = f[min(4096, len(f)):] {
				o.decode(true, f[:min(4096, len(f))], func(ev Event) { n += len(ev.(AudioDelta).Samples) })
			}
			if n != 24000 {
				b.Fatalf("%d samples", n)
			}
		}
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/1e6, "ms-cpu/s-media")
	})
}
