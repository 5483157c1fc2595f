package realtime

import (
	"encoding/base64"
	"encoding/binary"
	"fmt"
	"math"
)

// appendFloat32Base64 appends samples as base64 of float32 little-endian PCM, the MiniCPM-o audio
// encoding, without an intermediate string.
func appendFloat32Base64(dst []byte, samples []float32) []byte {
	// Encode in blocks of 3 samples (12 bytes -> 16 base64 chars) so no padding appears mid-stream.
	var raw [12 * 64]byte
	enc := base64.StdEncoding
	for len(samples) > 0 {
		n := min(len(samples), len(raw)/4)
		if len(samples) > n {
			n -= n % 3
		}
		for i, s := range samples[:n] {
			binary.LittleEndian.PutUint32(raw[4*i:], math.Float32bits(s))
		}
		dst = enc.AppendEncode(dst, raw[:4*n])
		samples = samples[n:]
	}
	return dst
}

// decodeFloat32Base64 decodes base64 float32 little-endian PCM. It rejects bad base64, a byte count
// that is not whole samples, and NaN or infinite samples (garbage that would wreck playback).
func decodeFloat32Base64(s string) ([]float32, error) {
	raw, err := base64.StdEncoding.DecodeString(s)
	if err != nil {
		return nil, fmt.Errorf("audio is not valid base64: %v", err)
	}
	if len(raw)%4 != 0 {
		return nil, fmt.Errorf("audio has %d bytes, not a whole number of float32 samples", len(raw))
	}
	out := make([]float32, len(raw)/4)
	for i := range out {
		v := math.Float32frombits(binary.LittleEndian.Uint32(raw[4*i:]))
		if math.IsNaN(float64(v)) || math.IsInf(float64(v), 0) {
			return nil, fmt.Errorf("audio sample %d is %v, not a finite number", i, v)
		}
		out[i] = v
	}
	return out, nil
}

// appendPCM16 appends samples as signed 16-bit little-endian PCM, clipping to [-1, 1].
func appendPCM16(dst []byte, samples []float32) []byte {
	for _, s := range samples {
		v := s * 32767
		switch {
		case v > 32767:
			v = 32767
		case v < -32768:
			v = -32768
		case v != v: // NaN
			v = 0
		}
		dst = binary.LittleEndian.AppendUint16(dst, uint16(int16(v)))
	}
	return dst
}

// decodePCM16 turns signed 16-bit little-endian PCM into samples in [-1, 1).
func decodePCM16(raw []byte) ([]float32, error) {
	if len(raw)%2 != 0 {
		return nil, fmt.Errorf("PCM16 frame has %d bytes, not a whole number of samples", len(raw))
	}
	out := make([]float32, len(raw)/2)
	for i := range out {
		out[i] = float32(int16(binary.LittleEndian.Uint16(raw[2*i:]))) / 32768
	}
	return out, nil
}
