package realtimetest

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/gorilla/websocket"
)

const (
	// ovMaxFrame is the real server's largest binary frame (ws_max_frame_size_bytes); a larger
	// one is answered with error{frame_too_large, recoverable:true} and dropped.
	ovMaxFrame = 1 << 20
	// ovTTSFrame is the size of the real server's TTS audio frames (tts chunk_size_bytes).
	ovTTSFrame = 4096
	// The real server's flow control (session/backpressure.py): audio faster than 1.2× real time
	// gets session.rate_limit (checked after 0.5 s, at most once a second); a backlog of more
	// than 10 s of audio ahead of the wall clock gets its frames dropped.
	ovRateLimit      = 1.2
	ovRateCheckAfter = 500 * time.Millisecond
	ovRateCooldown   = time.Second
	ovMaxBacklog     = 10.0 // seconds
	ovFlowRate       = 16000
)

// ovState is the OpenVoice side of a session: an energy VAD over the incoming audio, the
// server's flow control, and TTS produced faster than real time.
type ovState struct {
	rate        int     // input sample rate
	threshold   float64 // RMS amplitude of speech
	silenceNeed int     // samples of silence that end an utterance
	language    string  // the language query parameter, else "en" (auto-detect)
	modelTTS    string

	pending     []float32 // samples not yet forming a whole 20 ms window
	pos         int64     // samples processed
	inSpeech    bool
	speechStart int64
	speechEnd   int64 // end of the last speech window
	silenceRun  int
	nextPartial float64 // seconds of speech at which the next partial is due
	segment     int     // segment_id of the current (or next) speech segment

	flow flowControl

	tts      [][]byte // TTS frames still to send
	ttsOn    bool     // a synthesis runs: STT is muted
	ttsReq   string   // its request_id
	ttsAt    time.Time
	ttsStart bool // tts.speaking_start has gone out (with the first audio)
	ttsIndex int  // its index in SessionRecord.TTSRequests
	ttsTimer *time.Timer

	idle *time.Timer // inactivity: no binary audio for Options.OpenVoiceInactivity

	started  time.Time // session.created
	segments int       // transcript.final events sent
	// afterClosedSeen: input after session.closed was recorded once (the server no longer reads).
	afterClosedSeen bool
}

// flowControl is the real server's BackpressureController: it measures received audio against
// the wall clock from the first frame.
type flowControl struct {
	start, lastRateLimit time.Time
	total, first         float64 // seconds of audio
	rateLimited          bool
}

// record takes one frame of n bytes; delayMS > 0 asks the client to slow down, droppedMS > 0
// means the frame was dropped.
func (f *flowControl) record(now time.Time, n int) (delayMS, droppedMS int) {
	d := float64(n/2) / ovFlowRate
	if f.start.IsZero() {
		f.start, f.total, f.first = now, d, d
		return 0, 0
	}
	f.total += d
	wall := now.Sub(f.start).Seconds()
	if f.total-wall > ovMaxBacklog {
		f.total -= d
		return 0, int(d * 1000)
	}
	if wall < ovRateCheckAfter.Seconds() || wall <= 0 {
		return 0, 0
	}
	rate := (f.total - f.first) / wall
	if rate <= ovRateLimit || f.rateLimited && now.Sub(f.lastRateLimit) < ovRateCooldown {
		return 0, 0
	}
	f.rateLimited, f.lastRateLimit = true, now
	return max(1, int((rate-1)*d*1000)), 0
}

// vadProfile maps vad_sensitivity to a threshold and end-of-speech silence.
func vadProfile(sensitivity string) (dbfs float64, silence time.Duration) {
	switch sensitivity {
	case "high":
		return -50, 300 * time.Millisecond
	case "low":
		return -30, 600 * time.Millisecond
	default:
		return 0, 400 * time.Millisecond // 0: Options.SpeechDBFS
	}
}

func (s *session) ovConfigureVAD(sensitivity string) {
	db, silence := vadProfile(sensitivity)
	if db == 0 {
		db = s.srv.opts.SpeechDBFS
	}
	s.ov.threshold = dbfsToAmplitude(db)
	s.ov.silenceNeed = int(silence.Seconds() * float64(s.ov.rate))
}

