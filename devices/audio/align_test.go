package audio

import (
	"context"
	"math"
	"math/rand/v2"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/omnisat/omnisat/internal/signaltest"
	"github.com/omnisat/omnisat/pipeline"
	"github.com/omnisat/omnisat/pipeline/aec"
)

// echoRig plays both ends of an echo path into a cleaner the way the two pumps and the
// microphone's reader do, with no devices and no clock: the speaker's buffers are recorded into
// the reference with their converter times, the microphone hears what came out of the speaker
// through a room, and each microphone buffer is cleaned as the reader would clean it. What the
// devices really did (physical time, in samples) and what their timestamps say are set apart,
// so that a late callback, a late pump, an underrun or a real move of the echo can be played
// exactly, the same way every run.
type echoRig struct {
	rate               int
	spkBlock, micBlock int
	// micLead: capture sample k is taken at physical time k+micLead; outLead: a speaker buffer
	// is handed over (and recorded) outLead before it reaches the converter.
	micLead, outLead int64
	room             []float64
	near             []float32 // the user, by capture index (nil: silent)

	played []float32 // what the speaker played, by its sample index (underruns are silence in it)
	// move: from speaker index moveAt on, what it plays reaches the converter move samples
	// later than before (silence nobody counted, as a sound server's own underrun inserts);
	// xrun says the host reported it.
	moveAt, move int64
	xrun         bool
	// hidden: the timestamps do not show the move; the room's own delay changed (a sound
	// server between the device and the speaker raised its latency, or the speaker moved).
	hidden bool
	// What the timestamps say beyond the truth, in seconds: for the speaker's buffer starting
	// at index j and the microphone's starting at capture index k.
	spkErr func(j int64) float64
	micErr func(k int64) float64
	// The speaker's pump is late: buffers due between physical times lateFrom and lateTo reach
	// the reference only at lateTo.
	lateFrom, lateTo int64
	// viaMic, when set, cleans through that microphone's reader (resampled to OutputRate
	// first, as it does when the capture rate is higher) instead of the cleaner alone.
	viaMic *Microphone
	// The speaker rests (SpeakerConfig.RestAfter) over its indices [restFrom, restTo): no
	// buffer is played or recorded there, and the one at restTo opens the stream again
	// (timelineResumed). played holds silence there.
	restFrom, restTo int64
}

const rigT0 = 1000.0 // seconds on the stream clock at physical time 0

// spkShift is how much later than its index says speaker sample j reaches the converter.
func (g *echoRig) spkShift(j int64) int64 {
	if g.move != 0 && j >= g.moveAt {
		return g.move
	}
	return 0
}

// heard is what the microphone takes: the speaker's sound through the room, plus the user.
func (g *echoRig) heard(n int) []float32 {
	phys := make([]float32, n+int(g.micLead)+int(max(g.move, 0))+1)
	for j, v := range g.played {
		if p := int64(j) + g.spkShift(int64(j)); p >= 0 && p < int64(len(phys)) {
			phys[p] = v
		}
	}
	echo := signaltest.Convolve(phys, g.room)
	mic := make([]float32, n)
	for k := range mic {
		mic[k] = echo[int64(k)+g.micLead]
		if k < len(g.near) {
			mic[k] += g.near[k]
		}
	}
	return mic
}

