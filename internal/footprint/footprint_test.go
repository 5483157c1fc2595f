package footprint

import (
	"bufio"
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/omnisat/omnisat/agent/control"
	"github.com/omnisat/omnisat/devices/wav"
	"github.com/omnisat/omnisat/internal/testaudio"
	"github.com/omnisat/omnisat/pipeline"
)

// BenchmarkFootprint runs the real binary (omnisat run, built as make build builds it) as its
// own process against the simulator in another process (cmd/omnisat-simulator built as a
// static pure-Go program, so the two share no binary and no library), once for a short and
// once for a long stretch of streaming, and reports
//
//   - cpu-ms/s: CPU of the omnisat process and its camera program (wait4's rusage: user +
//     system, µs resolution, children included) of the long run minus the short run, divided
//     by the difference in streamed seconds, so that start-up and shutdown cancel out. A
//     streamed second is a second of wall time from the session's start to the status call:
//     the microphones here are paced in real time, and a count of chunks would not do, as a
//     chunk is cut short where speech may start over the model's reply (about one in eight
//     with the demo WAV);
//   - cpu-steady-ms/s: CPU of omnisat and its children per second of steady streaming, from
//     /proc/PID/task/*/schedstat 3 s after the session started and at the end of the long run.
//     No start-up in it at all: where start-up costs differ from run to run (the PulseAudio
//     row: ALSA's pulse plugin spins PortAudio's capture thread until the first audio comes,
//     1–2 s of CPU that is not the same in the short and the long run, because the test
//     card's null sink renders its first block of 2 s: devices/audio/README.md), the difference above
//     is off by that much and this figure is not. A thread that ends between the samples takes
//     its CPU with it; none does in steady streaming;
//   - chunks/s: chunks sent per streamed second, to show those cuts;
//   - startup-cpu-ms: CPU when omnisat printed its banner (devices open, agent built), summed
//     over its threads and children from /proc/PID/task/*/schedstat (nanoseconds);
//   - wakeups/s: voluntary context switches summed over /proc/PID/task/*/status of omnisat and
//     its children, per second of steady streaming (from 3 s after the session started to the
//     end of the long run);
//   - private-MB, private-growth-MB, private-max-MB: Private_Clean + Private_Dirty of /proc/PID/smaps_rollup
//     (omnisat and its children) at the first sample, 5 s after the session started, and the
//     growth from there to the last sample of the long run, and the largest sample (every 5 s).
//
// Configurations: floor (not omnisat: testdata/floor, a C program that does only the work no
// client can skip, a timer wake-up, base64 of a second of audio and a loopback send, once a
// second: what this machine charges for that; its figures are CPU and voluntary switches from
// its own rusage), floor_code (the same floor also running through 512 pages of code a second,
// one instruction on each: what a page of code costs here when a program comes back to it a
// second later, which the floor, whose code fits in a few pages, hardly pays and a real
// client, whose work of a second runs through hundreds, does), floor_answers (the same floor
// reading what a server says back: a sink
// that answers each second as the simulator answers audio_file, in size and timing; the floor
// reads the answers and decodes nothing), floor_go_plain and floor_go_quiet (not omnisat:
// testdata/floorgo, the floor's job in Go, with a time.Ticker and net.Conn.Write, and with a
// timerfd and raw writes through the runtime's poller: what the Go runtime adds here; measured
// as the floor is), audio_file (audio
// mode, the demo WAV looped as the microphone, output none, no camera: the headline; the file
// hands over one 1 s chunk at a time), audio_file_100ms (the
// same with input_latency: 100ms: blocks as a sound card's 100 ms buffer delivers them),
// video_file_1fps (the same in video mode, plus a 1 fps 640×480 video
// file as the camera: one decode and one JPEG a second), video_raw_1fps (the same with the
// file's frames uncompressed, as a USB camera's YUV frames come: one colour conversion and one
// JPEG a second, the camera cost issue 15's video goal counts), audio_pulse (PortAudio microphone and
// speaker on the virtual sound card: PulseAudio through ALSA's pulse plugin), audio_alsa
// (PortAudio on a plain ALSA device with no sound server in between, as on a Raspberry Pi: the
// paced test card of testdata/alsapaced, an ALSA plugin that plays into nothing and captures
// silence at 48 kHz, paced by a timer once per period as a card by its interrupts),
// audio_alsa_bare (the same with ALSA's configuration as ALSA alone installs it, none of the
// additions other packages put in its conf.d directories: see bareALSAConfig),
// audio_alsa_mic_only (the paced card's microphone with output: none: what the idle rows
// pay for their output stream, which runs while it plays only silence),
// audio_alsa_talking (the paced card with the demo's speech as what its microphone hears, so
// that the simulator answers and the speaker plays, as in a conversation: the other device
// rows hear silence, as a satellite does between conversations), audio_alsa_rest and
// audio_pulse_rest (audio_alsa and audio_pulse with output_rest: 2s: the speaker, with nothing
// to play, closes its stream), and
// python_probe (not omnisat: testdata/probe/probe.py, a Python client streaming the same WAV to
// the same simulator as the MiniCPM-o project's audio_probe.py does, the yardstick of issue 15's
// CPU goal; measured as the floor is).
//
//	make footprint
//	FOOTPRINT_LONG=30m FOOTPRINT_ONLY=audio_file make footprint
//
// FOOTPRINT_SHORT and FOOTPRINT_LONG (defaults 8s and 68s, like the 8 s and 65 s runs)
// set the two stretches; FOOTPRINT_ONLY picks configurations (a comma list); FOOTPRINT_LOG=1
// logs the memory samples (every 5 s); FOOTPRINT_THREADS=1 writes each thread's CPU and
// wake-ups over the long run's steady stretch (see reportThreads).
func BenchmarkFootprint(b *testing.B) {
	short := envDuration(b, "FOOTPRINT_SHORT", 8*time.Second)
	long := envDuration(b, "FOOTPRINT_LONG", 68*time.Second)
	if long <= short {
		b.Fatalf("FOOTPRINT_LONG %v must be longer than FOOTPRINT_SHORT %v", long, short)
	}
	dir := b.TempDir()
	bin := buildPrograms(b, dir)
	sim := startSimulator(b, dir)
	wavPath, err := filepath.Abs("../../configs/demo/hello.wav")
	if err != nil {
		b.Fatal(err)
	}
	fileAudio := "input: file:" + wavPath + "\n  loop: true\n  output: none"
	video := filepath.Join(dir, "cam1fps.mp4")
	rawVideo := filepath.Join(dir, "cam1fps_raw.avi")
	only := os.Getenv("FOOTPRINT_ONLY")
	selected := func(row string) bool { return only == "" || slices.Contains(strings.Split(only, ","), row) }
	if selected("floor") {
		b.Run("floor", func(b *testing.B) { benchFloor(b, dir, false, short, long) })
	}
	if selected("floor_answers") {
		b.Run("floor_answers", func(b *testing.B) { benchFloor(b, dir, true, short, long) })
	}
	if selected("floor_code") {
		b.Run("floor_code", func(b *testing.B) {
			benchFloor(b, dir, false, short, long, "code="+strconv.Itoa(floorCodePages))
		})
	}
	if selected("floor_go_plain") || selected("floor_go_quiet") {
		floorGo := buildFloorGo(b, dir)
		for _, form := range []string{"plain", "quiet"} {
			if selected("floor_go_" + form) {
				b.Run("floor_go_"+form, func(b *testing.B) { benchFloorGo(b, floorGo, form, short, long) })
			}
		}
	}
	if selected("python_probe") {
		b.Run("python_probe", func(b *testing.B) { benchPythonProbe(b, sim, wavPath, short, long) })
	}
	for _, fc := range []struct {
		name, mode, audio, camera string
		setup                     func(b *testing.B)
	}{
		{name: "audio_file", mode: "audio", audio: fileAudio, camera: "none"},
		{name: "audio_file_100ms", mode: "audio", audio: fileAudio + "\n  input_latency: 100ms", camera: "none"},
		{name: "video_file_1fps", mode: "video", audio: fileAudio, camera: "file:" + video,
			setup: func(b *testing.B) { makeVideo(b, video) }},
		{name: "video_raw_1fps", mode: "video", audio: fileAudio, camera: "file:" + rawVideo,
			setup: func(b *testing.B) { makeVideo(b, rawVideo, "-c:v", "rawvideo") }},
		{name: "audio_pulse", mode: "audio", audio: "input: default\n  output: default", camera: "none",
			setup: func(b *testing.B) { testaudio.Start(b) }},
		{name: "audio_pulse_rest", mode: "audio", audio: "input: default\n  output: default\n  output_rest: 2s", camera: "none",
			setup: func(b *testing.B) { testaudio.Start(b) }},
		{name: "audio_alsa", mode: "audio", audio: "input: default\n  output: default", camera: "none",
			setup: func(b *testing.B) { pacedCard(b, dir, "") }},
		{name: "audio_alsa_bare", mode: "audio", audio: "input: default\n  output: default", camera: "none",
			setup: func(b *testing.B) { pacedCard(b, dir, ""); bareALSAConfig(b, dir) }},
		{name: "audio_alsa_mic_only", mode: "audio", audio: "input: default\n  output: none", camera: "none",
			setup: func(b *testing.B) { pacedCard(b, dir, "") }},
		{name: "audio_alsa_talking", mode: "audio", audio: "input: default\n  output: default", camera: "none",
			setup: func(b *testing.B) { pacedCard(b, dir, talkingRoom(b, dir, wavPath)) }},
		{name: "audio_alsa_rest", mode: "audio", audio: "input: default\n  output: default\n  output_rest: 2s", camera: "none",
			setup: func(b *testing.B) { pacedCard(b, dir, "") }},
	} {
		if !selected(fc.name) {
			continue
		}
		b.Run(fc.name, func(b *testing.B) {
			if fc.setup != nil {
				fc.setup(b)
			}
			cfg := filepath.Join(dir, fc.name+".yaml")
			if err := os.WriteFile(cfg, []byte("server:\n  url: "+sim+"\n  mode: "+fc.mode+"\naudio:\n  "+fc.audio+
				"\ncamera:\n  source: "+fc.camera+"\nlog:\n  level: warn\n"), 0o600); err != nil {
				b.Fatal(err)
			}
			for range b.N {
				s := runOnce(b, bin, cfg, dir, short, false, false)
				l := runOnce(b, bin, cfg, dir, long, os.Getenv("FOOTPRINT_LOG") == "1", os.Getenv("FOOTPRINT_THREADS") == "1")
				streamed := l.streamed - s.streamed
				if os.Getenv("FOOTPRINT_LOG") == "1" {
					// The per-second figure is a difference: say what it is made of.
					b.Logf("short run: %v of CPU, %v streamed, %d chunks; long run: %v, %v, %d chunks",
						s.cpu, s.streamed.Round(time.Millisecond), s.chunks, l.cpu, l.streamed.Round(time.Millisecond), l.chunks)
				}
				if streamed <= 0 {
					b.Fatalf("the long run streamed %v, the short %v", l.streamed, s.streamed)
				}
				b.ReportMetric(float64(l.cpu-s.cpu)/float64(time.Millisecond)/streamed.Seconds(), "cpu-ms/s")
				b.ReportMetric(l.wakeups, "wakeups/s")
				b.ReportMetric(l.steady, "cpu-steady-ms/s")
				b.ReportMetric(float64(l.startup)/float64(time.Millisecond), "startup-cpu-ms")
				b.ReportMetric(float64(l.privFirst)/1e6, "private-MB")
				b.ReportMetric(float64(l.privLast-l.privFirst)/1e6, "private-growth-MB")
				b.ReportMetric(float64(l.privMax)/1e6, "private-max-MB")
				b.ReportMetric(streamed.Seconds(), "streamed-s")
				b.ReportMetric(float64(l.chunks-s.chunks)/streamed.Seconds(), "chunks/s")
			}
		})
	}
}

