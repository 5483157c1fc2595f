package realtimetest

import (
	"cmp"
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode"

	"github.com/gorilla/websocket"
)

// mcHandle handles one client frame of a MiniCPM-o dialect.
func (s *session) mcHandle(f inFrame) {
	if f.binary {
		s.violate(fmt.Sprintf("binary frame (%d bytes): MiniCPM-o servers accept only JSON text frames", len(f.data)))
		return
	}
	var (
		m   clientMsg
		err error
	)
	if s.dialect == Legacy {
		m, err = decodeLegacy(f.data, s.mode)
	} else {
		m, err = decodeCurrent(f.data, s.mode)
	}
	if err != nil {
		var unknown *unknownEventError
		if s.dialect == Legacy && errors.As(err, &unknown) {
			// The legacy gateway drops event types it does not know without a word.
			s.reject(err.Error() + " (ignored by the real server: the legacy gateway drops it without an answer)")
			return
		}
		s.violate(err.Error())
		return
	}
	initName := evSessionInit
	if s.dialect == Legacy {
		initName = evSessionUpdate
	}
	switch {
	case m.Type == evSessionClose:
		s.closeEcho(m.CloseReason)
	case m.Init != nil && s.state == stActive:
		s.violate(fmt.Sprintf("second %s: a session is initialised once", m.Type))
	case m.Init != nil && s.srv.claimAtConnect(FaultBackendError) != nil:
		s.backendError()
	case m.Init != nil:
		s.initSession(m.Type, m.Init)
	case s.state != stActive:
		s.violate(fmt.Sprintf("%s before session.created: send %s and wait for session.created first", m.Type, initName))
	case m.Chat != nil:
		s.chatTurn(m.Chat, f.at)
	case m.Append != nil:
		s.step(m.Append, f.at)
	}
}

func (s *session) initSession(typ string, in *initMsg) {
	s.maxSlice = in.MaxSliceNums
	s.forceListen = s.srv.opts.ForceListenCount
	if in.ForceListenCount >= 0 {
		s.forceListen = in.ForceListenCount
	}
	s.kv = float64(len(in.Instructions) / 4)
	if s.dialect == Legacy {
		s.sid = s.srv.legacyID()
	} else {
		s.sid = "sess_" + randomHex(12)
	}
	now := time.Now()
	s.srv.update(func() {
		s.rec.ID = s.sid
		s.rec.Init = InitRecord{
			At:                 now,
			Type:               typ,
			Instructions:       in.Instructions,
			RefAudioSamples:    in.RefAudioSamples,
			TTSRefAudioSamples: in.TTSRefAudioSamples,
			MaxSliceNums:       in.MaxSliceNums,
			Config:             in.Config,
			ForceListenCount:   s.forceListen,
		}
		s.rec.CreatedAt = now
		s.rec.KVCacheLength = s.kvLen()
	})
	if s.dialect == Legacy {
		s.sendJSON(map[string]any{"type": "session.created", "session_id": s.sid, "prompt_length": s.kvLen()})
	} else {
		runtime := "full_duplex"
		if s.mode == "chat" {
			runtime = "turn_based"
		}
		s.sendJSON(map[string]any{"type": "session.created", "session_id": s.sid, "mode": runtime,
			"metrics": map[string]any{}, "server_send_ts": s.serverTS()})
	}
	s.state = stActive
	s.log.Info("simulator: session created", "id", s.sid)
	s.checkFaults()
}

// closeEcho answers the client's session.close.
func (s *session) closeEcho(reason string) {
	s.releaseWorker()
	s.srv.update(func() { s.rec.CloseReason = reason })
	echo := cmp.Or(reason, "client_closed")
	answer := echo
	if s.srv.opts.CloseBackendError && s.dialect == Current {
		answer = "backend_error" // the upstream worker's shutdown race
	}
	s.sendClosed(answer, "")
	if s.dialect == Legacy || s.srv.opts.DoubleClosed {
		s.sendClosed(answer, "") // the gateway and the worker both answer
	}
	s.clientClosed = true
	s.closeWith(websocket.CloseNormalClosure, "")
	s.end(echo)
}

// kvLen is the kv cache length reported to the client. The current dialect slides its
// window: it never reports more than the limit.
func (s *session) kvLen() int {
	if s.dialect == Current && s.kv > float64(s.srv.opts.ContextLimit) {
		s.kv = float64(s.srv.opts.ContextLimit)
	}
	return int(s.kv)
}

func (s *session) metrics(nTokens int) map[string]any {
	m := map[string]any{"backend": "realtimetest", "kv_cache_length": s.kvLen(), "chunk_index": s.accepted}
	if nTokens > 0 {
		m["n_tokens"] = nTokens
	}
	return m
}

// delay simulates model time.
func (s *session) delay() {
	if s.srv.opts.StepDelay <= 0 {
		return
	}
	t := time.NewTimer(s.srv.opts.StepDelay)
	defer t.Stop()
	select {
	case <-t.C:
	case <-s.srv.ctx.Done():
	}
}

