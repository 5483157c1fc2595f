package agent

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"sync/atomic"
	"time"

	"github.com/omnisat/omnisat/realtime"
)

// modelHeard reports whether a session is live and its reply is still playing.
func (s *Supervisor) modelHeard() bool {
	return s.active.Load() != nil && s.speaker.Pending() > 0
}

// captureLoop reads the microphone, cuts chunks and queues them. It runs whether or not a session
// is live, so audio captured while connecting can be kept. It takes whatever block the source
// delivers (one device period: one wake-up; at most 100 ms, and never past the chunk's end) and
// works through it in 20 ms steps for voice detection, barge-in and frame sampling.
func (s *Supervisor) captureLoop(ctx context.Context) error {
	chunkSamples := s.chunkSamples()
	framesEvery := 0
	if s.server.Mode == realtime.ModeVideo && s.cfg.FramesPerChunk > 0 {
		framesEvery = chunkSamples / s.cfg.FramesPerChunk
	}
	vad := newEnergyVAD(s.cfg.VADThreshold)
	var barge *energyVAD
	wasRising, holdOpen := false, false
	preRoll := max(0, realtime.MinChunkSamples-durationToSamples(s.cfg.BargeIn.MinSpeech))
	if *s.cfg.BargeIn.Enabled {
		barge = newBargeInVAD(s.cfg.BargeIn)
	}
	patientSrc, _ := s.audio.(PatientSource)
	buf := make([]float32, max(readBlock, patientBlock))
	var seq uint64
	cur := s.chunkBufs.get()
	var frames [][]byte
	nextFrameAt := framesEvery
	var curEpoch, curMute uint64
	newChunk := func() {
		cur, frames, nextFrameAt = s.chunkBufs.get(), nil, framesEvery
	}
	queue := func(audio []float32, force bool) {
		seq++
		s.queueChunk(chunk{seq: seq, audio: audio, frames: frames, forceListen: force, epoch: curEpoch, muteEpoch: curMute}, framesEvery)
	}
	for {
		epoch, mute, wasMuted := s.epoch.Load(), s.muteEpoch.Load(), s.muted.Load()
		// Never ask past the chunk's end: a source that waits to fill the buffer then hands the
		// chunk over the moment its last sample is captured.
		want := readBlock
		patient := patientSrc != nil && s.canWait(framesEvery)
		brief := !patient && patientSrc != nil && s.canReadBriefly()
		if patient {
			want = patientBlock
		}
		if room := chunkSamples - len(cur); room > 0 {
			want = min(want, room)
		}
		var n int
		var err error
		hurried := false
		switch {
		case patient:
			n, hurried, err = s.readPatiently(ctx, patientSrc, buf[:want])
		case brief:
			n, err = patientSrc.ReadPatiently(ctx, buf[:want])
		default:
			n, err = s.audio.Read(ctx, buf[:want])
		}
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			if hurried {
				continue // cut short before anything came: the next read takes it as it comes
			}
			if errors.Is(err, io.EOF) {
				return io.EOF
			}
			return fmt.Errorf("read audio: %w", err)
		}
		block := buf[:n]
		s.captured.Add(int64(n))
		// The block may have been captured as long before this read as the source holds audio
		// (a device buffer, a block delivered whole) plus its own length.
		capturedFrom := int64(time.Since(s.born) - s.audioHold - samplesToDuration(n))
		if s.epoch.Load() != epoch || since(s.epochAt.Load(), capturedFrom) {
			// Stopped or started while this block may have been captured: part of it was
			// heard while switched off, so none of it is kept.
			continue
		}
		// Muted at any time while this block may have been captured: it goes as silence.
		if m := s.muteEpoch.Load(); m != mute || wasMuted || s.muted.Load() || since(s.unmutedAt.Load(), capturedFrom) {
			clear(block)
			mute = m
		}
		// Whether the model is being heard, asked once per block (the whole block arrived at
		// once) and again after a barge-in: asking for every 20 ms step cost a lock and a
		// playback catch-up fifty times a second.
		playing := barge != nil && s.modelHeard()
		for len(block) > 0 {
			// Audio from before a stop is never sent; audio from before a mute goes as silence.
			if len(cur) == 0 || epoch != curEpoch {
				if len(cur) > 0 {
					newChunk()
				}
				curEpoch, curMute = epoch, mute
			} else if mute != curMute {
				clear(cur)
				curMute = mute
			}
			// Never step past the chunk boundary: every chunk holds exactly chunkSamples,
			// except one held open while speech may be starting (below).
			step := min(captureStep, len(block))
			if room := chunkSamples - len(cur); room > 0 {
				step = min(step, room)
			}
			got := block[:step]
			block = block[step:]
			if speaking, changed := vad.process(got); changed {
				s.speech.Store(speaking)
				select {
				case s.speechCh <- speaking:
				default:
				}
			}
			if barge != nil {
				// The user talks over the model's speech: stop it (the signal is echo-cancelled
				// upstream, so the model's own voice does not count).
				speaking, changed := barge.process(got)
				rising := barge.v.Rising()
				// Speech may be starting: end the chunk just before it (keeping preRoll of the
				// audio before the onset for the next chunk), so that when the minimum speech
				// confirms it the chunk holding the onset is about as long as a server accepts and
				// carries force_listen at once, instead of after whatever the chunk held before.
				if rising && !wasRising && playing && len(cur) >= realtime.MinChunkSamples {
					at := max(realtime.MinChunkSamples, len(cur)-preRoll)
					// The cut chunk keeps its whole buffer (what follows is copied out), so
					// that the buffer goes back to capture once sent.
					rest := cur[at:]
					queue(cur[:at], false)
					newChunk()
					cur = append(cur, rest...)
				}
				wasRising = rising
				holdOpen = rising && playing
				if changed && speaking && playing {
					s.log.Info("agent: barge-in: the user speaks over the reply")
					s.bus.publish(Lifecycle{Kind: "barge_in", At: s.now()})
					s.Interrupt()
					playing = s.modelHeard()
				}
			}
			cur = append(cur, got...)
			if framesEvery > 0 && len(cur) >= nextFrameAt {
				if f, ok := s.latestFrame(); ok {
					frames = append(frames, f)
				}
				nextFrameAt += framesEvery
			}
			// While speech may be starting over the model's speech, the chunk holding its onset
			// stays open (for at most the minimum speech) so that it, not a chunk begun after the
			// onset, carries the force_listen.
			cut := len(cur) >= chunkSamples && !holdOpen
			force := false
			if s.interrupt.Load() && len(cur) >= realtime.MinChunkSamples {
				cut, force = true, true
				s.interrupt.Store(false)
			}
			if cut {
				queue(cur, force)
				newChunk()
			}
		}
	}
}

