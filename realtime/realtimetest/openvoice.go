package realtimetest

import (
	"cmp"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/gorilla/websocket"
)

// ovState is the OpenVoice side of a session: an energy VAD over the incoming audio
// and a real-time-paced TTS stream.
type ovState struct {
	rate        int     // input sample rate
	threshold   float64 // RMS amplitude of speech
	silenceNeed int     // samples of silence that end an utterance
	language    string

	pending     []float32 // samples not yet forming a whole 20 ms window
	pos         int64     // samples processed
	inSpeech    bool
	speechStart int64
	speechEnd   int64 // end of the last speech window
	silenceRun  int
	nextPartial float64 // seconds of speech at which the next partial is due

	tts      [][]byte // TTS frames still to send
	ttsOn    bool
	ttsTimer *time.Timer

	started  time.Time // session.created
	segments int       // transcript.final events sent
}

// vadProfile maps session.configure vad.sensitivity to a threshold and end-of-speech silence.
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
	s.ov = &ovState{rate: s.srv.opts.OpenVoiceInputRate, language: "en"}
	s.ovConfigureVAD("normal")
	if s.model == "" {
		msg := "missing required query parameter model (e.g. ?model=faster-whisper-large-v3)"
		s.reject(msg)
		s.sendJSON(map[string]any{"type": "error", "code": "invalid_request", "message": msg, "recoverable": false})
		s.closeWith(websocket.ClosePolicyViolation, "missing model query parameter")
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
	s.sid = randomHex(32)
	now := time.Now()
	s.state = stActive
	s.srv.update(func() {
		s.rec.ID = s.sid
		s.rec.CreatedAt = now
	})
	s.ov.started = now
	s.sendJSON(map[string]any{"type": "session.created", "session_id": s.sid, "model": s.model})
	s.checkFaults()
	return true
}

// ovSendClosed sends OpenVoice's session.closed. The real server then leaves the socket open.
func (s *session) ovSendClosed(reason string) {
	s.sendJSON(map[string]any{"type": "session.closed", "reason": reason,
		"total_duration_ms": time.Since(s.ov.started).Milliseconds(), "segments_transcribed": s.ov.segments})
}

func (s *session) ovHandle(f inFrame) {
	if f.binary {
		s.ovAudio(f)
		return
	}
	m, err := decodeOpenVoice(f.data)
	if err != nil {
		var oe *ovError
		if errors.As(err, &oe) && oe.recoverable {
			s.reject(oe.msg)
			s.sendJSON(map[string]any{"type": "error", "message": oe.msg, "recoverable": true})
			return
		}
		s.violate(err.Error())
		return
	}
	switch m.Type {
	case evConfigure:
		c := m.Configure
		if c.Sensitivity != "" {
			s.ovConfigureVAD(c.Sensitivity)
		}
		if c.Language != "" {
			s.ov.language = c.Language
		}
		now := time.Now()
		s.srv.update(func() {
			in := &s.rec.Init
			in.At, in.Type = now, evConfigure
			in.Configures++
			in.VADSensitivity = cmp.Or(c.Sensitivity, in.VADSensitivity)
			in.Language = cmp.Or(c.Language, in.Language)
			if c.HotWords != nil {
				in.HotWords = c.HotWords
			}
			in.TTSModel = cmp.Or(c.TTSModel, in.TTSModel)
		})
	case evTTSSpeak:
		s.ovSpeak(m.Text)
	case evTTSCancel:
		s.ovCancel()
	case evSessionClose:
		if s.state == stClosedOpen {
			return // the real server has stopped reading
		}
		s.ovCancel()
		s.ovSendClosed("client_request")
		s.clientClosed = true
		s.closedOpen("client_request")
		s.end("client_request")
	}
}

