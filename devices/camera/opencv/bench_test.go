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
	cpu, _ := usage(b)
	return cpu
}

// usage is the process's CPU time and voluntary context switches (its wake-ups), every thread
// included, ended ones too.
func usage(b *testing.B) (time.Duration, int64) {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()), ru.Nvcsw
}

// BenchmarkCameraCPU is what the camera costs the board: the process CPU time and wake-ups per
// second of a 30 fps 640×480 video-file camera (grab every frame, decode + shrink + encode
// EncodeFPS of them), H.264 (the file's decoder works on every frame) and uncompressed (as a
// camera's frames come: each grab is a read of the frame). Each iteration is 2 s of real time.
func BenchmarkCameraCPU(b *testing.B) {
	dir := b.TempDir()
	h264 := makeVideo(b, filepath.Join(dir, "cam.mp4"), 640, 480, 30, 10)
	raw := makeVideo(b, filepath.Join(dir, "cam.avi"), 640, 480, 30, 4, "-c:v", "rawvideo")
	for _, bc := range []struct {
		name string
		path string
		fps  float64
	}{{"h264/encode_fps=1", h264, 1}, {"h264/encode_fps=30", h264, 30}, {"raw/encode_fps=1", raw, 1}} {
		b.Run(bc.name, func(b *testing.B) {
			c, err := Open(context.Background(), camera.Config{Source: "file:" + bc.path, EncodeFPS: bc.fps}, nil, nil)
			if err != nil {
				b.Fatal(err)
			}
			defer c.Close()
			time.Sleep(200 * time.Millisecond) // past the opening
			b.ResetTimer()
			cpu0, wakes0 := usage(b)
			t0 := time.Now()
			for i := 0; i < b.N; i++ {
				time.Sleep(2 * time.Second)
			}
			cpu, wakes := usage(b)
			wall := time.Since(t0)
			b.ReportMetric(float64((cpu-cpu0).Microseconds())/1000/wall.Seconds(), "ms-cpu/s")
			b.ReportMetric(float64(wakes-wakes0)/wall.Seconds(), "wakeups/s")
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