// ovStart checks the model parameter and sends session.created.
func (s *session) ovStart() bool {
	s.ov = &ovState{rate: s.srv.opts.OpenVoiceInputRate, language: s.rec.Language}
	s.ovConfigureVAD("normal")
	if s.model == "" {
		msg := "Query parameter 'model' is required"
		s.reject("missing required query parameter model (e.g. ?model=faster-whisper-large-v3)")
		s.sendJSON(map[string]any{"type": "error", "code": "invalid_request", "message": msg, "recoverable": false})
		s.closeWith(websocket.ClosePolicyViolation, "Missing required query parameter: model")
		s.end("refused: missing model query parameter")
		return false
	}
	if known := s.srv.opts.Models; len(known) > 0 && !slices.Contains(known, s.model) {
		// A configuration error, not a protocol violation: not recorded in Rejections.
		s.sendJSON(map[string]any{"type": "error", "code": "model_not_found",
			"message": fmt.Sprintf("Model '%s' not found in registry", s.model), "recoverable": false})
		s.closeWith(websocket.ClosePolicyViolation, "Model not found: "+s.model)
		s.end("refused: model_not_found")
		return false
	}
	if f := s.srv.claimAtConnect(FaultStallInit); f != nil {
		s.stallInit() // accepted, never greeted
		return true
	}
	s.sid = "sess_" + randomHex(12)
	now := time.Now()
	s.state = stActive
	s.srv.update(func() {
		s.rec.ID = s.sid
		s.rec.CreatedAt = now
	})
	s.ov.started = now
	var language any
	if s.ov.language != "" {
		language = s.ov.language
	}
	s.sendJSON(map[string]any{"type": "session.created", "session_id": s.sid, "model": s.model,
		"config": map[string]any{"vad_sensitivity": "normal", "silence_timeout_ms": 30000, "hold_timeout_ms": 300000,
			"max_segment_duration_ms": 30000, "language": language, "enable_partial_transcripts": true, "enable_itn": true,
			"preprocessing": map[string]any{"denoise": false, "denoise_engine": "rnnoise"}, "input_sample_rate": nil, "model_tts": nil}})
	s.ov.idle = time.NewTimer(s.srv.opts.OpenVoiceInactivity)
	s.checkFaults()
	return true
}

// ovSendClosed sends OpenVoice's session.closed. The real server then leaves the socket open.
func (s *session) ovSendClosed(reason string) {
	s.sendJSON(map[string]any{"type": "session.closed", "reason": reason,
		"total_duration_ms": time.Since(s.ov.started).Milliseconds(), "segments_transcribed": s.ov.segments})
}

// ovError sends the real server's error event.
func (s *session) ovSendError(code, msg string, recoverable bool) {
	m := map[string]any{"type": "error", "code": code, "message": msg, "recoverable": recoverable, "resume_segment_id": nil}
	if recoverable && s.ov != nil {
		m["resume_segment_id"] = s.ov.segment
	}
	s.sendJSON(m)
}

// ovFatal is what makes the real server's handler raise: error{internal_error,
// recoverable:false}, the synthesis cancelled, session.closed{client_disconnect}, and the socket
// left open with nobody reading it.
func (s *session) ovFatal(msg string) {
	s.reject(msg)
	s.ovSendError("internal_error", "Internal server error", false)
	s.ovCancel()
	s.ovSendClosed("client_disconnect")
	s.closedOpen("client_disconnect")
	s.end("rejected: " + msg)
}

