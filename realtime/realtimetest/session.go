package realtimetest

import (
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"time"

	"github.com/gorilla/websocket"
)

type sessState int

const (
	stConnected   sessState = iota // worker assigned (or OpenVoice connected), waiting for init
	stActive                       // session.created sent
	stContextFull                  // legacy: session.closed{context_full} sent, socket open
)

const (
	closeWaitClient = time.Second            // how long to wait for the client's close frame
	closeWaitServer = 200 * time.Millisecond // the same when the whole server is closing
)

// session is the state of one connection; only its own goroutine (the HTTP handler's)
// touches it, except faultWake.
type session struct {
	srv       *Server
	c         *wsConn
	rec       *SessionRecord
	log       *slog.Logger
	dialect   Dialect
	mode      string
	modeErr   string
	model     string
	faultWake chan struct{}
	fired     map[*armedFault]bool

	state sessState
	// contextFullAt is when session.closed{context_full} went out (legacy, socket left open).
	contextFullAt time.Time
	done          bool
	endReason     string
	closeCode     int
	closeText     string
	clientClosed  bool // the client sent session.close: anything after it is a violation
	assigned      bool
	limit         *time.Timer

	sid      string
	accepted int // accepted input chunks (chat: input.append; OpenVoice: binary frames)

	// full duplex
	kv          float64
	forceListen int
	maxSlice    int
	heard       []float32
	reply       [][]float32
	replyResp   string
	respN       int
	lastFrame   *FrameInfo

	ov *ovState
}

func (s *session) run() {
	defer s.finish()
	if s.modeErr != "" {
		s.reject(s.modeErr)
		s.closeWith(websocket.ClosePolicyViolation, s.modeErr)
		s.end("refused: " + s.modeErr)
		return
	}
	if f := s.srv.claimRefuse(); f != nil {
		s.refuse(f)
		return
	}
	if s.dialect == OpenVoice {
		if !s.ovStart() {
			return
		}
	} else if !s.waitWorker() {
		return
	}
	s.loop()
}

func (s *session) loop() {
	for !s.done {
		select {
		case <-s.c.inSig:
			if f, ok := s.c.pop(); ok {
				s.handle(f)
			}
		case <-s.c.readerDone:
			for !s.done {
				f, ok := s.c.pop()
				if !ok {
					break
				}
				s.handle(f)
			}
			s.end(s.goneReason())
			s.done = true
		case <-s.c.writerDone:
			s.end("client_gone")
			s.done = true
		case <-s.limitC():
			s.timeout()
		case <-s.ttsC():
			s.ovTick()
		case <-s.faultWake:
			s.checkFaults()
		case <-s.srv.ctx.Done():
			s.end("server_closed")
			s.done = true
		}
	}
}

func (s *session) handle(f inFrame) {
	if s.dialect == OpenVoice {
		s.ovHandle(f)
	} else {
		s.mcHandle(f)
	}
}

func (s *session) limitC() <-chan time.Time {
	if s.limit == nil {
		return nil
	}
	return s.limit.C
}

// goneReason tells why the reader stopped.
func (s *session) goneReason() string {
	err := s.c.readErr
	var ne net.Error
	switch {
	case errors.Is(err, websocket.ErrReadLimit):
		msg := fmt.Sprintf("message over the read limit of %d bytes (closed with 1009)", s.srv.opts.ReadLimit)
		s.reject(msg)
		return "rejected: " + msg
	case errors.As(err, &ne) && ne.Timeout():
		return "ping_timeout"
	}
	return "client_gone"
}

// finish closes the connection politely if asked, tears it down and records the end.
func (s *session) finish() {
	s.releaseWorker()
	if s.closeCode != 0 {
		f := outFrame{op: opClose, code: s.closeCode, reason: s.closeText}
		wait := closeWaitClient
		if s.srv.ctx.Err() != nil {
			wait = closeWaitServer
			select {
			case s.c.out <- f:
			default:
			}
		} else {
			s.c.send(f)
		}
		s.drain(wait)
	} else if s.srv.ctx.Err() != nil && s.endReason == "server_closed" {
		select {
		case s.c.out <- outFrame{op: opClose, code: websocket.CloseGoingAway, reason: "simulator shutting down"}:
		default:
		}
		s.drain(closeWaitServer)
	}
	if s.limit != nil {
		s.limit.Stop()
	}
	s.ovStop()
	flush := closeWaitClient
	if s.srv.ctx.Err() != nil {
		flush = closeWaitServer
	}
	s.c.teardown(flush)
	if s.endReason == "" {
		s.endReason = "client_gone"
	}
	s.srv.update(func() {
		s.rec.EndedAt = time.Now()
		s.rec.EndReason = s.endReason
		s.rec.KVCacheLength = s.kvLen()
		s.srv.notifyLocked()
	})
	s.log.Info("simulator: session ended", "reason", s.endReason)
}

