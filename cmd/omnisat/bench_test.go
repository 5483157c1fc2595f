package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/omnisat/omnisat/internal/testaudio"
	"github.com/omnisat/omnisat/realtime/realtimetest"
)

// processCPU reads a process's user+system CPU time from /proc.
func processCPU(pid int) time.Duration {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0
	}
	f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+2:]))
	ut, _ := strconv.ParseInt(f[11], 10, 64)
	st, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(ut+st) * time.Second / 100 // USER_HZ
}

func processRSS(pid int) int64 {
	b, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			n, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			return n
		}
	}
	return 0
}

// BenchmarkWholePath runs the real binary on the virtual sound card — PortAudio microphone
// (44.1 kHz → 16 kHz), PortAudio speaker, and for "video" an OpenCV camera reading a 30 fps
// 640×480 file with one JPEG a second — against a simulator in this process, and reports the
// omnisat process's CPU per second of media and its resident memory.
//
//	go test -run '^$' -bench WholePath -benchtime 1x ./cmd/omnisat
func BenchmarkWholePath(b *testing.B) {
	testaudio.Start(b)
	bin := filepath.Join(b.TempDir(), "omnisat")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		b.Fatalf("build: %v %s", err, out)
	}
	dir := b.TempDir()
	video := filepath.Join(dir, "cam.mp4")
	if out, err := exec.Command("ffmpeg", "-loglevel", "error", "-f", "lavfi", "-i", "testsrc=size=640x480:rate=30",
		"-t", "5", "-pix_fmt", "yuv420p", video).CombinedOutput(); err != nil {
		b.Fatalf("ffmpeg: %v %s", err, out)
	}
	wavPath, _ := filepath.Abs("../../configs/demo/hello.wav")
	for _, tc := range []struct{ name, mode, camera, in, out string }{
		{"audio", "audio", "none", "default", "default"},
		{"video_1fps_from_30fps_file", "video", "file:" + video, "default", "default"},
		{"mic_only", "audio", "none", "default", "none"},
		{"speaker_only", "audio", "none", "file:" + wavPath + "\n  loop: true", "default"},
		{"no_devices", "audio", "none", "file:" + wavPath + "\n  loop: true", "none"},
		{"audio_small_buffers", "audio", "none", "default\n  input_latency: 1ms\n  output_latency: 1ms", "default"},
	} {
		b.Run(tc.name, func(b *testing.B) {
			for range b.N {
				sim := realtimetest.NewServer(realtimetest.Options{})
				cfg := filepath.Join(dir, tc.name+".yaml")
				os.WriteFile(cfg, []byte("server:\n  url: "+sim.URL()+"\n  mode: "+tc.mode+
					"\naudio:\n  input: "+tc.in+"\n  output: "+tc.out+"\ncamera:\n  source: "+tc.camera+"\nlog:\n  level: warn\n"), 0o600)
				cmd := exec.Command(bin, "run", "-c", cfg, "--state-dir", dir)
				cmd.Env = os.Environ()
				if err := cmd.Start(); err != nil {
					b.Fatal(err)
				}
				// Let start-up settle, then measure a steady stretch.
				deadline := time.Now().Add(20 * time.Second)
				for time.Now().Before(deadline) {
					if recs := sim.Sessions(); len(recs) > 0 && len(recs[0].Appends) >= 3 {
						break
					}
					time.Sleep(100 * time.Millisecond)
				}
				cpu0, chunks0 := processCPU(cmd.Process.Pid), len(sim.Sessions()[0].Appends)
				time.Sleep(10 * time.Second)
				cpu1, chunks1 := processCPU(cmd.Process.Pid), len(sim.Sessions()[0].Appends)
				rss := processRSS(cmd.Process.Pid)
				cmd.Process.Signal(syscall.SIGINT)
				cmd.Wait()
				sim.Close()
				media := float64(chunks1 - chunks0) // 1 s chunks
				b.ReportMetric(float64((cpu1-cpu0).Milliseconds())/media, "cpu-ms/s-media")
				b.ReportMetric(float64(rss)/1024, "rss-MiB")
				b.ReportMetric(media, "media-s")
			}
		})
	}
}