func envDuration(b *testing.B, name string, def time.Duration) time.Duration {
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	d, err := time.ParseDuration(v)
	if err != nil {
		b.Fatalf("%s: %v", name, err)
	}
	return d
}

// buildPrograms builds omnisat and its camera program side by side, as make build does, and
// returns omnisat's path.
func buildPrograms(b *testing.B, dir string) string {
	for _, prog := range []string{"omnisat", "omnisat-camera"} {
		out, err := exec.Command("go", "build", "-trimpath", "-ldflags", "-s -w", "-o", filepath.Join(dir, prog), "../../cmd/"+prog).CombinedOutput()
		if err != nil {
			b.Fatalf("build %s: %v %s", prog, err, out)
		}
	}
	return filepath.Join(dir, "omnisat")
}

// startSimulator runs the simulator program (cmd/omnisat-simulator, what omnisat simulate runs)
// built as a static pure-Go program, so that it shares no library with the omnisat measured, and
// returns its URL.
func startSimulator(b *testing.B, dir string) string {
	bin := filepath.Join(dir, "simulator")
	build := exec.Command("go", "build", "-o", bin, "../../cmd/omnisat-simulator")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		b.Fatalf("build the simulator: %v %s", err, out)
	}
	cmd := exec.Command(bin, "--listen", "127.0.0.1:0", "--workers", "2")
	out, err := cmd.StdoutPipe()
	if err != nil {
		b.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { cmd.Process.Signal(syscall.SIGINT); cmd.Wait() })
	lines := bufio.NewScanner(out)
	for lines.Scan() {
		if _, url, ok := strings.Cut(lines.Text(), " listening on "); ok {
			go io.Copy(io.Discard, out)
			return strings.TrimSpace(url)
		}
	}
	b.Fatal("the simulator printed no address")
	return ""
}