// readPatiently reads a block from src, and stops waiting for the rest of it when reply audio is
// queued (hurryCapture): hurried reports that, and err is then the read's context error if
// nothing had come yet.
func (s *Supervisor) readPatiently(ctx context.Context, src PatientSource, p []float32) (n int, hurried bool, err error) {
	readCtx, hurry := context.WithCancel(ctx)
	defer hurry()
	s.hurryRead.Store(&hurry)
	if s.speaker.Pending() != 0 {
		hurry() // queued between canWait and the Store above: hurryCapture found no read to cut
	}
	n, err = src.ReadPatiently(readCtx, p)
	s.hurryRead.Store(nil)
	return n, readCtx.Err() != nil && ctx.Err() == nil, err
}

// canWait reports whether the next read may wait for a block of several device buffers
// (PatientSource): a session is streaming (no voice to wait for to start one), the model is not
// being heard (barge-in looks at every buffer), nothing is muted and the last unmute and start
// lie further back than a block can reach (a block that may hold audio from before either goes
// as silence or is dropped whole: blocks stay short around them, so that no more than a short
// read's worth of what follows is lost with it), and frames are not sampled within a chunk
// (they are taken as the chunk's audio reaches them). The chunk's end still cuts the block, so
// a chunk leaves when its last buffer comes, as before; what waits is voice detection's report
// (the speech flag in the status), by up to a block.
func (s *Supervisor) canWait(framesEvery int) bool {
	if s.active.Load() == nil || s.muted.Load() || (framesEvery != 0 && s.cfg.FramesPerChunk > 1) ||
		s.speaker.Pending() != 0 {
		return false
	}
	return s.settledFor(patientBlock)
}

