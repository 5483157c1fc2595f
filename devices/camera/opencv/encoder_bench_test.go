package opencv

import (
	"testing"
	"time"

	"github.com/omnisat/omnisat/pipeline/jpeg"
)

// BenchmarkEncode measures shrink + encode at the default settings (longest edge 640,
// quality 80), reported as ms per frame and the JPEG size.
func BenchmarkEncode(b *testing.B) {
	for _, sz := range []struct {
		name string
		w, h int
	}{{"640x480", 640, 480}, {"1280x720", 1280, 720}, {"1920x1080", 1920, 1080}} {
		b.Run(sz.name, func(b *testing.B) {
			src := testFrame(b, sz.w, sz.h)
			e := newEncoder(b, jpeg.Options{})
			var n int
			b.ResetTimer()
			start := time.Now()
			for i := 0; i < b.N; i++ {
				out, err := e.Encode(src)
				if err != nil {
					b.Fatal(err)
				}
				n = len(out)
			}
			b.ReportMetric(float64(time.Since(start).Microseconds())/1000/float64(b.N), "ms/frame")
			b.ReportMetric(float64(n), "bytes/frame")
		})
	}
}
