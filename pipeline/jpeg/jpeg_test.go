package jpeg_test

import (
	"strings"
	"testing"

	"github.com/omnisat/omnisat/pipeline/jpeg"
)

func TestOutputSizeKeepsAspect(t *testing.T) {
	for w := 1; w < 3000; w += 37 {
		for h := 1; h < 3000; h += 41 {
			ow, oh := jpeg.OutputSize(w, h, 640)
			if max(w, h) <= 640 {
				if ow != w || oh != h {
					t.Fatalf("OutputSize(%d, %d, 640) = %d, %d: changed a small frame", w, h, ow, oh)
				}
				continue
			}
			if max(ow, oh) != 640 || min(ow, oh) < 1 {
				t.Fatalf("OutputSize(%d, %d, 640) = %d, %d: longest edge not 640", w, h, ow, oh)
			}
			// Each edge may be off the exact scaled length by half a pixel of rounding (or be
			// raised to 1 pixel).
			scale := 640 / float64(max(w, h))
			if abs(float64(ow)-float64(w)*scale) > 0.5 && ow != 1 || abs(float64(oh)-float64(h)*scale) > 0.5 && oh != 1 {
				t.Fatalf("OutputSize(%d, %d, 640) = %d, %d: aspect not kept", w, h, ow, oh)
			}
		}
	}
}

func abs(f float64) float64 { return max(f, -f) }

func TestOptionsValidate(t *testing.T) {
	for _, tc := range []struct {
		o    jpeg.Options
		want string
	}{
		{jpeg.Options{}, ""},
		{jpeg.Options{MaxEdge: 16, Quality: 1}, ""},
		{jpeg.Options{MaxEdge: 8192, Quality: 100}, ""},
		{jpeg.Options{MaxEdge: -1}, "camera.max_edge: -1 is outside 16..8192"},
		{jpeg.Options{MaxEdge: 15}, "camera.max_edge"},
		{jpeg.Options{MaxEdge: 10000}, "camera.max_edge"},
		{jpeg.Options{Quality: -5}, "camera.quality: -5 is outside 1..100"},
		{jpeg.Options{Quality: 101}, "camera.quality"},
	} {
		err := tc.o.Validate()
		if (err == nil) != (tc.want == "") || err != nil && !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Validate(%+v) = %v, want %q", tc.o, err, tc.want)
		}
	}
}
