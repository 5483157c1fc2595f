package realtime

// EncodeAudioDeltaForTest is the base64 float32 encoding of reply audio, for benchmarks of the
// external test package.
func EncodeAudioDeltaForTest(samples []float32) string {
	return string(appendFloat32Base64(nil, samples))
}