func (s *session) ovAudio(f inFrame) {
	samples, err := pcm16ToFloat(f.data)
	if err != nil {
		s.violate(fmt.Sprintf("binary frame of %d bytes: PCM16 frames must have an even length", len(f.data)))
		return
	}
	s.accepted++
	rec16 := resample(samples, s.ov.rate, inputRate)
	s.srv.update(func() {
		s.rec.Appends = append(s.rec.Appends, AppendRecord{At: f.at, Samples: len(samples)})
		s.rec.Audio = append(s.rec.Audio, rec16...)
	})
	s.ovVAD(samples)
	s.checkFaults()
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
		if o.ttsOn {
			continue // STT is muted while TTS speaks
		}
		if rms(win) > o.threshold {
			if !o.inSpeech {
				o.inSpeech = true
				o.speechStart = start
				o.nextPartial = 0.5
				s.sendJSON(map[string]any{"type": "vad.speech_start", "timestamp": o.seconds(start)})
			}
			o.speechEnd = o.pos
			o.silenceRun = 0
			if dur := o.seconds(o.speechEnd - o.speechStart); dur >= o.nextPartial-1e-9 {
				s.sendJSON(map[string]any{"type": "transcript.partial", "text": fmt.Sprintf("speech %.1fs", o.nextPartial)})
				o.nextPartial += 0.5
			}
			continue
		}
		if !o.inSpeech {
			continue
		}
		o.silenceRun += w
		if o.silenceRun >= o.silenceNeed {
			dur := math.Round(o.seconds(o.speechEnd-o.speechStart)*10) / 10
			s.sendJSON(map[string]any{"type": "transcript.final", "text": fmt.Sprintf("heard %.1f seconds of speech", dur),
				"language": o.language, "duration": dur})
			o.segments++
			s.sendJSON(map[string]any{"type": "vad.speech_end", "timestamp": o.seconds(o.speechEnd)})
			o.inSpeech = false
			o.silenceRun = 0
		}
	}
	o.pending = append(o.pending[:0:0], buf...)
}

// seconds converts a sample count at the input rate to seconds, rounded to 1 ms.
func (o *ovState) seconds(n int64) float64 {
	return math.Round(float64(n)/float64(o.rate)*1000) / 1000
}

// ovSpeak starts synthesis; a running one is cancelled first.
func (s *session) ovSpeak(text string) {
	s.ovCancel()
	rate := s.srv.opts.OpenVoiceTTSRate
	pcm := floatToPCM16(synthVoice(len(strings.Fields(text)), rate))
	frame := 2 * max(rate/10, 1) // 0.1 s
	o := s.ov
	o.tts = nil
	for len(pcm) > 0 {
		k := min(frame, len(pcm))
		o.tts = append(o.tts, pcm[:k])
		pcm = pcm[k:]
	}
	o.ttsOn = true
	s.sendJSON(map[string]any{"type": "tts.speaking_start"})
	s.ovTick()
}

// ovTick sends the next TTS frame, or tts.speaking_end once the last one has played.
func (s *session) ovTick() {
	o := s.ov
	if o == nil || !o.ttsOn {
		return
	}
	if len(o.tts) == 0 {
		o.ttsOn = false
		o.ttsTimer = nil
		s.sendJSON(map[string]any{"type": "tts.speaking_end"})
		return
	}
	f := o.tts[0]
	o.tts = o.tts[1:]
	s.sendRaw("binary", f, true)
	d := time.Duration(float64(len(f)/2) / float64(s.srv.opts.OpenVoiceTTSRate) * float64(time.Second))
	if o.ttsTimer == nil {
		o.ttsTimer = time.NewTimer(d)
	} else {
		o.ttsTimer.Reset(d)
	}
}

func (s *session) ovCancel() {
	o := s.ov
	if o == nil || !o.ttsOn {
		return
	}
	if o.ttsTimer != nil {
		o.ttsTimer.Stop()
	}
	o.ttsTimer = nil
	o.tts = nil
	o.ttsOn = false
	s.sendJSON(map[string]any{"type": "tts.speaking_end"})
}

func (s *session) ttsC() <-chan time.Time {
	if s.ov == nil || s.ov.ttsTimer == nil {
		return nil
	}
	return s.ov.ttsTimer.C
}

func (s *session) ovStop() {
	if s.ov != nil && s.ov.ttsTimer != nil {
		s.ov.ttsTimer.Stop()
	}
}
