package realtimetest

import (
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
)

const (
	inputRate  = 16000 // MiniCPM-o input audio rate
	outputRate = 24000 // MiniCPM-o output audio rate
	minSamples = 4000  // 250 ms at 16 kHz: the smallest chunk the servers accept
	wordTone   = 0.25  // seconds of synthetic voice per word
	toneAmp    = 0.3   // amplitude of the synthetic voice
)

// decodeFloat32 decodes base64 little-endian float32 PCM, checking what the servers check.
// min is the smallest sample count accepted (0: any non-empty buffer).
func decodeFloat32(field, b64 string, min int) ([]float32, error) {
	raw, err := base64.StdEncoding.DecodeString(b64)
	if err != nil {
		return nil, fmt.Errorf("%s is not valid base64: %v", field, err)
	}
	if len(raw) == 0 {
		return nil, fmt.Errorf("%s is empty", field)
	}
	if len(raw) >= 4 && string(raw[:4]) == "RIFF" {
		return nil, fmt.Errorf("%s starts with a RIFF/WAV header: it must be raw float32 little-endian 16 kHz mono PCM without a header", field)
	}
	if len(raw)%4 != 0 {
		return nil, fmt.Errorf("%s is %d bytes, not a whole number of float32 samples", field, len(raw))
	}
	n := len(raw) / 4
	if n < min {
		return nil, fmt.Errorf("%s has %d samples; at least %d (%.0f ms at 16 kHz) are required", field, n, min, float64(min)*1000/inputRate)
	}
	out := make([]float32, n)
	for i := range out {
		v := math.Float32frombits(binary.LittleEndian.Uint32(raw[4*i:]))
		if math.IsNaN(float64(v)) || math.IsInf(float64(v), 0) {
			return nil, fmt.Errorf("%s sample %d is %v: samples must be finite", field, i, v)
		}
		out[i] = v
	}
	return out, nil
}

// encodeFloat32 encodes samples as base64 little-endian float32.
func encodeFloat32(s []float32) string {
	raw := make([]byte, 4*len(s))
	for i, v := range s {
		binary.LittleEndian.PutUint32(raw[4*i:], math.Float32bits(v))
	}
	return base64.StdEncoding.EncodeToString(raw)
}

var errOddPCM = errors.New("odd length")

// pcm16ToFloat converts little-endian signed 16-bit PCM to float32 in [-1, 1).
func pcm16ToFloat(b []byte) ([]float32, error) {
	if len(b)%2 != 0 {
		return nil, errOddPCM
	}
	out := make([]float32, len(b)/2)
	for i := range out {
		out[i] = float32(int16(binary.LittleEndian.Uint16(b[2*i:]))) / 32768
	}
	return out, nil
}

// floatToPCM16 converts float32 samples to little-endian signed 16-bit PCM, clipping.
func floatToPCM16(s []float32) []byte {
	out := make([]byte, 2*len(s))
	for i, v := range s {
		x := math.Round(float64(v) * 32767)
		x = max(-32768, min(32767, x))
		binary.LittleEndian.PutUint16(out[2*i:], uint16(int16(x)))
	}
	return out
}

// rms is the root mean square of s (0 for an empty slice).
func rms(s []float32) float64 {
	if len(s) == 0 {
		return 0
	}
	var sum float64
	for _, v := range s {
		sum += float64(v) * float64(v)
	}
	return math.Sqrt(sum / float64(len(s)))
}

// dbfsToAmplitude converts a level in dBFS to an RMS amplitude (full scale = 1.0).
func dbfsToAmplitude(db float64) float64 { return math.Pow(10, db/20) }

// hasSpeech reports whether any 20 ms window of s (at rate) has an RMS above threshold.
func hasSpeech(s []float32, rate int, threshold float64) bool {
	w := max(rate/50, 1)
	for i := 0; i < len(s); i += w {
		if rms(s[i:min(i+w, len(s))]) > threshold {
			return true
		}
	}
	return false
}

// resample converts s from rate `from` to rate `to` by linear interpolation.
func resample(s []float32, from, to int) []float32 {
	if from == to || len(s) == 0 {
		return append([]float32(nil), s...)
	}
	n := int(int64(len(s)) * int64(to) / int64(from))
	out := make([]float32, n)
	step := float64(from) / float64(to)
	for i := range out {
		pos := float64(i) * step
		j := int(pos)
		frac := float32(pos - float64(j))
		a := s[min(j, len(s)-1)]
		b := s[min(j+1, len(s)-1)]
		out[i] = a + (b-a)*frac
	}
	return out
}

// synthVoice is the simulator's deterministic "voice": wordTone seconds of a sine
// per word at rate, each word a little higher than the one before (cycling).
func synthVoice(words, rate int) []float32 {
	per := int(wordTone * float64(rate))
	out := make([]float32, 0, per*words)
	for w := range words {
		freq := 220 + 40*float64(w%8)
		for i := range per {
			out = append(out, float32(toneAmp*math.Sin(2*math.Pi*freq*float64(i)/float64(rate))))
		}
	}
	return out
}

// splitSamples cuts s into pieces of at most n samples.
func splitSamples(s []float32, n int) [][]float32 {
	var out [][]float32
	for len(s) > 0 {
		k := min(n, len(s))
		out = append(out, s[:k])
		s = s[k:]
	}
	return out
}