func (s *session) ovHandle(f inFrame) {
	if f.binary {
		s.ovAudio(f)
		return
	}
	m, err := decodeOpenVoice(f.data)
	for _, k := range m.Ignored {
		s.reject(fmt.Sprintf("%s field %q is ignored by the real server (not a field it reads; it is dropped without a word)", m.Type, k))
	}
	if err != nil {
		var oe *ovError
		if !errors.As(err, &oe) { // cannot happen: the decoder returns only *ovError
			oe = &ovError{code: "internal_error", msg: err.Error(), fatal: true}
		}
		if oe.fatal {
			s.ovFatal(oe.msg)
			return
		}
		s.reject(oe.msg + " (the real server answers error{" + oe.code + ", recoverable:true} and goes on)")
		s.ovSendError(oe.code, oe.msg, true)
		return
	}
	switch m.Type {
	case evConfigure:
		s.ovConfigure(m.Configure)
	case evTTSSpeak:
		s.ovSpeak(m.Speak)
	case evTTSCancel:
		s.ovCancel()
	case evCommit:
		s.srv.update(func() { s.rec.Commits++ })
		if s.ov.inSpeech && s.ov.speechEnd > s.ov.speechStart {
			s.ovFinal()
			s.ov.segment++
			s.ov.speechStart = s.ov.pos // the speech goes on in a new segment
			s.ov.nextPartial = 0.5
		}
	case evSessionClose, evSessionCancel:
		reason := "client_request"
		if m.Type == evSessionCancel {
			reason = "cancelled"
		}
		s.ovSendClosed(reason)
		s.ovCancel() // the real server cancels synthesis after session.closed
		if m.Type == evSessionClose {
			s.clientClosed = true
		}
		s.closedOpen(reason)
		s.end(reason)
	}
}

func (s *session) ovConfigure(c *ovConfigure) {
	if c.Sensitivity != "" {
		s.ovConfigureVAD(c.Sensitivity)
	}
	if c.TTSModel != nil {
		s.ov.modelTTS = *c.TTSModel
	}
	now := time.Now()
	s.srv.update(func() {
		in := &s.rec.Init
		in.At, in.Type = now, evConfigure
		in.Configures++
		if c.Sensitivity != "" {
			in.VADSensitivity = c.Sensitivity
		}
		if c.Language != nil {
			in.Language = *c.Language
		}
		if c.HotWordsSet {
			in.HotWords = c.HotWords
		}
		if c.TTSModel != nil {
			in.TTSModel = *c.TTSModel
		}
		if c.SilenceTimeoutMS > 0 {
			in.SilenceTimeoutMS = c.SilenceTimeoutMS
		}
		if c.HoldTimeoutMS > 0 {
			in.HoldTimeoutMS = c.HoldTimeoutMS
		}
		if c.EnableITN != nil {
			v := *c.EnableITN
			in.EnableITN = &v
		}
	})
}

// ovAudio takes one binary frame in the real server's order: size limit, inactivity, flow
// control, then (unless TTS has muted STT) PCM16 decoding and the VAD.
func (s *session) ovAudio(f inFrame) {
	if len(f.data) > ovMaxFrame {
		msg := fmt.Sprintf("Frame too large: %d bytes (max %d)", len(f.data), ovMaxFrame)
		s.reject(msg + " (answered with a recoverable error; the frame is dropped)")
		s.ovSendError("frame_too_large", msg, true)
		return
	}
	s.ov.idle.Reset(s.srv.opts.OpenVoiceInactivity)
	delayMS, droppedMS := s.ov.flow.record(f.at, len(f.data))
	switch {
	case droppedMS > 0:
		s.srv.update(func() { s.rec.DroppedFrames++ })
		s.sendJSON(map[string]any{"type": "session.frames_dropped", "dropped_ms": droppedMS,
			"message": fmt.Sprintf("Backlog exceeded, %dms of audio dropped", droppedMS)})
		return
	case delayMS > 0:
		s.sendJSON(map[string]any{"type": "session.rate_limit", "delay_ms": delayMS,
			"message": "Client sending faster than real-time, please throttle"})
	}
	if s.ov.ttsOn {
		s.ovRecordAudio(f, nil) // STT is muted while TTS speaks: the frame is discarded unread
		return
	}
	samples, err := pcm16ToFloat(f.data)
	if err != nil {
		s.ovFatal(fmt.Sprintf("binary frame of %d bytes: PCM16 frames must have an even length (the real server's handler raises)", len(f.data)))
		return
	}
	s.ovRecordAudio(f, samples)
	s.ovVAD(samples)
	s.checkFaults()
}