// canReadBriefly reports whether a read that canWait does not allow may still wait for a whole
// read block (readBlock, 100 ms) rather than return each device buffer: while a reply plays,
// barge-in looks at every buffer, and a device with 50 ms buffers then woke the process, the
// echo canceller's thread and the process again for each, twenty times a second. Two buffers a
// read halve that, and voice detection (barge-in's onset) hears the first of them up to one
// buffer later. Not before a session (voice starts one), while muted, or within a read block's
// reach of an unmute or a start, where reads stay as short as the device's buffers, as before.
func (s *Supervisor) canReadBriefly() bool {
	if s.active.Load() == nil || s.muted.Load() || s.speaker.Pending() == 0 {
		return false
	}
	return s.settledFor(readBlock)
}

// settledFor reports whether a read of up to samples returned from now on could hold no audio
// from before the last unmute or start: such a read counts as captured from this far back (see
// captureLoop's capturedFrom).
func (s *Supervisor) settledFor(samples int) bool {
	reach := int64(time.Since(s.born) - s.audioHold - samplesToDuration(samples))
	return !since(s.unmutedAt.Load(), reach) && !since(s.epochAt.Load(), reach)
}

// chunkSamples is how many samples a chunk holds: cfg.Chunk, or for OpenVoice, whose VAD judges
// each frame whole, one small frame, sent as it is captured.
func (s *Supervisor) chunkSamples() int {
	if n := s.server.AudioFrameSamples(); n > 0 {
		return n
	}
	return durationToSamples(s.cfg.Chunk)
}

// chunkBuffers recycles the audio buffers of chunks that are done with: a chunk that has left
// the reconnect buffer (sent, and older than what a resend would take), or the reconnect
// buffer of a session that has closed or was lost, gives its buffer to the next chunk's capture.
// Otherwise every chunk is a new buffer (64 KB a second at 1 s chunks): fresh memory to fault in
// and zero, and garbage to collect. A buffer not handed back is simply collected.
type chunkBuffers struct {
	size int // capacity of each: a chunk, and what it may grow by while held open
	free chan []float32
	made atomic.Int64 // buffers made because none was free
}

// chunkBuffersKept is how many free buffers wait for capture: more than the reconnect buffer
// holds at once (3 s by default, 30 s at most) never pile up, as capture takes one per chunk.
const chunkBuffersKept = 8

func newChunkBuffers(size int) *chunkBuffers {
	return &chunkBuffers{size: size, free: make(chan []float32, chunkBuffersKept)}
}

// chunkBufferSize is the capacity a chunk buffer needs: a chunk, and with barge-in on the
// most it grows while held open over a possible onset (the minimum speech, and a capture
// step), so that such a chunk does not move into a new, larger array that capture cannot
// take back.
func chunkBufferSize(chunk int, bargeIn bool, minSpeech time.Duration) int {
	if !bargeIn {
		return chunk
	}
	return chunk + min(durationToSamples(minSpeech)+captureStep, chunk)
}

// get returns an empty buffer with room for a chunk.
func (b *chunkBuffers) get() []float32 {
	select {
	case buf := <-b.free:
		return buf[:0]
	default:
		b.made.Add(1)
		return make([]float32, 0, b.size)
	}
}

// put takes back a chunk's buffer that nothing refers to any more; one that grew past the
// buffers' size (held open longer than planned) is left to the collector.
func (b *chunkBuffers) put(buf []float32) {
	if cap(buf) != b.size {
		return
	}
	select {
	case b.free <- buf:
	default:
	}
}

// latestFrame is the camera's newest frame, if there is a camera (mode=video with
// camera.source none has none) and it is on.
func (s *Supervisor) latestFrame() ([]byte, bool) {
	if s.frames == nil || !s.cameraOn.Load() {
		return nil, false
	}
	return s.frames.Latest()
}

// queueChunk puts the captured audio (and frames) on the backlog.
func (s *Supervisor) queueChunk(c chunk, framesEvery int) {
	c.captured = s.now()
	if len(c.frames) == 0 && framesEvery > 0 {
		if f, ok := s.latestFrame(); ok { // interrupt cut before the first frame point
			c.frames = [][]byte{f}
		}
	}
	if dropped := s.backlog.push(c); dropped > 0 {
		why := "link behind: dropped the oldest audio"
		if s.active.Load() == nil {
			why = "no session: keeping only the newest audio"
		}
		s.announceDrop(why)
	}
}

// announceDrop says once per episode that audio is being dropped (logged and published); the
// rest of the episode is only counted (chunks_dropped, audio_dropped_s).
func (s *Supervisor) announceDrop(why string) {
	if s.dropping.CompareAndSwap(false, true) {
		queued, chunks, samples := s.backlog.stats()
		s.log.Warn("agent: audio dropped; counting until it stops", "why", why, "queued", queued,
			"dropped_chunks", chunks, "dropped_s", float64(samples)/inputRate)
		s.bus.publish(Lifecycle{Kind: "audio_dropped", At: s.now(), Reason: why})
	}
}

