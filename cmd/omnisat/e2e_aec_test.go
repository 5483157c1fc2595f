package main

import (
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/omnisat/omnisat/agent"
	"github.com/omnisat/omnisat/devices"
	"github.com/omnisat/omnisat/devices/wav"
	"github.com/omnisat/omnisat/internal/signaltest"
	"github.com/omnisat/omnisat/internal/testaudio"
	"github.com/omnisat/omnisat/realtime/realtimetest"
)

// e2eRate is the rate everything is compared at: the model's input rate.
const e2eRate = 16000

func readAt(t *testing.T, path string, rate int) []float32 {
	t.Helper()
	a, err := wav.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	s, err := devices.Resample(a.Mono(), a.Rate, rate)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// onset is the first sample where s gets louder than -40 dBFS over 10 ms.
func onset(s []float32) int {
	const win = e2eRate / 100
	for i := 0; i+win <= len(s); i += win / 2 {
		if signaltest.LevelDB(s[i:i+win]) > -40 {
			return i
		}
	}
	return -1
}

// echoScene is one run of omnisat on a virtual sound card with an echo path: the speaker's
// output comes back into the microphone 6 dB down and delayed, the user's speech is played into
// the microphone, and the simulator answers with reply (the model talking).
type echoScene struct {
	up      []float32 // what the server received, 16 kHz
	heard   []float32 // what the microphone heard (the mic sink's monitor), 16 kHz
	session realtimetest.SessionRecord
	spk     []float32    // the speaker sink, recordRate
	spkT0   time.Time    // wall time of spk[0] (an upper bound)
	shift   int          // heard[i] is up[i+shift]
	askEnd  int          // where the user's request ends in heard
	echoAt  int          // where the model's speech starts in heard
	echoEnd int          // where it ends (mute), if the scene waited for it
	status  agent.Status // the agent's status at the end (its playback underruns)
}

// liveEcho is an echo scene while it plays: what the test waits on before each step. Every wait
// is on what the recordings or the server hold, in samples, never on how much time passed: a busy
// machine starts the agent, PulseAudio and paplay late, but the streams' positions stay true.
type liveEcho struct {
	sim          *realtimetest.Server
	heard, spk   *testaudio.Recording // the microphone (mic.monitor) and the speaker (spk.monitor)
	askAt, shift int                  // the user's request in heard at 16 kHz; heard[i] is up[i+shift]
	ask16        []float32
	echoAt       int // where the model's speech starts in heard at 16 kHz (waitEcho)
	echoEnd      int // where it has ended (waitEchoEnd)
}

// heard16 is the microphone's recording so far at 16 kHz.
func (l *liveEcho) heard16(t *testing.T) []float32 {
	s, err := devices.Resample(l.heard.Samples(), l.heard.Rate, e2eRate)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// toHeard is the position in the microphone's recording of position p at 16 kHz.
func (l *liveEcho) toHeard(p int) int { return int(int64(p) * int64(l.heard.Rate) / e2eRate) }

// upstream is what the server has received so far.
func (l *liveEcho) upstream() realtimetest.SessionRecord {
	if recs := l.sim.Sessions(); len(recs) > 0 {
		return recs[0]
	}
	return realtimetest.SessionRecord{}
}

// waitUp waits until the server holds n samples, or fails the test after within.
func (l *liveEcho) waitUp(t *testing.T, n int, within time.Duration) realtimetest.SessionRecord {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		rec := l.upstream()
		if len(rec.Audio) >= n {
			return rec
		}
		if time.Now().After(deadline) {
			t.Fatalf("the server holds %.2f s of audio after %v, want %.2f s", float64(len(rec.Audio))/e2eRate, within, float64(n)/e2eRate)
		}
		time.Sleep(500 * time.Millisecond) // each look copies the whole record
	}
}

// played waits until what was played into the microphone before now is in its recording (and
// a quarter second after it), and returns that recording's length at 16 kHz.
func (l *liveEcho) played(t *testing.T) int {
	t.Helper()
	end := max(l.heard.Len(), position(l.heard, time.Now()))
	if err := l.heard.WaitLen(end+l.heard.Rate/4, time.Minute); err != nil {
		t.Fatal(err)
	}
	return end * e2eRate / l.heard.Rate
}

// waitEcho waits until the microphone's recording holds the start of ref (the model's speech,
// 16 kHz) after the user's request, and returns where ref's first sample is, at 16 kHz. After
// the request the microphone hears nothing but the speaker, so the first sound is the echo's
// start; its first 3 s are then followed through any underrun gap a busy machine inserts, to
// make sure it is the model's speech.
func (l *liveEcho) waitEcho(t *testing.T, ref []float32) int {
	t.Helper()
	probe := ref[:min(len(ref), 3*e2eRate)]
	lead := onset(probe)
	from := l.askAt + len(l.ask16)
	for {
		if err := l.heard.WaitLen(l.heard.Len()+l.heard.Rate/2, time.Minute); err != nil {
			t.Fatal(err)
		}
		h := l.heard16(t)
		if on := onset(h[min(from, len(h)):]); on >= 0 && from+on+len(probe)+2*e2eRate <= len(h) {
			// Lined up exactly on its first quarter second of sound, then followed.
			at, _ := find(probe[lead:lead+e2eRate/4], h, from+on-e2eRate/10, e2eRate/2)
			at -= lead
			if _, worst := signaltest.Follow(probe, h, at, e2eRate/2, 2*e2eRate, e2eRate/200); worst < 0.5 {
				t.Fatalf("the first sound at the microphone after the request (%.2f s) is not the model's speech: "+
					"worst half second ncc %.2f", float64(at)/e2eRate, worst)
			}
			l.echoAt = at
			return at
		}
		if len(h) > from+30*e2eRate {
			t.Fatalf("the model's speech did not reach the microphone within 30 s of the request")
		}
	}
}

// track follows ref through sig 5 s at a time from ref[refAt] ≈ sig[sigAt], for n windows:
// where each window plays in sig against where it would without gaps, in ms (a window that is
// not found, ncc < 0.5, shows as NaN).
func track(ref, sig []float32, refAt, sigAt, n int) []float64 {
	const win, search = 5 * e2eRate, e2eRate / 2
	var out []float64
	moved := 0
	for k := range n {
		r := ref[min(len(ref), refAt+k*win):min(len(ref), refAt+(k+1)*win)]
		from := max(0, sigAt+k*win+moved-search)
		to := min(len(sig), sigAt+(k+1)*win+moved+search)
		if len(r) == 0 || from >= to {
			break
		}
		lag, c := signaltest.Align(r, sig[from:to])
		if c < 0.5 {
			out = append(out, math.NaN())
			continue
		}
		moved = from + lag - (sigAt + k*win)
		out = append(out, math.Round(float64(moved)/e2eRate*1000*10)/10)
	}
	return out
}

// waitEchoEnd waits until the model's speech, n samples long at 16 kHz, has ended at the
// microphone (a second of quiet after it), and returns where it ended. Underruns of a busy
// machine make it end later than n after its start, never sooner.
func (l *liveEcho) waitEchoEnd(t *testing.T, n int) int {
	t.Helper()
	from := l.echoAt + n - e2eRate/2
	for {
		if err := l.heard.WaitLen(l.heard.Len()+l.heard.Rate/2, time.Minute); err != nil {
			t.Fatal(err)
		}
		h := l.heard16(t)
		if q := signaltest.SilentFrom(h, from, e2eRate/100, e2eRate, 0.003); q >= 0 && q+e2eRate <= len(h) {
			l.echoEnd = q
			return q
		}
		if len(h) > from+60*e2eRate {
			t.Fatalf("the model's speech did not end at the microphone within a minute of its length")
		}
	}
}

// find is where ref first plays in sig after from (within the following span).
func find(ref, sig []float32, from, span int) (int, float64) {
	from = max(from, 0)
	lag, c := signaltest.Align(ref, sig[from:min(len(sig), from+span)])
	return from + lag, c
}

// TestEndToEndEchoCancellation is the proof of issue 7 on the virtual sound card, with the
// real binary: the model talks for 60 s into an echo path while the user is silent (the
// canceller's ERLE and convergence are measured over it, and no barge-in may happen), then the
// user talks over it (double talk reaches the server; barge-in stops the model); and in mute
// mode nothing of the echo reaches the server.
func TestEndToEndEchoCancellation(t *testing.T) {
	card := testaudio.Start(t)
	if !testaudio.Require(t, "espeak-ng", "paplay", "parecord", "pacat") {
		return
	}
	bin := buildOmnisat(t)
	dir := t.TempDir()
	speak := func(name, text string) string {
		p := filepath.Join(dir, name+".wav")
		if err := os.Rename(card.Speech(t, text), p); err != nil {
			t.Fatal(err)
		}
		return p
	}
	askPath := speak("ask", "Please tell me a long story.")
	stopPath := speak("stop", "Stop please, wait a moment, I have another question for you.")
	storyPath := speak("story", "Once upon a time there was a small satellite that listened to everyone in the house. "+
		"It heard the kettle, the dog and the radio, and it learnt to tell them apart from the people who spoke to it. "+
		"Every evening it told the children a story, and every evening they interrupted it with questions.")
	story := readAt(t, storyPath, 24000)
	ask16, stop16, story16 := readAt(t, askPath, e2eRate), readAt(t, stopPath, e2eRate), readAt(t, storyPath, e2eRate)

	unload, err := card.LoadEchoPath(60, -6)
	if err != nil {
		t.Fatal(err)
	}
	defer unload()

	run := func(t *testing.T, extra string, reply []float32, during func(l *liveEcho)) echoScene {
		sim := realtimetest.NewServer(realtimetest.Options{ForceListenCount: -1, Reply: reply})
		defer sim.Close()
		runDir := t.TempDir()
		cfgPath, sock := writeDeviceConfig(t, runDir, sim.URL(), "")
		if extra != "" { // more keys of the audio section
			b, _ := os.ReadFile(cfgPath)
			os.WriteFile(cfgPath, []byte(strings.Replace(string(b), "  output: default\n", "  output: default\n"+extra, 1)), 0o600)
		}
		l := &liveEcho{sim: sim, ask16: ask16,
			heard: card.Listen(t, "mic.monitor", recordRate), spk: card.Listen(t, "spk.monitor", recordRate)}
		stopOmnisat := runOmnisat(t, bin, cfgPath, runDir)
		waitState(t, sock, agent.StateListening, time.Minute)
		if err := card.PlayInto(askPath); err != nil {
			t.Fatal(err)
		}
		l.played(t)
		waitState(t, sock, agent.StateSpeaking, time.Minute)
		// The request is in both the microphone and the server (which has answered it): it lines
		// the two up.
		upAt, c1 := signaltest.Align(ask16, l.upstream().Audio)
		heardAt, c2 := signaltest.Align(ask16, l.heard16(t))
		if c1 < 0.8 || c2 < 0.8 {
			t.Fatalf("the user's request was not found (ncc %.2f upstream, %.2f at the microphone)", c1, c2)
		}
		l.askAt, l.shift = heardAt, upAt-heardAt
		during(l)
		st := status(t, sock)
		stopOmnisat()
		l.spk.Stop()
		l.heard.Stop()
		var sc echoScene
		sc.session = l.upstream()
		if len(sc.session.Rejections) > 0 {
			t.Fatalf("simulator rejected: %v", sc.session.Rejections)
		}
		sc.up = sc.session.Audio
		sc.heard = l.heard16(t)
		sc.spk, sc.spkT0 = l.spk.Samples(), l.spk.Start()
		sc.shift = l.shift
		sc.askEnd = l.askAt + len(ask16)
		sc.echoAt, sc.echoEnd, sc.status = l.echoAt, l.echoEnd, st
		return sc
	}

	t.Run("aec", func(t *testing.T) {
		// 90 s of the model talking (the user interrupts after 60 s of it): the story over and over.
		var reply []float32
		for len(reply) < 90*24000 {
			reply = append(reply, story...)
			reply = append(reply, make([]float32, 24000/4)...)
		}
		sc := run(t, "", reply, func(l *liveEcho) {
			// The user speaks once the microphone has heard 60 s of the model.
			echoAt := l.waitEcho(t, story16)
			if err := l.heard.WaitLen(l.toHeard(echoAt+60*e2eRate), 5*time.Minute); err != nil {
				t.Fatal(err)
			}
			if err := card.PlayInto(stopPath); err != nil {
				t.Fatal(err)
			}
			// The whole phrase and half a second after it reach the server (the barge-in's
			// force_listen is on a chunk before its end), and the speaker's recording runs on
			// for 1.5 s of the stream after that chunk arrived: the silence to find.
			end := l.played(t)
			up := l.waitUp(t, end+l.shift+e2eRate/2, 2*time.Minute)
			for _, a := range up.Appends {
				if a.ForceListen {
					if err := l.spk.WaitLen(max(position(l.spk, a.At), l.spk.Len())+recordRate*3/2, time.Minute); err != nil {
						t.Fatal(err)
					}
					break
				}
			}
		})
		echoAt := sc.echoAt
		userAt, c := find(stop16, sc.heard, echoAt+50*e2eRate, 30*e2eRate)
		if c < 0.5 || userAt < echoAt+50*e2eRate {
			t.Fatalf("scene not as planned: echo at %.2f s, user at %.2f s (ncc %.2f)",
				float64(echoAt)/e2eRate, float64(userAt)/e2eRate, c)
		}
		userOn := userAt + onset(stop16)
		heardUp := func(i, j int) ([]float32, []float32) { return sc.heard[i:j], sc.up[i+sc.shift : j+sc.shift] }

		// ERLE per half second from the start of the echo, then over all of it after 2 s.
		const half = e2eRate / 2
		converged := -1
		var line []float64
		for i := echoAt; i+half <= userOn; i += half {
			h, u := heardUp(i, i+half)
			if signaltest.LevelDB(h) < -50 { // a pause in the story: nothing to cancel
				continue
			}
			erle := signaltest.LevelDB(h) - signaltest.LevelDB(u)
			if len(line) < 8 {
				line = append(line, math.Round(erle*10)/10)
			}
			if erle >= 20 && converged < 0 {
				converged = i - echoAt
			}
		}
		var windows []float64 // ERLE per 5 s after learning: where it degrades, if it does
		for i := echoAt + 2*e2eRate; i+5*e2eRate <= userOn; i += 5 * e2eRate {
			h, u := heardUp(i, i+5*e2eRate)
			windows = append(windows, math.Round((signaltest.LevelDB(h)-signaltest.LevelDB(u))*10)/10)
		}
		t.Logf("ERLE per 5 s from 2 s on: %v dB", windows)
		// What a dip in ERLE or a false barge-in comes with, when the machine is busy: where each
		// 5 s moved against the one before (a jump: the speaker underran, or the testbed's echo
		// path changed its delay), audio lost on the way to the server (the user's phrase not
		// where the request puts it), the agent's playback underruns, the server waiting.
		spk16, err := devices.Resample(sc.spk, recordRate, e2eRate)
		if err != nil {
			t.Fatal(err)
		}
		reply16, err := devices.Resample(reply, 24000, e2eRate)
		if err != nil {
			t.Fatal(err)
		}
		spkAt, _ := signaltest.Align(reply16[:10*e2eRate], spk16)
		n := (userOn - echoAt) / (5 * e2eRate)
		underruns := int64(-1)
		if sc.status.PlaybackUnderruns != nil {
			underruns = *sc.status.PlaybackUnderruns
		}
		var late time.Duration // the longest wait between two chunks at the server
		for i := 1; i < len(sc.session.Appends); i++ {
			late = max(late, sc.session.Appends[i].At.Sub(sc.session.Appends[i-1].At))
		}
		upUserAt, _ := find(stop16, sc.up, userAt+sc.shift-e2eRate, len(stop16)+2*e2eRate)
		t.Logf("drift per 5 s, ms: speaker against the reply %v; echo at the microphone against the speaker %v; "+
			"the user's phrase at the server %+.1f ms from where the request puts it; playback underruns %d; "+
			"longest wait between chunks at the server %v",
			track(reply16, spk16, 0, spkAt, n), track(spk16, sc.heard, spkAt, echoAt, n),
			float64(upUserAt-userAt-sc.shift)/e2eRate*1000, underruns, late.Round(time.Millisecond))
		h, u := heardUp(echoAt+2*e2eRate, userOn-e2eRate/10)
		erle := signaltest.LevelDB(h) - signaltest.LevelDB(u)
		t.Logf("echo at the microphone %.1f dBFS; sent to the server after 2 s %.1f dBFS: ERLE %.1f dB over %.1f s; "+
			"per half second from the start: %v dB; ≥ 20 dB after %.1f s",
			signaltest.LevelDB(h), signaltest.LevelDB(u), erle, float64(len(h))/e2eRate, line, float64(converged)/e2eRate)
		if erle < 20 {
			t.Errorf("ERLE %.1f dB, want ≥ 20", erle)
		}
		if converged < 0 || converged > 2*e2eRate {
			t.Errorf("ERLE reached 20 dB after %.1f s, want ≤ 2 s", float64(converged)/e2eRate)
		}

		// Barge-in: none on the echo alone; then one, soon after the user starts.
		pos, flEnd := 0, -1
		var flAt time.Time
		var around []int // the sizes of the chunks up to the force_listen one
		for _, a := range sc.session.Appends {
			pos += a.Samples
			if flEnd < 0 {
				around = append(around[max(0, len(around)-2):], a.Samples)
			}
			if a.ForceListen && flEnd < 0 {
				flEnd, flAt = pos, a.At
			}
		}
		t.Logf("chunks up to the force_listen one: %v samples, ending %d samples after the onset", around, flEnd-(userOn+sc.shift))
		userOnUp := userOn + sc.shift
		switch {
		case flEnd < 0:
			t.Fatal("no barge-in: no force_listen reached the server")
		case flEnd < userOnUp:
			t.Fatalf("barge-in on echo alone: force_listen at %.2f s of the upstream audio, the user spoke at %.2f s",
				float64(flEnd)/e2eRate, float64(userOnUp)/e2eRate)
		}
		var levels []float64 // what the barge-in detector had to go on: 20 ms levels upstream from the onset
		for i := userOnUp; i+e2eRate/50 <= min(len(sc.up), userOnUp+e2eRate/2); i += e2eRate / 50 {
			levels = append(levels, math.Round(signaltest.LevelDB(sc.up[i:i+e2eRate/50])))
		}
		t.Logf("upstream level per 20 ms from the user's onset: %v dBFS", levels)
		bargeIn := time.Duration(float64(flEnd-userOnUp) / e2eRate * float64(time.Second))
		// The speaker: silent from when, against the force_listen chunk's arrival.
		from := int(flAt.Add(-time.Second).Sub(sc.spkT0).Seconds() * recordRate)
		quiet := signaltest.SilentFrom(sc.spk, max(from, 0), recordRate/100, recordRate/2, 0.003)
		if quiet < 0 {
			t.Fatal("the speaker never fell silent after the barge-in")
		}
		silentAfter := sc.spkT0.Add(time.Duration(float64(quiet) / recordRate * float64(time.Second))).Sub(flAt)
		// Double talk: the user's words over the model's speech, as the server got them.
		dtEnd := min(flEnd, userAt+len(stop16)+sc.shift)
		dtNCC := signaltest.NCC(stop16[onset(stop16):], sc.up[userOnUp:dtEnd], 0)
		_, wholeNCC := signaltest.Align(stop16, sc.up[userAt+sc.shift-e2eRate/4:min(len(sc.up), userAt+sc.shift+len(stop16)+e2eRate/4)])
		t.Logf("no barge-in over %.1f s of model speech with echo; user onset → force_listen %v (chunk end, sample positions); "+
			"speaker silent %v after the force_listen chunk arrived; double talk ncc %.3f over %.2f s, whole phrase ncc %.3f",
			float64(userOn-echoAt)/e2eRate, bargeIn.Round(time.Millisecond), silentAfter.Round(time.Millisecond),
			dtNCC, float64(dtEnd-userOnUp)/e2eRate, wholeNCC)
		if bargeIn > 300*time.Millisecond {
			t.Errorf("barge-in %v after the user's onset, want ≤ 300 ms", bargeIn)
		}
		if silentAfter > 100*time.Millisecond {
			t.Errorf("speaker silent %v after force_listen, want ≤ 100 ms", silentAfter)
		}
		if dtNCC < 0.7 {
			t.Errorf("double talk ncc %.3f, want ≥ 0.7", dtNCC)
		}
	})

	t.Run("mute", func(t *testing.T) {
		reply := slices.Concat(story[:min(len(story), 6*24000)])
		sc := run(t, "  echo_cancel: mute\n", reply, func(l *liveEcho) {
			// All of the model's speech reaches the microphone (a second of quiet after it),
			// and what the microphone heard until its end reaches the server.
			l.waitEcho(t, story16)
			end := l.waitEchoEnd(t, len(reply)*e2eRate/24000)
			l.waitUp(t, end+l.shift+e2eRate/2, 2*time.Minute)
		})
		echoAt, end := sc.echoAt, sc.echoEnd
		leaked, loudest := 0, float32(0)
		for _, v := range sc.up[echoAt+sc.shift : min(len(sc.up), end+sc.shift)] {
			if v != 0 {
				leaked++
				loudest = max(loudest, v, -v)
			}
		}
		t.Logf("mute: echo at the microphone %.1f dBFS over %.1f s; %d non-zero samples reached the server (peak %.5f)",
			signaltest.LevelDB(sc.heard[echoAt:end]), float64(end-echoAt)/e2eRate, leaked, loudest)
		if leaked > 0 {
			t.Errorf("%d samples of the echo reached the server in mute mode", leaked)
		}
	})
}