// drain waits for the client to answer the close frame (its reader ends), recording
// anything the client sends after its own session.close as a violation.
func (s *session) drain(wait time.Duration) {
	t := time.NewTimer(wait)
	defer t.Stop()
	check := func() {
		for {
			f, ok := s.c.pop()
			if !ok {
				return
			}
			if s.clientClosed {
				typ := "binary frame"
				if !f.binary {
					typ = peekType(f.data)
				}
				s.reject(fmt.Sprintf("%s after session.close: the client must send nothing after session.close", typ))
			}
		}
	}
	stopping := s.srv.ctx.Done()
	for {
		select {
		case <-s.c.inSig:
			check()
		case <-s.c.readerDone:
			check()
			return
		case <-s.c.writerDone:
			return
		case <-t.C:
			return
		case <-stopping:
			stopping = nil
			if wait > closeWaitServer {
				t.Reset(closeWaitServer)
			}
		}
	}
}

// releaseWorker frees the session's worker. Server-side endings call it before sending
// their last message, so a client that reconnects at once never waits for its own old
// session; the worker is free as soon as the session ends, not when the socket does.
func (s *session) releaseWorker() {
	if s.assigned {
		s.srv.release()
		s.assigned = false
	}
}

// end records why the session ends; the first reason wins.
func (s *session) end(reason string) {
	if s.endReason == "" {
		s.endReason = reason
	}
}

// closeWith ends the loop and closes the socket with a close frame.
func (s *session) closeWith(code int, text string) {
	s.closeCode, s.closeText = code, text
	s.done = true
}

func (s *session) reject(msg string) {
	s.log.Warn("simulator: protocol violation", "violation", msg)
	s.srv.update(func() { s.rec.Rejections = append(s.rec.Rejections, msg) })
}

// violate handles a protocol violation the way real servers handle an invalid frame.
func (s *session) violate(msg string) {
	s.releaseWorker()
	s.reject(msg)
	if s.dialect == OpenVoice {
		s.sendJSON(map[string]any{"type": "error", "message": msg, "recoverable": false})
		s.closeWith(websocket.ClosePolicyViolation, "protocol violation")
	} else {
		s.sendClosed("backend_error", msg)
		s.closeWith(websocket.CloseNormalClosure, "")
	}
	s.end("rejected: " + msg)
}

func (s *session) sendClosed(reason, diagnostic string) {
	m := map[string]any{"type": "session.closed", "reason": reason}
	if s.sid != "" {
		m["session_id"] = s.sid
	}
	if diagnostic != "" {
		m["diagnostic"] = map[string]any{"message": diagnostic}
	}
	s.sendJSON(m)
}

// sendJSON queues a JSON message; its "type" is recorded when it is written.
func (s *session) sendJSON(m map[string]any) bool {
	data, err := json.Marshal(m)
	if err != nil { // cannot happen with the values the simulator builds
		s.log.Error("simulator: encode message", "type", m["type"], "err", err)
		return false
	}
	typ, _ := m["type"].(string)
	return s.c.send(outFrame{op: opText, typ: typ, data: data})
}

func (s *session) sendRaw(typ string, data []byte, binary bool) bool {
	op := opText
	if binary {
		op = opBinary
	}
	return s.c.send(outFrame{op: op, typ: typ, data: data})
}

func serverTS() float64 { return float64(time.Now().UnixMicro()) / 1e6 }

func (s *session) refuse(f *Fault) {
	code := f.Code
	if code == "" {
		code = "worker_busy"
	}
	msg := fmt.Sprintf("%s: refused by simulator fault", code)
	if s.dialect == OpenVoice {
		s.sendJSON(map[string]any{"type": "error", "message": msg, "recoverable": false})
	} else {
		s.sendJSON(map[string]any{"type": "error", "error": map[string]any{"code": code, "message": msg, "type": "server_error"}})
	}
	s.closeWith(websocket.CloseTryAgainLater, code)
	s.end("fault: refuse")
}

// waitWorker runs the queue: true once a worker is assigned (queue_done sent).
func (s *session) waitWorker() bool {
	w, pos, qlen, full := s.srv.acquire()
	if full {
		s.sendJSON(map[string]any{"type": "error", "error": map[string]any{
			"code": "queue_full", "message": fmt.Sprintf("Queue full (%d waiting)", qlen), "type": "server_error"}})
		s.closeWith(websocket.CloseTryAgainLater, "queue full")
		s.end("queue_full")
		return false
	}
	if w == nil {
		s.assign()
		return true
	}
	ticket := "q_" + randomHex(12)
	s.announce("session.queued", pos, qlen, ticket)
	tick := time.NewTicker(s.srv.opts.QueueUpdateInterval)
	defer tick.Stop()
	update := func() {
		if pos, qlen := s.srv.position(w); pos > 0 {
			s.announce("session.queue_update", pos, qlen, "")
		}
	}
	for {
		select {
		case <-w.assigned:
			s.assign()
			return true
		case <-w.moved:
			update()
		case <-tick.C:
			update()
		case <-s.c.inSig:
			f, ok := s.c.pop()
			if !ok {
				continue
			}
			s.srv.leave(w)
			typ := "binary frame"
			if !f.binary {
				typ = peekType(f.data)
			}
			s.violate(fmt.Sprintf("%s sent before session.queue_done: a client must send nothing while queued", typ))
			return false
		case <-s.c.readerDone:
			s.srv.leave(w)
			s.end(s.goneReason())
			return false
		case <-s.c.writerDone:
			s.srv.leave(w)
			s.end("client_gone")
			return false
		case <-s.srv.ctx.Done():
			s.srv.leave(w)
			s.end("server_closed")
			return false
		}
	}
}