// sendLoop feeds the active session with queued chunks, oldest first, at the pace they are
// captured (queued audio at most catch_up_rate × real time). A chunk that cannot be sent goes
// back into the queue. It sleeps while no session is active.
func (s *Supervisor) sendLoop(ctx context.Context) {
	hold := time.NewTimer(time.Hour)
	hold.Stop()
	var last *live // the session the last chunk went to
	keep := durationToSamples(s.gapBuffer())
	for {
		if s.active.Load() == nil {
			select {
			case <-ctx.Done():
				return
			case <-s.activeCh:
			}
			continue
		}
		c, ok := s.backlog.pop(ctx)
		if !ok {
			return
		}
		if c.epoch != s.epoch.Load() {
			continue // captured before a stop: never sent
		}
		// Catching up: wait until capture has advanced far enough — by the clock (real time on a
		// device) or sooner, when the next chunk is queued.
		for wait := s.pacer.wait(s.captured.Load(), len(c.audio)); wait > 0; wait = s.pacer.wait(s.captured.Load(), len(c.audio)) {
			hold.Reset(wait)
			select {
			case <-ctx.Done():
				hold.Stop()
				return
			case <-hold.C:
			case <-s.backlog.ready:
				hold.Stop()
			}
		}
		s.sendMu.Lock()
		l := s.active.Load()
		if l == nil {
			s.sendMu.Unlock()
			s.backlog.requeue(c)
			continue
		}
		if l != last {
			// A new session: what queued up for it is caught up at the rate from now on.
			last = l
			s.pacer.restart(s.captured.Load())
		}
		now := s.now()
		if c.epoch != s.epoch.Load() {
			s.sendMu.Unlock()
			continue
		}
		limit := s.lag.at(now)
		if now.Sub(c.captured) > limit {
			s.sendMu.Unlock()
			s.backlog.drop(c)
			s.announceDrop(fmt.Sprintf("link behind: audio older than %v dropped", limit.Round(time.Millisecond)))
			continue
		}
		if c.muteEpoch != s.muteEpoch.Load() {
			clear(c.audio) // muted since it was captured
		}
		// A Send that waits for room gives up when the chunk grows too old to be worth it.
		sctx := withLazyDeadline(ctx, minTime(now.Add(sendTimeout), c.captured.Add(limit)))
		err := l.sess.Send(sctx, realtime.Chunk{ID: c.seq, Audio: c.audio, Frames: c.frames, ForceListen: c.forceListen})
		sctx.release()
		if err == nil {
			l.sentChunk(c, keep, s.chunkBufs)
			s.pacer.take(len(c.audio))
		}
		s.sendMu.Unlock()
		switch {
		case err == nil:
			if n := len(c.frames); n > 0 {
				s.frameSent(c.frames[n-1])
			}
			if queued, _, _ := s.backlog.stats(); queued == 0 {
				s.dropping.Store(false) // caught up: the next drop is news
			}
		case ctx.Err() != nil:
			return
		case errors.Is(err, realtime.ErrClosed):
			// The session ended under us: keep the chunk for the next one.
			s.active.CompareAndSwap(l, nil)
			s.backlog.requeue(c)
		case errors.Is(err, context.DeadlineExceeded):
			// The link is behind: keep the chunk; it is dropped if it grows too old.
			s.backlog.requeue(c)
		default:
			s.backlog.drop(c)
			s.log.Warn("agent: chunk not sent", "err", err)
		}
	}
}

func minTime(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

// backoff returns the wait before the n-th consecutive new attempt (n ≥ 1): drawn from
// [c/2, c] with c = min(backoff_max, backoff_min·2ⁿ), so that waits never shrink along a run of
// failures and the shortest is backoff_min.
func (s *Supervisor) backoff(n int) time.Duration {
	ceil := float64(s.cfg.BackoffMin) * math.Pow(2, float64(min(max(n, 1), 62)))
	ceil = min(ceil, float64(s.cfg.BackoffMax))
	return time.Duration(ceil/2 + s.rng.Float64()*ceil/2)
}

// since reports whether a moment stored as time since born (0: never) came after from.
func since(at, from int64) bool { return at != 0 && at > from }
