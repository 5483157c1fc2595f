package opencv

import (
	"context"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"gocv.io/x/gocv"

	"github.com/omnisat/omnisat/devices/camera"
)

func cpuTime(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkCameraCPU is what the camera costs the board: the process CPU time per second of
// a 30 fps 640×480 video-file camera (grab every frame, decode + shrink + encode EncodeFPS of
// them), reported as ms of CPU per second. Each iteration is 2 s of real time.
func BenchmarkCameraCPU(b *testing.B) {
	path := makeVideo(b, filepath.Join(b.TempDir(), "cam.mp4"), 640, 480, 30, 10)
	for _, fps := range []float64{1, 30} {
		b.Run(map[float64]string{1: "encode_fps=1", 30: "encode_fps=30"}[fps], func(b *testing.B) {
			c, err := Open(context.Background(), camera.Config{Source: "file:" + path, EncodeFPS: fps}, nil, nil)
			if err != nil {
				b.Fatal(err)
			}
			defer c.Close()
			time.Sleep(200 * time.Millisecond) // past the opening
			b.ResetTimer()
			cpu0, t0 := cpuTime(b), time.Now()
			for i := 0; i < b.N; i++ {
				time.Sleep(2 * time.Second)
			}
			cpu, wall := cpuTime(b)-cpu0, time.Since(t0)
			b.ReportMetric(float64(cpu.Microseconds())/1000/wall.Seconds(), "ms-cpu/s")
			if _, ok := c.Latest(); !ok {
				b.Fatal("no frame")
			}
		})
	}
}

// BenchmarkFileFrame is the per-frame cost of the two halves of reading a frame from an H.264
// 640×480 file, unpaced: grab alone (what dropped frames cost) and grab + retrieve (what a
// decoded frame costs). With the FFmpeg backend grab already decodes the video (inter-frame
// codecs must), so retrieve is only the YUV→BGR conversion; with a V4L2 MJPEG or YUYV camera
// grab is a buffer dequeue and retrieve is the whole decode.
func BenchmarkFileFrame(b *testing.B) {
	path := makeVideo(b, filepath.Join(b.TempDir(), "cam.mp4"), 640, 480, 30, 10)
	src, _ := camera.ParseSource("file:" + path)
	for _, retrieve := range []bool{false, true} {
		b.Run(map[bool]string{false: "grab", true: "grab+retrieve"}[retrieve], func(b *testing.B) {
			m := gocv.NewMat()
			defer m.Close()
			cp, err := openCapture(src)
			if err != nil {
				b.Fatal(err)
			}
			defer func() { cp.close() }()
			b.ResetTimer()
			cpu0 := cpuTime(b)
			for i := 0; i < b.N; i++ {
				ok, err := cp.grab()
				if err != nil {
					b.Fatal(err)
				}
				if !ok { // end of file: start again (outside the figure)
					b.StopTimer()
					cp.close()
					if cp, err = openCapture(src); err != nil {
						b.Fatal(err)
					}
					b.StartTimer()
					i--
					continue
				}
				if retrieve {
					if err := cp.retrieve(&m); err != nil {
						b.Fatal(err)
					}
				}
			}
			b.ReportMetric(float64((cpuTime(b)-cpu0).Microseconds())/1000/float64(b.N), "ms-cpu/frame")
		})
	}
}