// run feeds the cleaner n capture samples' worth of both streams in the order the pumps would
// and returns what it made of the microphone, by capture index, and the cleaner's counters
// when the output first reached mark samples.
func (g *echoRig) run(t testing.TB, c *cleaner, ref *EchoReference, n, mark int) (mic, out []float32, atMark CleanStats) {
	t.Helper()
	mic = g.heard(n)
	ref.attach(g.rate)
	type event struct {
		at    int64 // physical time
		spk   bool
		index int64
	}
	var events []event
	for j := int64(0); j < int64(len(g.played)); j += int64(g.spkBlock) {
		at := j + g.spkShift(j) - g.outLead
		if at >= g.lateFrom && at < g.lateTo {
			at = g.lateTo
		}
		events = append(events, event{at, true, j})
	}
	for k := int64(0); k+int64(g.micBlock) <= int64(n); k += int64(g.micBlock) {
		events = append(events, event{k + int64(g.micBlock) + g.micLead, false, k})
	}
	slices.SortStableFunc(events, func(a, b event) int { return int(a.at - b.at) })
	ring := newRing(g.rate, 1, Mixdown, 1)
	if g.viaMic != nil {
		ring = g.viaMic.ring // its reader takes what it holds, up to a pass, a piece at a time
	}
	out = make([]float32, 0, n)
	restarted, rested := false, false
	for _, e := range events {
		if e.spk && e.index >= g.restFrom && e.index < g.restTo {
			if !rested {
				ref.stop() // the speaker at rest: the microphone need not wait for it
				rested = true
			}
			continue
		}
		if e.spk {
			end := min(e.index+int64(g.spkBlock), int64(len(g.played)))
			at := rigT0 + float64(e.index+g.spkShift(e.index))/float64(g.rate)
			if g.hidden {
				at = rigT0 + float64(e.index)/float64(g.rate)
			}
			if g.spkErr != nil {
				at += g.spkErr(e.index)
			}
			ev := timelineGoesOn
			switch {
			case e.index == 0:
				ev = timelineNew
			case g.xrun && !restarted && e.index >= g.moveAt:
				ev, restarted = timelineXrun, true
			case rested && e.index == g.restTo:
				ev = timelineResumed
			}
			ref.play(g.played[e.index:end], at, 0, ev)
		} else {
			at := rigT0 + float64(e.index+g.micLead)/float64(g.rate)
			if g.micErr != nil {
				at += g.micErr(e.index)
			}
			ev := timelineGoesOn
			if e.index == 0 {
				ev = timelineNew
			}
			ring.mark(at, g.rate, ev)
			ring.write(mic[e.index : e.index+int64(g.micBlock)])
		}
		// The reader: everything the ring holds, then anything waiting for the reference.
		if g.viaMic != nil {
			ready, _ := g.viaMic.resampleThenClean()
			out = append(out, ready...)
		} else {
			buf := make([]float32, g.rate)
			got, start, timing := ring.readFrom(buf)
			out = c.process(out, buf[:got], start, timing)
		}
		if len(out) < mark {
			atMark = c.counters()
		}
	}
	return mic, out, atMark
}

// newRigCleaner is the microphone's cleaner for the rig: echo handling mode, noise suppression on.
func newRigCleaner(t testing.TB, mode EchoMode, rate int) (*cleaner, *EchoReference) {
	t.Helper()
	ref := NewEchoReference()
	c, err := newCleaner(CleanConfig{Echo: mode, Reference: ref, MuteHangover: 300 * time.Millisecond,
		Processor: aec.Config{Denoise: true}}, rate, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.close)
	return c, ref
}

// defaultRig is 40 s of the model speaking at 16 kHz into a small room (5 ms, -6 dB), the
// speaker's pump handing over 12.5 ms buffers and the microphone delivering 20 ms ones.
func defaultRig() *echoRig {
	const rate = 16000
	return &echoRig{rate: rate, spkBlock: 200, micBlock: 320, micLead: 800, outLead: 640,
		room: signaltest.Room(rate, 5*time.Millisecond, 0.5, 11), played: signaltest.SpeechLike(rate, 41*time.Second, 11)}
}

// echoVerdict is what came out while only the model spoke.
type echoVerdict struct {
	erle     float64   // over the span, dB
	halves   []float64 // per half second, dB (NaN: nothing to cancel)
	bargeIns int       // times the agent's barge-in detector, at its defaults, would have fired
}

func judgeEcho(mic, out []float32, from, to, rate int) echoVerdict {
	to = min(to, len(out))
	v := echoVerdict{erle: signaltest.LevelDB(mic[from:to]) - signaltest.LevelDB(out[from:to])}
	for i := from; i+rate/2 <= to; i += rate / 2 {
		if signaltest.LevelDB(mic[i:i+rate/2]) < -50 {
			v.halves = append(v.halves, math.NaN())
			continue
		}
		v.halves = append(v.halves, math.Round((signaltest.LevelDB(mic[i:i+rate/2])-signaltest.LevelDB(out[i:i+rate/2]))*10)/10)
	}
	// The agent's barge-in detector as it is set up by default (agent/bus.go): -35 dBFS for
	// 150 ms, with up to 60 ms of closure inside.
	vad := pipeline.NewEnergyVAD(rate, -35, 150, 300)
	vad.SetAttackGap(3)
	for i := from; i+rate/50 <= to; i += rate / 50 {
		if speaking, changed := vad.Process(out[i : i+rate/50]); speaking && changed {
			v.bargeIns++
		}
	}
	return v
}

// mutedAfter is the share of the 10 ms frames after the mark that were muted.
func mutedAfter(end, mark CleanStats) float64 {
	return float64(end.MutedFrames-mark.MutedFrames) / float64(max(end.Frames-mark.Frames, 1))
}