func (s *session) announce(typ string, pos, qlen int, ticket string) {
	m := map[string]any{"type": typ, "position": pos, "estimated_wait_s": 30 * pos, "queue_length": qlen}
	if ticket != "" {
		m["ticket_id"] = ticket
	}
	s.srv.update(func() { s.rec.QueuedPositions = append(s.rec.QueuedPositions, pos) })
	s.sendJSON(m)
}

func (s *session) assign() {
	s.assigned = true
	s.state = stConnected
	s.srv.update(func() { s.rec.AssignedAt = time.Now() })
	switch s.mode {
	case "video":
		s.limit = time.NewTimer(s.srv.opts.VideoLimit)
	case "audio":
		s.limit = time.NewTimer(s.srv.opts.AudioLimit)
	}
	s.sendJSON(map[string]any{"type": "session.queue_done"})
}

func (s *session) timeout() {
	s.log.Info("simulator: session time limit reached")
	s.releaseWorker()
	s.sendClosed("timeout", "")
	s.closeWith(websocket.CloseNormalClosure, "timeout")
	s.end("timeout")
}

// checkFaults fires every fault due now.
func (s *session) checkFaults() {
	for !s.done && s.state == stActive {
		f := s.srv.claimFault(s.fired, s.accepted)
		if f == nil {
			return
		}
		s.fire(f)
	}
}

func (s *session) fire(f *Fault) {
	s.log.Info("simulator: fault fires", "fault", f.String(), "accepted", s.accepted)
	switch f.Kind {
	case FaultDrop:
		s.releaseWorker()
		s.c.send(outFrame{op: opDrop})
		s.end("fault: drop")
		s.done = true
	case FaultStall:
		s.c.send(outFrame{op: opStall})
		s.end("fault: stall")
		s.done = true
		select { // black hole until the client gives up or the server closes
		case <-s.c.readerDone:
		case <-s.srv.ctx.Done():
		}
	case FaultInvalidJSON:
		s.sendRaw("(invalid json)", []byte(`{"type":"response.output.delta","kind":"text","text":"trunc`), false)
	case FaultOversize:
		s.sendRaw(s.oversizeType(), oversizeFrame(s.dialect, f.Size), false)
	case FaultBadDelta:
		s.sendBadDelta()
	case FaultClose:
		reason := f.Reason
		if reason == "" {
			reason = "backend_error"
		}
		if s.dialect != Legacy || reason != "context_full" {
			s.releaseWorker()
		}
		switch {
		case s.dialect == OpenVoice:
			s.sendJSON(map[string]any{"type": "error", "message": "session closed: " + reason, "recoverable": false})
			s.closeWith(websocket.CloseInternalServerErr, reason)
			s.end("fault: close")
		case s.dialect == Legacy && reason == "context_full":
			s.sendClosed(reason, "")
			s.state, s.contextFullAt = stContextFull, time.Now()
			s.end("fault: close")
		default:
			s.sendClosed(reason, "")
			s.closeWith(websocket.CloseNormalClosure, reason)
			s.end("fault: close")
		}
	}
}

func (s *session) oversizeType() string {
	if s.dialect == Current {
		return "response.output.delta"
	}
	return "x.oversize"
}

// oversizeFrame is valid JSON of exactly size bytes (or the smallest such frame).
func oversizeFrame(d Dialect, size int) []byte {
	if size <= 0 {
		size = DefaultOversize
	}
	head := `{"type":"x.oversize","padding":"`
	if d == Current {
		head = `{"type":"response.output.delta","kind":"x_oversize","padding":"`
	}
	const tail = `"}`
	n := max(size-len(head)-len(tail), 0)
	b := make([]byte, 0, len(head)+n+len(tail))
	b = append(b, head...)
	b = append(b, strings.Repeat("a", n)...)
	return append(b, tail...)
}

func (s *session) sendBadDelta() {
	const garbage = "!!not*base64@@"
	switch s.dialect {
	case Current:
		s.sendJSON(map[string]any{"type": "response.output.delta", "kind": "audio", "session_id": s.sid,
			"response_id": fmt.Sprintf("%s_resp_%d", s.sid, s.respN), "audio": garbage,
			"metrics": s.metrics(0), "server_send_ts": serverTS()})
	case Legacy:
		s.sendJSON(map[string]any{"type": "response.output_audio.delta", "text": "", "audio": garbage,
			"end_of_turn": false, "kv_cache_length": s.kvLen()})
	case OpenVoice:
		s.sendRaw("binary", []byte{1, 2, 3}, true) // odd length: not PCM16
	}
}