// ovRecordAudio records an accepted frame; samples nil: muted, decoded only for the record.
func (s *session) ovRecordAudio(f inFrame, samples []float32) {
	if samples == nil {
		var err error
		if samples, err = pcm16ToFloat(f.data); err != nil {
			samples = nil
		}
	}
	s.accepted++
	rec16 := resample(samples, s.ov.rate, inputRate)
	s.srv.record(func() {
		s.rec.Appends = append(s.rec.Appends, AppendRecord{At: f.at, Samples: len(samples)})
		s.rec.Audio = append(s.rec.Audio, rec16...)
	})
}

func (s *session) ovVAD(samples []float32) {
	o := s.ov
	w := max(o.rate/50, 1)
	buf := append(o.pending, samples...)
	for len(buf) >= w {
		win := buf[:w]
		buf = buf[w:]
		start := o.pos
		o.pos += int64(w)
		if rms(win) > o.threshold {
			if !o.inSpeech {
				o.inSpeech = true
				o.speechStart = start
				o.nextPartial = 0.5
				s.sendJSON(map[string]any{"type": "vad.speech_start", "timestamp_ms": o.ms(start)})
			}
			o.speechEnd = o.pos
			o.silenceRun = 0
			if dur := o.seconds(o.speechEnd - o.speechStart); dur >= o.nextPartial-1e-9 {
				s.sendJSON(map[string]any{"type": "transcript.partial", "text": fmt.Sprintf("speech %.1fs", o.nextPartial),
					"segment_id": o.segment, "timestamp_ms": o.ms(o.speechEnd)})
				o.nextPartial += 0.5
			}
			continue
		}
		if !o.inSpeech {
			continue
		}
		o.silenceRun += w
		if o.silenceRun >= o.silenceNeed {
			if o.speechEnd > o.speechStart {
				s.ovFinal()
			}
			s.sendJSON(map[string]any{"type": "vad.speech_end", "timestamp_ms": o.ms(o.speechEnd)})
			o.segment++
			o.inSpeech = false
			o.silenceRun = 0
		}
	}
	o.pending = append(o.pending[:0:0], buf...)
}

// ovFinal sends transcript.final for the speech since speechStart, as the real server does: the
// times are within the segment, and there is no duration.
func (s *session) ovFinal() {
	o := s.ov
	dur := math.Round(o.seconds(o.speechEnd-o.speechStart)*10) / 10
	text := fmt.Sprintf("heard %.1f seconds of speech", dur)
	words := strings.Fields(text)
	per := dur / float64(len(words))
	ws := make([]map[string]any, len(words))
	for i, w := range words {
		ws[i] = map[string]any{"word": w, "start": math.Round(float64(i)*per*1000) / 1000, "end": math.Round(float64(i+1)*per*1000) / 1000}
	}
	lang := o.language
	if lang == "" {
		lang = "en"
	}
	s.sendJSON(map[string]any{"type": "transcript.final", "text": text, "segment_id": o.segment,
		"start_ms": 0, "end_ms": int(math.Round(dur * 1000)), "language": lang, "confidence": 0.93, "words": ws})
	o.segments++
}

// seconds converts a sample count at the input rate to seconds, rounded to 1 ms.
func (o *ovState) seconds(n int64) float64 {
	return math.Round(float64(n)/float64(o.rate)*1000) / 1000
}

// ms converts a sample count at the input rate to whole milliseconds.
func (o *ovState) ms(n int64) int64 { return n * 1000 / int64(o.rate) }

// ovSpeak starts a synthesis; a running one is cancelled first. As on the real server,
// tts.speaking_start goes out with the first audio; a synthesis that fails sends only an error,
// and one that produces no audio sends nothing at all.
func (s *session) ovSpeak(sp *ovSpeak) {
	s.ovCancel()
	o := s.ov
	id := sp.RequestID
	if id == "" {
		id = "tts_" + randomHex(8)
	}
	s.srv.record(func() {
		s.rec.TTSRequests = append(s.rec.TTSRequests, TTSRecord{At: time.Now(), RequestID: id, Text: sp.Text, Voice: sp.Voice, Model: o.modelTTS})
		o.ttsIndex = len(s.rec.TTSRequests) - 1
	})
	if known := s.srv.opts.TTSModels; len(known) > 0 && o.modelTTS != "" && !slices.Contains(known, o.modelTTS) {
		s.ttsOutcome("error: model_not_found")
		s.ovSendError("model_not_found", fmt.Sprintf("TTS model '%s' not found", o.modelTTS), true)
		return
	}
	rate := s.srv.opts.OpenVoiceTTSRate
	pcm := floatToPCM16(synthVoice(len(strings.Fields(sp.Text)), rate))
	if len(pcm) == 0 {
		s.ttsOutcome("silent")
		return
	}
	o.tts = nil
	for len(pcm) > 0 {
		k := min(ovTTSFrame, len(pcm))
		o.tts = append(o.tts, pcm[:k])
		pcm = pcm[k:]
	}
	o.ttsOn, o.ttsReq, o.ttsAt, o.ttsStart = true, id, time.Now(), false
	s.ovTick()
}