// micRig is a rig at rate (the speaker's 12.5 ms buffers, the microphone's 50 ms ones) that
// cleans through a microphone's reader, with the echo canceller and the denoiser, what a room
// (seeded by seed) makes of played.
func micRig(t *testing.T, rate int, played []float32, seed uint64) (*echoRig, *Microphone, *EchoReference) {
	t.Helper()
	g := &echoRig{rate: rate, spkBlock: rate / 80, micBlock: rate / 20, micLead: int64(rate / 20), outLead: int64(rate / 25),
		room: signaltest.Room(rate, 5*time.Millisecond, 0.5, seed), played: played}
	m := newTestMic(t, rate, 1, Mixdown, 0)
	ref := NewEchoReference()
	m.cfg.Clean = CleanConfig{Echo: EchoAEC, Reference: ref, Processor: aec.Config{Denoise: true}}
	if err := m.initReader(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(m.clean.close)
	g.viaMic = m
	return g, m, ref
}

// TestMicrophoneCleansAtTheOutputRate: a 48 kHz capture is resampled to 16 kHz before the
// echo canceller (a third of its work at 48 kHz), and the reference and the timing follow it
// there: the echo of a 48 kHz speaker through a room is cancelled as well as at one rate,
// with the echo placed by the converted timestamps alone.
func TestMicrophoneCleansAtTheOutputRate(t *testing.T) {
	const rate = 48000
	g, m, ref := micRig(t, rate, signaltest.SpeechLike(rate, 11*time.Second, 11), 11)
	if !m.cleanAfter || m.clean.micRate != OutputRate || m.clean.proc.Rate() != OutputRate {
		t.Fatalf("a %d Hz capture is cleaned at %d Hz, want %d", rate, m.clean.micRate, OutputRate)
	}
	mic48, out, _ := g.run(t, m.clean, ref, 10*rate, 0)
	if len(out) < 9*OutputRate {
		t.Fatalf("10 s captured, %.2f s cleaned: the rest waits for a reference placed elsewhere", float64(len(out))/OutputRate)
	}
	rs, _ := pipeline.NewResampler(rate, OutputRate)
	mic := rs.Process(nil, mic48)
	v := judgeEcho(mic, out, 4*OutputRate, 10*OutputRate, OutputRate)
	st := m.clean.counters()
	t.Logf("ERLE %.1f dB; per half second %v; %d barge-ins; %+v", v.erle, v.halves, v.bargeIns, st)
	if v.erle < 25 || v.bargeIns > 0 || st.Slips != 1 || st.Unknown > 0 {
		t.Errorf("ERLE %.1f dB, %d barge-ins, %d alignments, %d unknown frames: want ≥ 25 dB, none, 1, none",
			v.erle, v.bargeIns, st.Slips, st.Unknown)
	}
}

// TestEchoDriftReadOnTheCancellersThread: the drift follower's look at the echo path, twice a
// second while the canceller runs, is read by the canceller's thread as a block ends: Go never
// calls into speexdsp for it (each such call woke the runtime's monitor thread out of its
// sleep, a few wake-ups a look).
func TestEchoDriftReadOnTheCancellersThread(t *testing.T) {
	const rate = 48000
	g, m, ref := micRig(t, rate, signaltest.SpeechLike(rate, 7*time.Second, 17), 17)
	g.run(t, m.clean, ref, 6*rate, 0)
	c := m.clean
	if !c.drift.have {
		t.Fatal("the drift follower never looked at the echo path")
	}
	if n := c.proc.EchoDelayCalls(); n != 0 {
		t.Errorf("%d of the drift follower's looks called into speexdsp from Go", n)
	}
}

// TestEchoAfterTheSpeakerRested: a 48 kHz speaker that talks in bursts with long silences
// between them, cleaned through the microphone's reader at 16 kHz. While the speaker is silent
// its record goes to the microphone's rate without products and the canceller rests; each
// burst after a silence is still cancelled, with no barge-in and no frame left unknown.
func TestEchoAfterTheSpeakerRested(t *testing.T) {
	const rate, burst, silence = 48000, 3, 4 // seconds
	speech := signaltest.SpeechLike(rate, 3*burst*time.Second, 13)
	played := make([]float32, 0, 3*(burst+silence)*rate)
	for i := range 3 {
		played = append(played, speech[i*burst*rate:(i+1)*burst*rate]...)
		played = append(played, make([]float32, silence*rate)...)
	}
	g, m, ref := micRig(t, rate, played, 13)
	n := len(played) - rate
	mic48, out, _ := g.run(t, m.clean, ref, n, 0)
	rs, _ := pipeline.NewResampler(rate, OutputRate)
	mic := rs.Process(nil, mic48)
	st := m.clean.counters()
	// Each silence rests the canceller from about 2.2 s in: some 180 frames of each.
	if st.Rested < 2*150 || st.Unknown > 0 || st.Slips != 1 {
		t.Errorf("%+v: want the canceller resting for 300 frames or more, no unknown frame, one alignment", st)
	}
	for i := 1; i < 3; i++ { // the bursts after a silence, from their second second
		from, to := (i*(burst+silence)+1)*OutputRate, (i*(burst+silence)+burst)*OutputRate
		v := judgeEcho(mic, out, from, to, OutputRate)
		t.Logf("burst %d: ERLE %.1f dB; per half second %v; %d barge-ins", i+1, v.erle, v.halves, v.bargeIns)
		if v.erle < 25 || v.bargeIns > 0 {
			t.Errorf("burst %d after %d s of silence: ERLE %.1f dB, %d barge-ins; want ≥ 25 dB, none", i+1, silence, v.erle, v.bargeIns)
		}
	}
	// The silences themselves: the microphone hears only the room's tail, and nothing gets through loud.
	for i := range 2 {
		from, to := (i*(burst+silence)+burst+1)*OutputRate, ((i+1)*(burst+silence))*OutputRate
		if lvl := signaltest.LevelDB(out[from:to]); lvl > -60 {
			t.Errorf("silence %d: %.1f dBFS came out of a silent room", i+1, lvl)
		}
	}
	t.Logf("%+v", st)
}

// TestEchoAcrossARest: the speaker rests between two bursts of the model's speech, its stream
// closed, and opens again on the same timeline (timelineResumed), carried over by timestamps
// that are exact here (as a plain ALSA card's should be). The canceller verifies, protected,
// that it still cancels, and finds that it does as soon as it can tell (half a second of the
// model's speech, and the hang-over): no re-alignment, no barge-in, and what it learnt kept. (A stream opened on a new
// timeline instead is aligned and learnt afresh: two alignments, 26 % of the frames after the
// rest muted and 34.5 dB over the burst, against 14 % and 83 dB here.)
func TestEchoAcrossARest(t *testing.T) {
	g := defaultRig()
	rate := g.rate
	speech := signaltest.SpeechLike(rate, 16*time.Second, 17)
	g.played = slices.Concat(speech[:8*rate], make([]float32, 5*rate), speech[8*rate:])
	g.restFrom, g.restTo = int64(9*rate), int64(13*rate)
	c, ref := newRigCleaner(t, EchoAEC, rate)
	second := 13 * rate
	n := len(g.played) - rate
	mic, out, atMark := g.run(t, c, ref, n, second)
	end := c.counters()
	v := judgeEcho(mic, out, second, second+2*rate, rate)
	all := judgeEcho(mic, out, second, n, rate)
	t.Logf("after the rest: ERLE %.1f dB over its first 2 s, per half second %v, %d barge-ins; %.1f dB over the burst; %.1f%% of its frames muted; %+v",
		v.erle, v.halves, v.bargeIns, all.erle, 100*mutedAfter(end, atMark), end)
	if v.erle < 25 || all.bargeIns > 0 {
		t.Errorf("the burst after the rest: ERLE %.1f dB over its first 2 s, %d barge-ins; want ≥ 25 dB, none", v.erle, all.bargeIns)
	}
	if end.Slips != 1 {
		t.Errorf("%d alignments, want 1: the rest carried the timeline over", end.Slips)
	}
	if m := mutedAfter(end, atMark); m > 0.2 || all.erle < 40 {
		t.Errorf("%.1f%% of the frames after the rest muted, %.1f dB over the burst; want at most 20%%, at least 40 dB: the canceller learnt again",
			100*m, all.erle)
	}
}

// TestMicrophoneCleanAfterAGap: when the reader falls a ring behind, the capture jumps; the
// resampled stream ends there and a new one starts where the jump lands, so the cleaner's
// sample indexes stay the capture's (at the output rate) and no sample is made up or lost.
func TestMicrophoneCleanAfterAGap(t *testing.T) {
	const rate = 48000
	m := newTestMic(t, rate, 1, Mixdown, 0)
	m.cfg.Clean = CleanConfig{Processor: aec.Config{Denoise: true}}
	if err := m.initReader(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(m.clean.close)
	block := make([]float32, 4800)
	total := 0
	write := func(blocks int) {
		for range blocks {
			m.ring.append(block)
		}
	}
	read := func() {
		for {
			ready, got := m.resampleThenClean()
			total += len(ready)
			if got == 0 {
				return
			}
		}
	}
	write(10)
	// A second the ring holds is one pass: one call into the canceller for a patient block.
	ready, got := m.resampleThenClean()
	if total += len(ready); got != 10*4800 {
		t.Errorf("a pass took %d of the %d frames the ring held, want all", got, 10*4800)
	}
	read()
	// The reader falls behind: of the next 48 blocks the ring keeps what it holds, the rest
	// are dropped.
	write(48)
	kept := len(m.ring.buf)
	read()
	if want := int64(math.Round(float64(58*4800-kept) * float64(OutputRate) / rate)); m.outFrom != want {
		t.Errorf("after the gap the resampled stream starts at %d, want %d", m.outFrom, want)
	}
	// The first stream was flushed whole (1 s in, 16000 out); the second holds back the
	// resampler's delay and the cleaner's partial frame.
	wantOut := 16000 + kept*OutputRate/rate
	if delay := int(m.rs.Delay().Seconds()*OutputRate) + m.clean.frame; total > wantOut || total < wantOut-delay-1 {
		t.Errorf("%d samples out for %d in, want %d less at most %d held back", total, 48000+kept, wantOut, delay)
	}
	if end := m.clean.accStart + int64(len(m.clean.acc)); end != m.outFrom+m.outGiven {
		t.Errorf("the cleaner ends at %d, the resampled stream at %d", end, m.outFrom+m.outGiven)
	}
}

// TestEchoAlignmentIgnoresDisturbedTimestamps: under load a late callback shifts the speaker's
// timestamps (and every one after it) by its lateness while not one sample moved, and the
// microphone's jitter with one-sided outliers. The echo stays where the canceller learnt it:
// no re-alignment, no drop in ERLE, nothing the barge-in detector could take for the user.
func TestEchoAlignmentIgnoresDisturbedTimestamps(t *testing.T) {
	g := defaultRig()
	g.spkErr = func(j int64) float64 {
		switch {
		case j >= 30*16000:
			return 0.0209 - 0.015
		case j >= 12*16000:
			return 0.0209
		}
		return 0
	}
	g.micErr = func(k int64) float64 {
		if (k/320)%7 == 3 {
			return 0.004 // a late one now and then, always late
		}
		return 0
	}
	c, ref := newRigCleaner(t, EchoAEC, g.rate)
	mic, out, mark := g.run(t, c, ref, 40*g.rate, 5*g.rate)
	v := judgeEcho(mic, out, 5*g.rate, 40*g.rate, g.rate)
	st := c.counters()
	muted := mutedAfter(st, mark)
	t.Logf("ERLE %.1f dB; per half second %v; %d barge-ins; muted %.1f%%; %+v",
		v.erle, v.halves, v.bargeIns, 100*muted, st)
	if st.Slips != 1 {
		t.Errorf("%d alignments, want 1: the timestamps moved, the echo did not", st.Slips)
	}
	if st.Kept == 0 {
		t.Error("the timestamps' moves were not judged")
	}
	if v.erle < 25 {
		t.Errorf("ERLE %.1f dB after learning, want ≥ 25", v.erle)
	}
	if v.bargeIns > 0 {
		t.Errorf("%d barge-ins on echo alone", v.bargeIns)
	}
	if muted > 0.05 {
		t.Errorf("%.1f%% of the frames muted after learning, want ≤ 5%%: the user would be cut off", 100*muted)
	}
}

// TestEchoDisputeLetsTheUserThrough: the timestamps jump (a late callback) just as the user
// starts talking over the model. The user's voice must not be taken for an echo that moved:
// the alignment is kept, and the user reaches the output (the barge-in detector) while the
// dispute is judged, not after it.
func TestEchoDisputeLetsTheUserThrough(t *testing.T) {
	g := defaultRig()
	g.spkErr = func(j int64) float64 {
		if j >= 12*16000 {
			return 0.0209
		}
		return 0
	}
	userOverEcho(t, g, 12*16000, 1, 1)
}

// TestEchoRelearningLetsTheUserThrough: the echo really moves and the canceller learns again;
// the user starts talking half a second later, while it still learns. They reach the output
// from their first syllables, not once learning is over.
func TestEchoRelearningLetsTheUserThrough(t *testing.T) {
	g := defaultRig()
	g.moveAt, g.move = 12*16000, 320
	userOverEcho(t, g, 12*16000+8000, 1, 2)
}

// userOverEcho plays 3 s of the user at gain from capture index from in the rig and wants it
// in the output, and slips alignments.
func userOverEcho(t *testing.T, g *echoRig, from int, gain float32, slips int64) {
	t.Helper()
	to := from + 3*16000
	user := signaltest.SpeechLike(g.rate, 3*time.Second, 29)
	for i := range user {
		user[i] *= gain
	}
	g.near = make([]float32, to)
	copy(g.near[from:], user)
	c, ref := newRigCleaner(t, EchoAEC, g.rate)
	_, out, _ := g.run(t, c, ref, 40*g.rate, 0)
	st := c.counters()
	// The output comes a frame or so after the capture (the noise suppressor's window).
	lag, _ := signaltest.Align(user[:g.rate], out[from-g.rate/10:to])
	lag -= g.rate / 10
	passed := signaltest.NCC(user, out[from:to], lag)
	// The first 300 ms: what the barge-in detector has to go on.
	onset := signaltest.NCC(user[:g.rate*3/10], out[from:from+g.rate*3/10+lag], lag)
	t.Logf("user's speech in the output (%d samples later): ncc %.2f (first 300 ms %.2f); %+v", lag, passed, onset, st)
	if st.Slips != slips {
		t.Errorf("%d alignments, want %d", st.Slips, slips)
	}
	if passed < 0.8 || onset < 0.8 {
		t.Errorf("the user's speech came through with ncc %.2f (first 300 ms %.2f), want ≥ 0.8", passed, onset)
	}
}

// TestEchoFollowsAMove: the speaker's sound really moves against its sample count (a sound
// server inserted silence nobody counted; with xrun, the host said so), 20 ms later or 20 ms
// earlier, and the timestamps show it. The reference is re-aligned, the canceller learns the
// new echo path, and meanwhile the echo never reaches the barge-in detector. Unseen: the echo
// moves 20 or 60 ms later while both streams' timestamps and sample counts go on as before,
// the room's own delay having changed (a sound server in the echo path raising its latency
// after underruns, as the virtual card's loopback does on a busy machine). Only the canceller
// can tell: it is doubted, protected while it adjusts, and cancels again, nothing re-aligned.
func TestEchoFollowsAMove(t *testing.T) {
	for _, tc := range []struct {
		name         string
		move         int64
		xrun, hidden bool
	}{
		{"later", 320, false, false}, {"earlier", -320, false, false}, {"later, host xrun", 320, true, false},
		{"20 ms later, unseen", 320, false, true}, {"60 ms later, unseen", 960, false, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := defaultRig()
			g.moveAt, g.move, g.xrun, g.hidden = 15*16000, tc.move, tc.xrun, tc.hidden
			c, ref := newRigCleaner(t, EchoAEC, g.rate)
			mic, out, mark := g.run(t, c, ref, 40*g.rate, 5*g.rate)
			v := judgeEcho(mic, out, 5*g.rate, 40*g.rate, g.rate)
			after := judgeEcho(mic, out, 20*g.rate, 40*g.rate, g.rate)
			st := c.counters()
			muted := mutedAfter(st, mark)
			t.Logf("ERLE %.1f dB, %.1f dB from 5 s after the move; per half second %v; %d barge-ins; muted %.1f%%; %+v",
				v.erle, after.erle, v.halves, v.bargeIns, 100*muted, st)
			switch {
			case tc.hidden && (st.Slips != 1 || st.Doubts != 1):
				t.Errorf("%d alignments, %d doubts; want 1 and 1: the start, and the canceller's own finding", st.Slips, st.Doubts)
			case !tc.hidden && st.Slips != 2:
				t.Errorf("%d alignments, want 2: the start and the move", st.Slips)
			}
			if v.bargeIns > 0 {
				t.Errorf("%d barge-ins on echo alone", v.bargeIns)
			}
			if after.erle < 25 {
				t.Errorf("ERLE %.1f dB from 5 s after the move, want ≥ 25", after.erle)
			}
			// Re-learning mutes only while the model talks, and only until the canceller cancels:
			// at most learnTime (2 s) of its speech, about 4 s of these 35.
			if muted > 0.12 {
				t.Errorf("%.1f%% of the frames muted after learning, want ≤ 12%%", 100*muted)
			}
		})
	}
}

// TestEchoThatCannotBeCancelled: the echo moves 40 ms earlier than the reference can reach
// (the canceller's filter is causal) and the timestamps do not show it. The canceller cannot
// cancel it again; the microphone stays protected while the speaker plays, and the canceller
// is started afresh at growing intervals, not every few frames.
func TestEchoThatCannotBeCancelled(t *testing.T) {
	g := defaultRig()
	g.moveAt, g.move, g.hidden = 10*16000, -640, true
	c, ref := newRigCleaner(t, EchoAEC, g.rate)
	mic, out, _ := g.run(t, c, ref, 40*g.rate, 0)
	v := judgeEcho(mic, out, 5*g.rate, 40*g.rate, g.rate)
	st := c.counters()
	t.Logf("ERLE %.1f dB; %d barge-ins; %+v", v.erle, v.bargeIns, st)
	if v.bargeIns > 0 {
		t.Errorf("%d barge-ins on echo alone", v.bargeIns)
	}
	// 30 s after the move, about 24 s of it speech: afresh after 4, then 8 more, then 16 more.
	if st.Doubts != 1 || st.Slips < 2 || st.Slips > 4 {
		t.Errorf("%d doubts, %d alignments: want 1 doubt, and 2 to 4 alignments (the start, then backing off)", st.Doubts, st.Slips)
	}
}

// TestEchoNotHeard: the microphone does not hear the speaker at all (headphones). There is no
// echo to cancel, so no evidence that the canceller cancels: it is trusted after learnTime all
// the same (nothing comes through), and the user talking while the model speaks gets through.
func TestEchoNotHeard(t *testing.T) {
	g := defaultRig()
	g.room = []float64{0}
	const from, to = 12 * 16000, 15 * 16000
	user := signaltest.SpeechLike(g.rate, 3*time.Second, 29)
	for i := range user {
		user[i] *= 0.1 // -20 dB: a user well under the model's level
	}
	g.near = make([]float32, to)
	copy(g.near[from:], user)
	c, ref := newRigCleaner(t, EchoAEC, g.rate)
	_, out, mark := g.run(t, c, ref, 20*g.rate, 5*g.rate)
	st := c.counters()
	muted := mutedAfter(st, mark)
	lag, _ := signaltest.Align(user[:g.rate], out[from-g.rate/10:to])
	lag -= g.rate / 10
	passed := signaltest.NCC(user, out[from:to], lag)
	t.Logf("user's speech in the output: ncc %.2f; muted %.1f%% after 5 s; %+v", passed, 100*muted, st)
	if muted > 0 || passed < 0.8 || st.Slips != 1 {
		t.Errorf("muted %.1f%%, user ncc %.2f, %d alignments: want nothing muted after learning, ≥ 0.8, 1", 100*muted, passed, st.Slips)
	}
}

// TestEchoWaitsForALateSpeaker: the speaker's pump runs late (a busy machine) and records what
// the device played only later, while the microphone's buffers keep coming. Their frames wait
// for it: none is cleaned against a reference that is not there yet.
func TestEchoWaitsForALateSpeaker(t *testing.T) {
	g := defaultRig()
	g.lateFrom, g.lateTo = 10*16000, 10*16000+4800 // 300 ms late
	c, ref := newRigCleaner(t, EchoAEC, g.rate)
	mic, out, _ := g.run(t, c, ref, 40*g.rate, 0)
	if len(out) != 40*g.rate {
		t.Fatalf("%d samples out of %d", len(out), 40*g.rate)
	}
	v := judgeEcho(mic, out, 3*g.rate, 40*g.rate, g.rate)
	st := c.counters()
	t.Logf("ERLE %.1f dB; per half second %v; %d barge-ins; %+v", v.erle, v.halves, v.bargeIns, st)
	if st.Unknown != 0 || st.Slips != 1 {
		t.Errorf("%d frames without a reference, %d alignments; want 0 and 1", st.Unknown, st.Slips)
	}
	if v.erle < 25 || v.bargeIns > 0 {
		t.Errorf("ERLE %.1f dB, %d barge-ins: want ≥ 25 dB and none", v.erle, v.bargeIns)
	}
}

// TestMuteModeLeaksNothing: half duplex through everything a busy machine does at once —
// underruns (silence in what the speaker played), a late pump, timestamps shifted by a late
// callback, and a real move of the speaker's sound: no sample of the echo gets through.
func TestMuteModeLeaksNothing(t *testing.T) {
	g := defaultRig()
	for _, gap := range [][2]int{{8, 300}, {8, 60}, {17, 20}, {25, 500}} { // at s + ms, for ms
		at := gap[0]*g.rate + gap[1]*g.rate/1000
		clear(g.played[at : at+gap[1]*g.rate/1000])
	}
	g.lateFrom, g.lateTo = 9*16000, 9*16000+3200
	g.spkErr = func(j int64) float64 {
		if j >= 12*16000 {
			return -0.030 // the timestamps say the speaker plays 30 ms sooner
		}
		return 0
	}
	g.moveAt, g.move = 20*16000, 480 // and then it really plays 30 ms later
	c, ref := newRigCleaner(t, EchoMute, g.rate)
	_, out, _ := g.run(t, c, ref, 40*g.rate, 0)
	leaked, loudest := 0, float32(0)
	echo := g.heard(40 * g.rate) // no user: everything heard is echo
	for i, v := range out {
		if echo[i] != 0 && v != 0 {
			leaked++
			loudest = max(loudest, v, -v)
		}
	}
	st := c.counters()
	t.Logf("%d samples of echo passed (peak %.4f); %+v", leaked, loudest, st)
	if leaked > 0 {
		t.Errorf("%d samples of echo passed in mute mode (peak %.4f)", leaked, loudest)
	}
}

// TestMicrophoneWaitsForTheSpeaker: Read holds back the frames whose reference the speaker
// has not recorded yet and goes on when it has (or has stopped: nothing plays); a speaker whose
// record never comes is waited for refPatience, then those frames are muted.
func TestMicrophoneWaitsForTheSpeaker(t *testing.T) {
	const rate = 16000
	for _, how := range []string{"records", "stops", "never"} {
		t.Run(how, func(t *testing.T) {
			ref := NewEchoReference()
			ref.attach(rate)
			var serviced, asked atomic.Int32 // what a speaker gets asked (Speaker.service, wantPlayed)
			ref.setSpeaker(func() { serviced.Add(1) }, func() { asked.Add(1) })
			m := &Microphone{cfg: MicConfig{Channel: Mixdown, Clean: CleanConfig{Echo: EchoAEC, Reference: ref}},
				rate: rate, channels: 1, gain: 1, done: make(chan struct{})}
			m.link = newLink("microphone", "read", "test", nil, nil)
			if err := m.initReader(); err != nil {
				t.Fatal(err)
			}
			defer m.clean.close()
			far := signaltest.SpeechLike(rate, time.Second, 3)
			// The speaker has recorded its first half second; the microphone delivers a whole
			// second taken at the same moments (its echo: far, 6 dB down).
			ref.play(far[:rate/2], rigT0, 0, timelineNew)
			heard := make([]float32, rate)
			for i, v := range far {
				heard[i] = v / 2
			}
			m.ring.mark(rigT0, rate, timelineNew)
			m.ring.write(heard)
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			p := make([]float32, 2*rate)
			n, err := m.Read(ctx, p)
			if err != nil || n == 0 || n > rate/2+rate/10 {
				t.Fatalf("first Read: %d samples, %v; want the half second whose reference is there", n, err)
			}
			got := n
			done := make(chan int)
			go func() {
				n, err := m.Read(ctx, p)
				if err != nil {
					t.Error(err)
				}
				done <- n
			}()
			if how != "never" {
				waitFor(t, "the reader waiting on the reference", func() bool { ref.mu.Lock(); defer ref.mu.Unlock(); return ref.watched })
				if how == "records" {
					ref.playMore(far[rate/2:])
					ref.playMore(make([]float32, rate/10)) // and a little after, for the lead
				} else {
					ref.stop()
				}
			}
			got += <-done
			st := m.Stats().Clean
			t.Logf("%d samples out; %+v", got, st)
			if st.Waits == 0 {
				t.Error("Read did not wait for the speaker")
			}
			if st.Waited <= 0 {
				t.Errorf("Read waited %d times for %v in all", st.Waits, st.Waited)
			}
			// Before waiting, the microphone brings the reference up to date itself and asks the
			// speaker for what it plays next as soon as it has.
			if serviced.Load() == 0 || asked.Load() == 0 {
				t.Errorf("the speaker was serviced %d times and asked %d times for what it plays next", serviced.Load(), asked.Load())
			}
			if want := how == "never"; (st.Unknown > 0) != want {
				t.Errorf("%d frames muted for want of a reference, want some: %v", st.Unknown, want)
			}
			if got < rate*8/10 {
				t.Errorf("%d samples out of a second", got)
			}
		})
	}
}

// waitFor waits until cond holds, or fails the test after a minute, saying what it waited for.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(time.Minute); !cond(); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within a minute", what)
		}
	}
}

