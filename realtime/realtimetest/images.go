package realtimetest

import (
	"bytes"
	"encoding/base64"
	"fmt"
	"image"
	"image/jpeg"
	"image/png"
)

const maxImagePixels = 16 << 20 // refuse to decode bigger images (decompression bombs)

// decodeImage decodes a base64 image fully. allowPNG accepts PNG besides JPEG.
func decodeImage(field, b64 string, allowPNG bool) (FrameInfo, error) {
	raw, err := base64.StdEncoding.DecodeString(b64)
	if err != nil {
		return FrameInfo{}, fmt.Errorf("%s is not valid base64: %v", field, err)
	}
	want := "JPEG"
	if allowPNG {
		want = "JPEG or PNG"
	}
	var (
		decodeConfig func([]byte) (image.Config, error)
		decode       func([]byte) (image.Image, error)
		format       string
	)
	switch {
	case bytes.HasPrefix(raw, []byte{0xFF, 0xD8}):
		format = "jpeg"
		decodeConfig = func(b []byte) (image.Config, error) { return jpeg.DecodeConfig(bytes.NewReader(b)) }
		decode = func(b []byte) (image.Image, error) { return jpeg.Decode(bytes.NewReader(b)) }
	case allowPNG && bytes.HasPrefix(raw, []byte("\x89PNG\r\n\x1a\n")):
		format = "png"
		decodeConfig = func(b []byte) (image.Config, error) { return png.DecodeConfig(bytes.NewReader(b)) }
		decode = func(b []byte) (image.Image, error) { return png.Decode(bytes.NewReader(b)) }
	default:
		return FrameInfo{}, fmt.Errorf("%s is not a %s image (%d bytes, starts with % x)", field, want, len(raw), raw[:min(len(raw), 4)])
	}
	cfg, err := decodeConfig(raw)
	if err != nil {
		return FrameInfo{}, fmt.Errorf("%s does not decode as %s: %v", field, format, err)
	}
	if cfg.Width <= 0 || cfg.Height <= 0 || cfg.Width*cfg.Height > maxImagePixels {
		return FrameInfo{}, fmt.Errorf("%s is %dx%d: refused (empty or over %d pixels)", field, cfg.Width, cfg.Height, maxImagePixels)
	}
	img, err := decode(raw)
	if err != nil {
		return FrameInfo{}, fmt.Errorf("%s does not decode as %s: %v", field, format, err)
	}
	b := img.Bounds()
	info := FrameInfo{Width: b.Dx(), Height: b.Dy(), Bytes: len(raw), Format: format}
	if format == "jpeg" {
		info.Quality = jpegQuality(raw)
	}
	return info, nil
}

// stdLuminance is the IJG standard luminance quantisation table in zig-zag order
// (the order DQT segments store it), as libjpeg and Go's image/jpeg scale it.
var stdLuminance = [64]int{
	16, 11, 12, 14, 12, 10, 16, 14,
	13, 14, 18, 17, 16, 19, 24, 40,
	26, 24, 22, 22, 24, 49, 35, 37,
	29, 40, 58, 51, 61, 60, 57, 51,
	56, 55, 64, 72, 92, 78, 64, 68,
	87, 69, 55, 56, 80, 109, 81, 87,
	95, 98, 103, 104, 103, 62, 77, 113,
	121, 112, 100, 120, 92, 101, 103, 99,
}

// jpegQuality estimates the IJG quality (1..100) an encoder used, from the luminance
// quantisation table: the quality whose scaled standard table is closest. 0 if the
// JPEG has no luminance table.
func jpegQuality(b []byte) int {
	table, ok := lumaTable(b)
	if !ok {
		return 0
	}
	best, bestDiff := 0, -1
	for q := 1; q <= 100; q++ {
		scale := 200 - 2*q
		if q < 50 {
			scale = 5000 / q
		}
		diff := 0
		for i, s := range stdLuminance {
			v := max(1, min(255, (s*scale+50)/100))
			d := v - table[i]
			if d < 0 {
				d = -d
			}
			diff += d
		}
		if bestDiff < 0 || diff < bestDiff {
			best, bestDiff = q, diff
		}
	}
	return best
}

// lumaTable returns quantisation table 0 of a JPEG, scanning markers up to SOS.
func lumaTable(b []byte) ([64]int, bool) {
	var t [64]int
	if len(b) < 4 || b[0] != 0xFF || b[1] != 0xD8 {
		return t, false
	}
	i := 2
	for i+4 <= len(b) {
		if b[i] != 0xFF {
			return t, false
		}
		marker := b[i+1]
		if marker == 0xFF { // fill byte
			i++
			continue
		}
		if marker == 0xD9 || marker == 0xDA { // EOI, SOS
			return t, false
		}
		if marker >= 0xD0 && marker <= 0xD7 || marker == 0x01 {
			i += 2
			continue
		}
		n := int(b[i+2])<<8 | int(b[i+3])
		if n < 2 || i+2+n > len(b) {
			return t, false
		}
		seg := b[i+4 : i+2+n]
		if marker == 0xDB { // DQT: one or more tables
			for len(seg) > 0 {
				pq, tq := seg[0]>>4, seg[0]&0x0F
				size := 64
				if pq == 1 {
					size = 128
				}
				if len(seg) < 1+size {
					return t, false
				}
				if tq == 0 {
					for k := range 64 {
						if pq == 1 {
							t[k] = int(seg[1+2*k])<<8 | int(seg[2+2*k])
						} else {
							t[k] = int(seg[1+k])
						}
					}
					return t, true
				}
				seg = seg[1+size:]
			}
		}
		i += 2 + n
	}
	return t, false
}