// step is one full-duplex model step for one accepted audio chunk.
func (s *session) step(a *appendMsg, at time.Time) {
	s.accepted++
	slices := cmp.Or(a.MaxSliceNums, s.maxSlice, 1)
	perFrame := 64
	if slices > 1 {
		perFrame = 192
	}
	s.kv += float64(s.srv.opts.TokensPerAudioSecond)*float64(len(a.Audio))/inputRate + float64(perFrame*len(a.Frames))
	if len(a.Frames) > 0 {
		last := a.Frames[len(a.Frames)-1]
		s.lastFrame = &last
	}
	s.srv.record(func() {
		s.rec.Appends = append(s.rec.Appends, AppendRecord{At: at, Samples: len(a.Audio),
			ForceListen: a.ForceListen, MaxSliceNums: a.MaxSliceNums, Frames: a.Frames})
		s.rec.Audio = append(s.rec.Audio, a.Audio...)
	})
	s.delay()

	speech := hasSpeech(a.Audio, inputRate, dbfsToAmplitude(s.srv.opts.SpeechDBFS))
	forced := s.accepted <= s.forceListen || a.ForceListen
	resp := ""
	if len(s.reply) > 0 && a.ForceListen && s.lateSteps == 0 {
		s.srv.record(func() { s.rec.Interrupts = append(s.rec.Interrupts, len(s.rec.ReplyAudio)) })
		s.lateSteps = s.srv.opts.InterruptLag
	}
	switch {
	case len(s.reply) > 0 && s.lateSteps > 0: // interrupted, but still streaming what it had
		s.lateSteps--
		if speech {
			s.heard = append(s.heard, a.Audio...)
		}
		resp = s.emitReplyChunk("")
		if s.lateSteps == 0 && len(s.reply) > 0 {
			s.reply = nil
			s.endTurn(resp)
		}
		if len(s.reply) == 0 {
			s.lateSteps = 0
		}
	case len(s.reply) > 0 && a.ForceListen: // barge-in: stop at once, discard the rest
		s.reply = nil
		if speech {
			s.heard = append(s.heard, a.Audio...)
		}
		resp = s.emitListen("")
	case len(s.reply) > 0:
		resp = s.emitReplyChunk("")
	case speech:
		s.heard = append(s.heard, a.Audio...)
		resp = s.emitListen("")
	case len(s.heard) > 0 && !forced:
		resp = s.startReply()
	default:
		resp = s.emitListen("")
	}
	if s.dialect == Current && !s.srv.opts.NoExtraEvents {
		if s.accepted%3 == 0 {
			s.sendJSON(map[string]any{"type": "response.output.delta", "kind": "audio_tokens", "session_id": s.sid,
				"response_id": resp, "tokens": []int{101, 202, 303}, "metrics": s.metrics(0), "server_send_ts": s.serverTS()})
		}
		s.sendJSON(map[string]any{"type": "response.step.done", "session_id": s.sid, "response_id": resp})
	}
	s.srv.update(func() { s.rec.KVCacheLength = s.kvLen() })
	if s.dialect == Legacy && s.state == stActive && s.kvLen() >= s.srv.opts.ContextLimit {
		s.log.Info("simulator: context full", "kv_cache_length", s.kvLen())
		s.sendClosed("context_full", "")
		s.closedOpen("context_full")
		s.end("context_full")
		return
	}
	s.checkFaults()
}

func (s *session) newResponse() string {
	s.respN++
	return fmt.Sprintf("%s_resp_%d", s.sid, s.respN)
}

func (s *session) inputID() string { return fmt.Sprintf("%s_in_%d", s.sid, s.accepted) }

func (s *session) currentDelta(kind, resp string, extra map[string]any, nTokens int) {
	m := map[string]any{"type": "response.output.delta", "kind": kind, "session_id": s.sid, "response_id": resp,
		"input_id": s.inputID(), "metrics": s.metrics(nTokens), "server_send_ts": s.serverTS()}
	for k, v := range extra {
		m[k] = v
	}
	s.sendJSON(m)
}

// emitListen answers listen; resp "" starts a new response id.
func (s *session) emitListen(resp string) string {
	if resp == "" {
		resp = s.newResponse()
	}
	if s.dialect == Legacy {
		s.sendJSON(map[string]any{"type": "response.listen", "kv_cache_length": s.kvLen()})
	} else {
		s.currentDelta("listen", resp, nil, 0)
	}
	return resp
}