// TestReferenceReadIsSampleBySample: read copies the ring in stretches; it gives, sample for
// sample, what the speaker played at each index (zero before the stream, beyond a stopped
// speaker's end and where the ring has moved on, which is also said: refGone).
func TestReferenceReadIsSampleBySample(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for range 20000 {
		size := 1 + rng.IntN(64)
		r := &EchoReference{buf: make([]float32, size), written: int64(rng.IntN(200)), stopped: rng.IntN(2) == 0}
		for j := max(r.written-int64(size), 0); j < r.written; j++ {
			r.buf[j%int64(size)] = float32(j + 1)
		}
		from, n := int64(rng.IntN(300))-80, rng.IntN(150)
		dst := make([]float32, n)
		for i := range dst {
			dst[i] = -1 // read must overwrite every sample
		}
		got := r.read(dst, from)
		want, wantState := make([]float32, n), refReady
		if from+int64(n) > r.written && !r.stopped {
			wantState = refPending
		} else {
			for i := range want {
				switch j := from + int64(i); {
				case j < 0 || j >= r.written:
				case j < r.written-int64(size):
					wantState = refGone
				default:
					want[i] = float32(j + 1)
				}
			}
		}
		if got != wantState {
			t.Fatalf("ring %d, written %d, stopped %v: read(%d samples from %d) says %v, want %v", size, r.written, r.stopped, n, from, got, wantState)
		}
		if got == refPending {
			continue
		}
		for i := range want {
			if dst[i] != want[i] {
				t.Fatalf("ring %d, written %d: read(%d samples from %d)[%d] = %v, want %v", size, r.written, n, from, i, dst[i], want[i])
			}
		}
	}
}
