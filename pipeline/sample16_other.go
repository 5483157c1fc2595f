//go:build !amd64 && !arm64

package pipeline

// quantize16Into converts src into dst (len(dst) == len(src)); vector versions exist for
// amd64 and arm64 (sample16_*.s).
func quantize16Into(dst []int16, src []float32) { quantize16Go(dst, src) }

// dequantize16Into converts src into dst (len(dst) == len(src)).
func dequantize16Into(dst []float32, src []int16) { dequantize16Go(dst, src) }