// startReply turns the collected speech into the parrot reply and sends its first step.
func (s *session) startReply() string {
	text := fmt.Sprintf("I heard %.1f seconds of speech", float64(len(s.heard))/inputRate)
	if s.mode == "video" && s.lastFrame != nil {
		text += fmt.Sprintf(" and saw a %dx%d frame", s.lastFrame.Width, s.lastFrame.Height)
	}
	words := len(strings.Fields(text))
	s.kv += float64(3 * words)
	if r := s.srv.opts.Reply; len(r) > 0 {
		s.reply = splitSamples(r, outputRate)
	} else {
		s.reply = splitSamples(resample(s.heard, inputRate, outputRate), outputRate)
	}
	s.heard = nil
	s.replyResp = s.newResponse()
	if s.dialect == Current {
		s.currentDelta("text", s.replyResp, map[string]any{"text": text}, words)
		text = ""
	}
	return s.emitReplyChunk(text)
}

// emitReplyChunk sends the next ≤ 1 s of reply audio (legacy: with text).
func (s *session) emitReplyChunk(text string) string {
	chunk := s.reply[0]
	s.reply = s.reply[1:]
	last := len(s.reply) == 0
	s.srv.record(func() { s.rec.ReplyAudio = append(s.rec.ReplyAudio, chunk...) })
	if s.dialect == Legacy {
		s.sendJSON(map[string]any{"type": "response.output_audio.delta", "text": text, "audio": encodeFloat32(chunk),
			"end_of_turn": last, "kv_cache_length": s.kvLen()})
		return s.replyResp
	}
	s.currentDelta("audio", s.replyResp, map[string]any{"audio": encodeFloat32(chunk)}, 0)
	if last {
		s.endTurn(s.replyResp)
	}
	return s.replyResp
}

// endTurn ends a spoken reply: the C++ backend's response.done (DuplexDone), else the PyTorch
// backend's extra listen; legacy end_of_turn rides on the last delta, so the rest of a cut
// reply ends with response.listen.
func (s *session) endTurn(resp string) {
	if s.dialect == Current && s.srv.opts.DuplexDone {
		s.sendJSON(map[string]any{"type": "response.done", "session_id": s.sid, "response_id": resp,
			"reason": "turn_end", "metrics": s.metrics(0), "server_send_ts": s.serverTS()})
		return
	}
	s.emitListen(resp)
}

// chatTurn answers one chat-mode input.append.
func (s *session) chatTurn(c *chatMsg, at time.Time) {
	s.accepted++
	reply := chatReply(c.Messages)
	s.srv.record(func() {
		s.rec.ChatRequests = append(s.rec.ChatRequests, ChatRecord{At: at, Messages: c.Messages, Streaming: c.Streaming,
			TTS: c.TTS, TTSRefAudioSamples: c.TTSRefAudioSamples, Generation: c.Generation, EnableThinking: c.EnableThinking,
			OmniMode: c.OmniMode, UseTTSTemplate: c.UseTTSTemplate, MaxSliceNums: c.MaxSliceNums, Reply: reply})
	})
	in := 0
	for _, m := range c.Messages {
		in += len(m.Text)/4 + 64*len(m.Images)
	}
	pieces := wordPieces(reply)
	s.kv += float64(in + 3*len(pieces))
	s.delay()
	resp := s.newResponse()
	var audio []float32
	if c.TTS && len(pieces) > 0 {
		audio = synthVoice(len(pieces), outputRate)
	}
	done := map[string]any{"type": "response.done", "session_id": s.sid, "response_id": resp, "text": reply,
		"reason": "turn_end", "server_send_ts": s.serverTS()}
	if c.Streaming {
		for _, p := range pieces {
			s.currentDelta("text", resp, map[string]any{"text": p}, 1)
		}
		for _, chunk := range splitSamples(audio, outputRate) {
			s.currentDelta("audio", resp, map[string]any{"audio": encodeFloat32(chunk)}, 0)
		}
	} else if audio != nil {
		done["audio"] = encodeFloat32(audio)
	}
	done["metrics"] = s.metrics(len(pieces))
	s.sendJSON(done)
	s.srv.update(func() { s.rec.KVCacheLength = s.kvLen() })
	s.checkFaults()
}

const replyExactly = "Reply with exactly:"

// chatReply is the simulator's answer: X for "Reply with exactly: X", else an echo of
// the last user message's text.
func chatReply(msgs []ChatMessage) string {
	for i := len(msgs) - 1; i >= 0; i-- {
		if msgs[i].Role != "user" {
			continue
		}
		t := msgs[i].Text
		if rest, ok := strings.CutPrefix(t, replyExactly); ok {
			return strings.TrimSpace(rest)
		}
		return t
	}
	return "(no user message)"
}

// wordPieces splits text into words, each with the whitespace before it, so the
// pieces concatenate back to text exactly.
func wordPieces(text string) []string {
	var out []string
	start := 0
	inWord := false
	for i, r := range text {
		space := unicode.IsSpace(r)
		if inWord && space {
			// word ended; the next piece starts at the whitespace
			out = append(out, text[start:i])
			start = i
			inWord = false
		} else if !space {
			inWord = true
		}
	}
	if start < len(text) {
		if inWord || len(out) == 0 {
			out = append(out, text[start:])
		} else {
			out[len(out)-1] += text[start:] // trailing whitespace
		}
	}
	return out
}