// makeVideo writes a 640×480 test video at one frame a second (ffmpeg's codec for the file's
// extension unless codec names one).
func makeVideo(b *testing.B, path string, codec ...string) {
	testaudio.Require(b, "ffmpeg")
	if _, err := os.Stat(path); err == nil {
		return
	}
	args := []string{"-loglevel", "error", "-f", "lavfi", "-i", "testsrc=size=640x480:rate=1", "-t", "60", "-pix_fmt", "yuv420p"}
	if out, err := exec.Command("ffmpeg", append(append(args, codec...), path)...).CombinedOutput(); err != nil {
		b.Fatalf("ffmpeg: %v %s", err, out)
	}
}

// footprint is what one run cost.
type footprint struct {
	cpu                 time.Duration // user+system over the process's life, children included
	startup             time.Duration // CPU when the banner was printed
	streamed            time.Duration // wall time from the session's start to the status call
	chunks              uint64        // chunks the agent sent
	wakeups             float64       // voluntary context switches a second, steady streaming
	steady              float64       // CPU ms a second, steady streaming
	privFirst, privLast int64         // private memory, bytes: the first and last samples
	privMax             int64         // and the largest
}

// runOnce runs omnisat run -c cfg until it has streamed for d after its session started;
// logMem logs the memory samples, threads each thread's share of the steady stretch (both to
// stderr).
func runOnce(b *testing.B, bin, cfg, dir string, d time.Duration, logMem, threads bool) footprint {
	cmd := exec.Command(bin, "run", "-c", cfg, "--state-dir", dir)
	cmd.Env = slices.DeleteFunc(os.Environ(), func(kv string) bool { return kv == "PULSE_SERVER=" })
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		b.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	pid := cmd.Process.Pid
	var fp footprint
	started := make(chan struct{})
	go func() {
		lines := bufio.NewScanner(out)
		banner, listening := false, false
		for lines.Scan() {
			line := lines.Text()
			if !banner && strings.HasPrefix(line, "omnisat ") {
				banner = true
				fp.startup = cpuOf(tree(pid))
			}
			if !listening && strings.Contains(line, "state listening") {
				listening = true
				close(started)
			}
		}
	}()
	var streamFrom time.Time
	select {
	case <-started:
		streamFrom = time.Now()
	case <-time.After(60 * time.Second):
		cmd.Process.Kill()
		cmd.Wait()
		b.Fatal("omnisat run did not start streaming within 60 s")
	}
	end := time.Now().Add(d)
	var vcs0 int64
	var cpu0 time.Duration
	var t0 time.Time
	var threads0 map[int]threadSample
	if d > 5*time.Second {
		time.Sleep(3 * time.Second)
		pids := tree(pid)
		vcs0, cpu0, t0 = switchesOf(pids), cpuOf(pids), time.Now()
		if threads {
			threads0 = threadsOf(pids)
		}
		for next := t0.Add(2 * time.Second); next.Before(end); next = next.Add(5 * time.Second) {
			time.Sleep(time.Until(next))
			p := privateOf(tree(pid))
			if fp.privFirst == 0 {
				fp.privFirst = p
			}
			fp.privLast, fp.privMax = p, max(fp.privMax, p)
			if logMem { // to stderr as it comes: a benchmark's log keeps only its first lines
				fmt.Fprintf(os.Stderr, "%5.0f s streaming: private %.1f MB\n", d.Seconds()-time.Until(end).Seconds(), float64(p)/1e6)
			}
		}
	}
	time.Sleep(time.Until(end))
	if !t0.IsZero() {
		pids, seconds := tree(pid), time.Since(t0).Seconds()
		fp.wakeups = float64(switchesOf(pids)-vcs0) / seconds
		fp.steady = float64(cpuOf(pids)-cpu0) / float64(time.Millisecond) / seconds
		if threads0 != nil {
			reportThreads(os.Stderr, strings.TrimSuffix(filepath.Base(cfg), ".yaml"), threads0, threadsOf(pids), seconds)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	resp, err := control.Call(ctx, filepath.Join(dir, "control.sock"), control.Request{Cmd: "status"})
	cancel()
	if err != nil || resp.Status == nil {
		b.Fatalf("status: %v %+v", err, resp)
	}
	fp.streamed, fp.chunks = time.Since(streamFrom), resp.Status.ChunksSent
	if fp.chunks == 0 {
		b.Fatalf("omnisat streamed for %v and sent no chunk", fp.streamed)
	}
	cmd.Process.Signal(syscall.SIGINT)
	if err := cmd.Wait(); err != nil {
		b.Fatalf("omnisat run: %v", err)
	}
	ru := cmd.ProcessState.SysUsage().(*syscall.Rusage)
	fp.cpu = time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	return fp
}

// tree is pid and its descendants (the camera program).
func tree(pid int) []int {
	pids := []int{pid}
	tasks, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/children", pid))
	for _, t := range tasks {
		b, _ := os.ReadFile(t)
		for _, f := range strings.Fields(string(b)) {
			if child, err := strconv.Atoi(f); err == nil {
				pids = append(pids, tree(child)...)
			}
		}
	}
	return pids
}

// sumTasks adds up a number read from every thread of pids.
func sumTasks(pids []int, file string, read func(string) int64) int64 {
	var sum int64
	for _, pid := range pids {
		tasks, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/%s", pid, file))
		for _, t := range tasks {
			if b, err := os.ReadFile(t); err == nil {
				sum += read(string(b))
			}
		}
	}
	return sum
}

// cpuOf is the time on CPU of every thread of pids (schedstat's first field, ns).
func cpuOf(pids []int) time.Duration {
	return time.Duration(sumTasks(pids, "schedstat", onCPU))
}

// onCPU is a thread's time on CPU in nanoseconds, the first field of its schedstat.
func onCPU(schedstat string) int64 {
	f := strings.Fields(schedstat)
	if len(f) == 0 {
		return 0
	}
	n, _ := strconv.ParseInt(f[0], 10, 64)
	return n
}

// switchesOf is how often the threads of pids went to sleep (voluntary context switches).
func switchesOf(pids []int) int64 {
	return sumTasks(pids, "status", func(s string) int64 { return field(s, "voluntary_ctxt_switches:") })
}

// privateOf is Private_Clean + Private_Dirty of pids in bytes: the memory only they use.
func privateOf(pids []int) int64 {
	var sum int64
	for _, pid := range pids {
		b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/smaps_rollup", pid))
		sum += 1024 * (field(string(b), "Private_Clean:") + field(string(b), "Private_Dirty:"))
	}
	return sum
}

// field reads the number after key in a /proc file of "key value" lines.
func field(s, key string) int64 {
	for _, line := range strings.Split(s, "\n") {
		if v, ok := strings.CutPrefix(line, key); ok {
			if f := strings.Fields(v); len(f) > 0 {
				n, _ := strconv.ParseInt(f[0], 10, 64)
				return n
			}
		}
	}
	return 0
}

// pacedCard builds the paced ALSA test card (testdata/alsapaced) and makes it the default ALSA
// device of the processes this benchmark starts (HOME holds the .asoundrc that names it).
func pacedCard(b *testing.B, dir, capture string) {
	testaudio.Require(b, "cc")
	home := filepath.Join(dir, "alsa-home")
	lib := filepath.Join(home, "libasound_module_pcm_paced.so")
	if err := os.MkdirAll(home, 0o755); err != nil {
		b.Fatal(err)
	}
	if out, err := exec.Command("cc", "-shared", "-fPIC", "-DPIC", "-O2", "-Wall", "-o", lib,
		"testdata/alsapaced/pcm_paced.c", "-lasound").CombinedOutput(); err != nil {
		b.Fatalf("build the paced ALSA card (libasound2-dev): %v %s", err, out)
	}
	card := "type paced"
	if capture != "" {
		card += " capture \"" + capture + "\""
	}
	asoundrc := "pcm_type.paced { lib \"" + lib + "\" }\npcm.!default { " + card + " }\n"
	if err := os.WriteFile(filepath.Join(home, ".asoundrc"), []byte(asoundrc), 0o644); err != nil {
		b.Fatal(err)
	}
	b.Setenv("HOME", home)
	b.Setenv("PULSE_SERVER", "") // removed from omnisat's environment: no sound server in the way
}

// talkingRoom writes the paced card's capture file (raw signed 16-bit mono at 48 kHz) and
// returns its path: the WAV at wavPath, then 7 s without speech for the reply, looped, all of
// it over a room's noise at about -60 dBFS (a microphone never hears digital silence). The
// simulator answers the speech as it answers the file rows, so the speaker plays replies and
// the echo canceller works on them (audio_alsa_talking).
func talkingRoom(b *testing.B, dir, wavPath string) string {
	a, err := wav.ReadFile(wavPath)
	if err != nil {
		b.Fatal(err)
	}
	rs, err := pipeline.NewResampler(a.Rate, 48000)
	if err != nil {
		b.Fatal(err)
	}
	at48 := rs.Flush(rs.Process(nil, a.Mono()))
	at48 = append(at48, make([]float32, 7*48000)...)
	noise := rand.New(rand.NewPCG(15, 16))
	for i := range at48 {
		at48[i] += float32(noise.NormFloat64() / 1000)
	}
	raw := make([]byte, 0, 2*len(at48))
	for _, v := range pipeline.Float32ToInt16(nil, at48) {
		raw = binary.LittleEndian.AppendUint16(raw, uint16(v))
	}
	path := filepath.Join(dir, "talking-room.raw")
	if err := os.WriteFile(path, raw, 0o644); err != nil {
		b.Fatal(err)
	}
	return path
}

// bareALSAConfig points ALSA (ALSA_CONFIG_PATH) at a copy of its top configuration file that
// leaves out the conf.d directories, where other packages add to it: on this machine
// PulseAudio's hook, which loads libpulse (marked never to be unloaded, with libX11, libsystemd
// and libsndfile's codecs behind it) even when no PulseAudio runs, and alsa-plugins'
// definitions. What is left is ALSA as its own packages install it, as on a device with no
// sound server and no plugin packages; the user's .asoundrc still loads.
func bareALSAConfig(b *testing.B, dir string) {
	const top = "/usr/share/alsa/alsa.conf"
	conf, err := os.ReadFile(top)
	if err != nil {
		b.Fatalf("ALSA's configuration (libasound2-data): %v", err)
	}
	var kept []string
	left := 0
	for _, line := range strings.Split(string(conf), "\n") {
		if f := strings.TrimSpace(line); strings.HasPrefix(f, `"`) && strings.HasSuffix(f, `/conf.d"`) {
			left++
			continue
		}
		kept = append(kept, line)
	}
	if left == 0 {
		b.Fatalf("%s names no conf.d directory: this ALSA loads its additions some other way", top)
	}
	bare := filepath.Join(dir, "alsa-bare.conf")
	if err := os.WriteFile(bare, []byte(strings.Join(kept, "\n")), 0o644); err != nil {
		b.Fatal(err)
	}
	b.Setenv("ALSA_CONFIG_PATH", bare)
}

// benchFloor reports what testdata/floor costs per second, measured as omnisat is: a long run
// minus a short one; with answers, it reads the answers of answerFloor too.
func benchFloor(b *testing.B, dir string, answers bool, short, long time.Duration, extra ...string) {
	testaudio.Require(b, "cc")
	bin := filepath.Join(dir, "floor")
	if out, err := exec.Command("cc", "-O2", "-Wall", "-o", bin, "testdata/floor/floor.c").CombinedOutput(); err != nil {
		b.Fatalf("build testdata/floor: %v %s", err, out)
	}
	serve, mode := discard, extra
	if answers {
		serve, mode = answerFloor, append([]string{"answers"}, extra...)
	}
	port := loopbackSink(b, serve)
	benchCommand(b, short, long, func(d time.Duration) *exec.Cmd {
		return exec.Command(bin, append([]string{port, strconv.Itoa(int(d.Seconds()))}, mode...)...)
	})
}

// floorCodePages is how many pages of code the floor_code row runs through each second (see
// testdata/floor): its CPU less the floor's, divided by this, is what this machine charges for a
// page of code a program comes back to after a second away.
const floorCodePages = 512

// What answerFloor says back to the floor, after each second of audio it receives (85,336
// bytes of base64): the simulator's answers to audio_file, in size and timing. A 40 s trace of
// audio_file read 58 KB a second from the simulator on average, a second of reply audio
// (128,278 bytes) in three seconds of eight and less in the others, each a few milliseconds
// after the chunk it answers.
const (
	floorChunkBytes  = 85336
	floorReplyBytes  = 128278
	floorOtherBytes  = 16000
	floorAnswerDelay = 4 * time.Millisecond
)

// floorAnswer is the body of every answer (the first floorReplyBytes or floorOtherBytes of
// it): base64 text, read by every connection and written by none.
var floorAnswer = func() []byte {
	const alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
	body := make([]byte, floorReplyBytes)
	for i := range body {
		body[i] = alphabet[i%len(alphabet)]
	}
	return body
}()

// answerFloor answers every second of the floor's audio on c with one message (a 4-byte
// big-endian length and that many bytes: see testdata/floor), until c ends.
func answerFloor(c net.Conn) {
	chunk := make([]byte, floorChunkBytes)
	var head [4]byte
	for second := 0; ; second++ {
		if _, err := io.ReadFull(c, chunk); err != nil {
			return
		}
		time.Sleep(floorAnswerDelay)
		size := floorOtherBytes
		if second%8 < 3 {
			size = floorReplyBytes
		}
		binary.BigEndian.PutUint32(head[:], uint32(size))
		if _, err := (&net.Buffers{head[:], floorAnswer[:size]}).WriteTo(c); err != nil {
			return
		}
	}
}

// buildFloorGo builds testdata/floorgo into dir and returns its path.
func buildFloorGo(b *testing.B, dir string) string {
	bin := filepath.Join(dir, "floorgo")
	if out, err := exec.Command("go", "build", "-trimpath", "-o", bin, "./testdata/floorgo").CombinedOutput(); err != nil {
		b.Fatalf("build testdata/floorgo: %v %s", err, out)
	}
	return bin
}

// benchFloorGo reports what testdata/floorgo (bin) costs per second, measured as the floor is:
// the floor's job in Go, written the usual way (plain) or without runtime timers and
// blocking-style system calls (quiet), to tell what the Go runtime charges here from what
// omnisat does.
func benchFloorGo(b *testing.B, bin, form string, short, long time.Duration) {
	port := loopbackSink(b, discard)
	benchCommand(b, short, long, func(d time.Duration) *exec.Cmd {
		return exec.Command(bin, port, strconv.Itoa(int(d.Seconds())), form)
	})
}

// loopbackSink listens on a loopback port and runs serve on every connection (closing it
// after), until the benchmark ends; it returns the port.
func loopbackSink(b *testing.B, serve func(net.Conn)) string {
	sink, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { sink.Close() })
	go func() {
		for {
			c, err := sink.Accept()
			if err != nil {
				return
			}
			go func() { serve(c); c.Close() }()
		}
	}()
	return strconv.Itoa(sink.Addr().(*net.TCPAddr).Port)
}

// discard reads and drops whatever comes on c.
func discard(c net.Conn) { io.Copy(io.Discard, c) }

// benchPythonProbe reports what a Python client streaming as the MiniCPM-o project's
// examples/realtime/audio_probe.py does (testdata/probe/probe.py) costs here, against the same
// simulator and WAV, measured as omnisat is: issue 15's CPU goal is a fifth of that figure, and
// this machine's charge for the same work moves from hour to hour.
func benchPythonProbe(b *testing.B, sim, wav string, short, long time.Duration) {
	testaudio.Require(b, "python3")
	// The first interpreter with both modules: the one on PATH, or Debian's, where apt-get puts them.
	python := ""
	for _, candidate := range []string{"python3", "/usr/bin/python3"} {
		if exec.Command(candidate, "-c", "import numpy, websockets").Run() == nil {
			python = candidate
			break
		}
	}
	if python == "" {
		b.Fatal("python_probe needs Python's numpy and websockets (apt-get install python3-numpy python3-websockets)")
	}
	url := sim + "?mode=audio"
	if strings.Contains(sim, "?") {
		url = sim + "&mode=audio"
	}
	benchCommand(b, short, long, func(d time.Duration) *exec.Cmd {
		return exec.Command(python, "testdata/probe/probe.py", url, wav, strconv.Itoa(int(d.Seconds())))
	})
}

// benchCommand runs the command made for a short and a long stretch, after a warm-up run, and
// reports the difference in its own rusage per second of difference: CPU, and voluntary
// switches as wake-ups.
func benchCommand(b *testing.B, short, long time.Duration, command func(time.Duration) *exec.Cmd) {
	run := func(d time.Duration) (cpu time.Duration, switches int64) {
		cmd := command(d)
		cmd.Stderr = os.Stderr
		if err := cmd.Run(); err != nil {
			b.Fatalf("%s: %v", cmd.Path, err)
		}
		ru := cmd.ProcessState.SysUsage().(*syscall.Rusage)
		return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()), ru.Nvcsw
	}
	run(short) // a first start reads its files from disk (Python compiles its modules): not counted
	for range b.N {
		sCPU, sSw := run(short)
		lCPU, lSw := run(long)
		seconds := (long - short).Seconds()
		b.ReportMetric(float64(lCPU-sCPU)/float64(time.Millisecond)/seconds, "cpu-ms/s")
		b.ReportMetric(float64(lSw-sSw)/seconds, "wakeups/s")
	}
}