func (s *session) ttsOutcome(outcome string) {
	i := s.ov.ttsIndex
	s.srv.update(func() {
		if i < len(s.rec.TTSRequests) {
			s.rec.TTSRequests[i].Outcome = outcome
		}
	})
}

// ovTick sends the next TTS frame (the first with tts.speaking_start), or tts.speaking_end
// after the last one.
func (s *session) ovTick() {
	o := s.ov
	if o == nil || !o.ttsOn {
		return
	}
	if len(o.tts) == 0 {
		s.ovSpeakingEnd(false)
		return
	}
	if !o.ttsStart {
		o.ttsStart = true
		s.sendJSON(map[string]any{"type": "tts.speaking_start", "request_id": o.ttsReq, "timestamp_ms": time.Since(o.ttsAt).Milliseconds()})
	}
	f := o.tts[0]
	o.tts = o.tts[1:]
	s.sendRaw("binary", f, true)
	d := time.Duration(float64(len(f)/2) / float64(s.srv.opts.OpenVoiceTTSRate) / s.srv.opts.OpenVoiceSynthesisSpeed * float64(time.Second))
	if o.ttsTimer == nil {
		o.ttsTimer = time.NewTimer(d)
	} else {
		o.ttsTimer.Reset(d)
	}
}

// ovSpeakingEnd ends the running synthesis. duration_ms is the synthesis's wall time (the real
// server measures it so), not the length of the audio.
func (s *session) ovSpeakingEnd(cancelled bool) {
	o := s.ov
	if o.ttsTimer != nil {
		o.ttsTimer.Stop()
	}
	o.ttsTimer, o.tts, o.ttsOn = nil, nil, false
	if !o.ttsStart {
		return
	}
	if cancelled { // recorded before the client can read the end
		s.ttsOutcome("cancelled")
	} else {
		s.ttsOutcome("spoken")
	}
	ms := time.Since(o.ttsAt).Milliseconds()
	s.sendJSON(map[string]any{"type": "tts.speaking_end", "request_id": o.ttsReq, "timestamp_ms": ms, "duration_ms": ms, "cancelled": cancelled})
}

// ovCancel cancels the running synthesis, if any (the real server ignores tts.cancel's
// request_id: it cancels whatever runs).
func (s *session) ovCancel() {
	if s.ov == nil || !s.ov.ttsOn {
		return
	}
	s.ovSpeakingEnd(true)
}

func (s *session) ttsC() <-chan time.Time {
	if s.ov == nil || s.ov.ttsTimer == nil {
		return nil
	}
	return s.ov.ttsTimer.C
}

func (s *session) idleC() <-chan time.Time {
	if s.ov == nil || s.ov.idle == nil || s.state != stActive {
		return nil
	}
	return s.ov.idle.C
}

// ovInactive is the real server's inactivity monitor: no binary audio for a minute.
func (s *session) ovInactive() {
	s.log.Info("simulator: OpenVoice inactivity timeout")
	s.ovSendClosed("inactivity_timeout")
	s.closeWith(websocket.CloseNormalClosure, "inactivity_timeout")
	s.end("inactivity_timeout")
}

func (s *session) ovStop() {
	if s.ov == nil {
		return
	}
	if s.ov.ttsTimer != nil {
		s.ov.ttsTimer.Stop()
	}
	if s.ov.idle != nil {
		s.ov.idle.Stop()
	}
}
