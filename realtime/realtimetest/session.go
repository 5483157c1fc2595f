package realtimetest

import (
	"cmp"
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
	stConnected  sessState = iota // worker assigned (or OpenVoice connected), waiting for init
	stActive                      // session.created sent
	stClosedOpen                  // session.closed sent, socket left open (legacy context_full, OpenVoice, keep-open)
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
	// closedAt and closedReason: when and why session.closed went out on a socket left open.
	closedAt     time.Time
	closedReason string
	// ignoring: a stall-init fault; input is read (pings answered) but nothing is answered.
	ignoring bool
	// delayed holds faults that are due but wait for their Delay; delayTimer fires at the first.
	delayed      []delayedFault
	delayTimer   *time.Timer
	done         bool
	endReason    string
	closeCode    int
	closeText    string
	clientClosed bool // the client sent session.close: anything after it is a violation
	assigned     bool
	limit        *time.Timer

	sid      string
	accepted int // accepted input chunks (chat: input.append; OpenVoice: binary frames)

	// full duplex
	kv          float64
	forceListen int
	maxSlice    int
	heard       []float32
	reply       [][]float32
	replyResp   string
	lateSteps   int // steps the interrupted reply still streams (Options.InterruptLag)
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
	if f := s.srv.claimAtConnect(FaultRefuse); f != nil {
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
			s.markLeft()
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
		case <-s.idleC():
			s.ovInactive()
		case <-s.faultWake:
			s.checkFaults()
		case <-s.delayC():
			s.fireDelayed()
		case <-s.srv.ctx.Done():
			s.end("server_closed")
			s.done = true
		}
	}
}

func (s *session) handle(f inFrame) {
	switch {
	case s.ignoring:
		return // a gateway that stopped answering: input is read (Received) but never answered
	case s.state == stClosedOpen && s.isCloseRequest(f) && s.dialect == OpenVoice:
		return // the real server has stopped reading
	case s.state == stClosedOpen && !s.isCloseRequest(f):
		s.afterClosed(f)
		return
	}
	if s.dialect == OpenVoice {
		s.ovHandle(f)
	} else {
		s.mcHandle(f)
	}
}

// isCloseRequest reports whether f is the client's session.close.
func (s *session) isCloseRequest(f inFrame) bool {
	return !f.binary && peekType(f.data) == evSessionClose
}

// afterClosed handles input that arrives on a socket the server left open after session.closed:
// what was in flight when the client read session.closed is ignored (counted); anything later is
// a client that did not notice the end of its session.
func (s *session) afterClosed(f inFrame) {
	if f.at.Sub(s.closedAt) < s.srv.opts.InFlightGrace {
		s.srv.update(func() { s.rec.IgnoredAfterClose++ })
		return
	}
	typ := "binary frame"
	if !f.binary {
		typ = peekType(f.data)
	}
	msg := fmt.Sprintf("%s %v after session.closed{reason:%s}: the client must close the session",
		typ, f.at.Sub(s.closedAt).Round(time.Millisecond), s.closedReason)
	if s.dialect == OpenVoice {
		// The real server has stopped reading: nothing answers, the input piles up unread.
		if !s.ov.afterClosedSeen {
			s.ov.afterClosedSeen = true
			s.reject(msg + " (the real server no longer reads it)")
		}
		return
	}
	s.violate(msg)
}

// closedOpen records that session.closed went out and the socket stays open.
func (s *session) closedOpen(reason string) {
	s.state, s.closedAt, s.closedReason = stClosedOpen, time.Now(), reason
}

// stallInit makes the session a gateway that never answers the client's init (OpenVoice:
// never greets). The session limit, counted from worker assignment, still ends it.
func (s *session) stallInit() {
	s.log.Info("simulator: fault fires", "fault", string(FaultStallInit))
	s.ignoring = true
	s.end("fault: stall-init")
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
	if s.delayTimer != nil {
		s.delayTimer.Stop()
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
	if s.dialect == OpenVoice {
		s.ovFatal(msg)
		return
	}
	s.releaseWorker()
	s.reject(msg)
	s.sendClosed("backend_error", msg)
	s.closeWith(websocket.CloseNormalClosure, "")
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

// serverTS is server_send_ts: float seconds, or (Options.MillisecondTS, one mock) integer
// milliseconds.
func (s *session) serverTS() any {
	if s.srv.opts.MillisecondTS {
		return time.Now().UnixMilli()
	}
	return float64(time.Now().UnixMicro()) / 1e6
}

func (s *session) refuse(f *Fault) {
	code := f.Code
	if code == "" {
		code = "worker_busy"
	}
	msg := fmt.Sprintf("%s: refused by simulator fault", code)
	if s.dialect == OpenVoice {
		s.sendJSON(map[string]any{"type": "error", "code": code, "message": msg, "recoverable": false})
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
	// gone: the client left while queued, and (LateQueueLeave) the server has not noticed yet.
	gone := ""
	readerDone, writerDone := s.c.readerDone, s.c.writerDone
	clientLeft := func(reason string) bool {
		s.markLeft()
		if !s.srv.opts.LateQueueLeave {
			s.srv.leave(w)
			s.end(reason)
			return true
		}
		gone, readerDone, writerDone = reason, nil, nil
		return false
	}
	// update writes a queue update; that is when a late-leave gateway notices a gone client.
	update := func() bool {
		if gone != "" {
			select {
			case <-w.assigned:
				s.jamWorker()
			default:
				s.srv.leave(w)
				s.end(gone)
			}
			return true
		}
		if pos, qlen := s.srv.position(w); pos > 0 {
			s.announce("session.queue_update", pos, qlen, "")
		}
		return false
	}
	for {
		select {
		case <-w.assigned:
			if gone == "" && s.srv.opts.LateQueueLeave {
				// The real gateway's queue_done is its first write since the client went: it
				// fails, whether or not the server had seen the socket end.
				select {
				case <-readerDone:
					clientLeft("client_gone")
				case <-writerDone:
					clientLeft("client_gone")
				default:
				}
			}
			if gone != "" {
				s.jamWorker()
				return false
			}
			s.assign()
			return true
		case <-w.moved:
			if s.srv.opts.LateQueueLeave {
				continue // the real gateway writes queue updates only on its timer
			}
			if update() {
				return false
			}
		case <-tick.C:
			if update() {
				return false
			}
		case <-s.c.inSig:
			f, ok := s.c.pop()
			if !ok || gone != "" {
				continue
			}
			s.srv.leave(w)
			typ := "binary frame"
			if !f.binary {
				typ = peekType(f.data)
			}
			s.violate(fmt.Sprintf("%s sent before session.queue_done: a client must send nothing while queued", typ))
			return false
		case <-readerDone:
			if clientLeft(s.goneReason()) {
				return false
			}
		case <-writerDone:
			if clientLeft("client_gone") {
				return false
			}
		case <-s.srv.ctx.Done():
			s.srv.leave(w)
			s.end("server_closed")
			return false
		}
	}
}

// markLeft records that the client's socket has ended.
func (s *session) markLeft() {
	s.srv.update(func() {
		s.rec.LeftAt = time.Now()
		s.srv.notifyLocked()
	})
}

// jamWorker is the real gateway's failure: the worker went to a client that had already left
// the queue, and nothing ever frees it.
func (s *session) jamWorker() {
	s.log.Warn("simulator: worker handed to a client that left the queue; the worker is lost (jammed)")
	s.srv.jam()
	s.end("jammed: worker handed to a client that had left the queue")
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
	if f := s.srv.claimAtConnect(FaultStallInit); f != nil {
		s.stallInit()
	}
}

func (s *session) timeout() {
	s.log.Info("simulator: session time limit reached")
	s.releaseWorker()
	s.sendClosed("timeout", "")
	s.closeWith(websocket.CloseNormalClosure, "timeout")
	s.end("timeout")
}

// delayedFault is a fault that is due but waits for its Delay.
type delayedFault struct {
	at time.Time
	f  *Fault
}

// checkFaults fires every fault due now (or schedules it, when it has a Delay).
func (s *session) checkFaults() {
	for !s.done && s.state == stActive {
		f := s.srv.claimFault(s.fired, s.accepted)
		if f == nil {
			return
		}
		if f.Delay > 0 {
			s.delayed = append(s.delayed, delayedFault{at: time.Now().Add(f.Delay), f: f})
			s.armDelay()
			continue
		}
		s.fire(f)
	}
}

// armDelay sets the timer to the earliest delayed fault.
func (s *session) armDelay() {
	if len(s.delayed) == 0 {
		return
	}
	first := s.delayed[0].at
	for _, d := range s.delayed[1:] {
		if d.at.Before(first) {
			first = d.at
		}
	}
	wait := max(time.Until(first), 0)
	if s.delayTimer == nil {
		s.delayTimer = time.NewTimer(wait)
		return
	}
	s.delayTimer.Stop()
	s.delayTimer.Reset(wait)
}

func (s *session) delayC() <-chan time.Time {
	if s.delayTimer == nil || len(s.delayed) == 0 {
		return nil
	}
	return s.delayTimer.C
}

// fireDelayed fires the delayed faults whose time has come, while the session is active.
func (s *session) fireDelayed() {
	now := time.Now()
	var later []delayedFault
	for _, d := range s.delayed {
		switch {
		case s.done || s.state != stActive:
		case d.at.After(now):
			later = append(later, d)
		default:
			s.fire(d.f)
		}
	}
	s.delayed = later
	s.armDelay()
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
			s.markLeft()
		case <-s.srv.ctx.Done():
		}
	case FaultInvalidJSON:
		s.sendRaw("(invalid json)", []byte(`{"type":"response.output.delta","kind":"text","text":"trunc`), false)
	case FaultOversize:
		s.sendRaw(s.oversizeType(), oversizeFrame(s.dialect, f.Size), false)
	case FaultBadDelta:
		s.sendBadDelta()
	case FaultError:
		s.serverError(cmp.Or(f.Code, "inference_failed"))
	case FaultClose:
		reason := cmp.Or(f.Reason, "backend_error")
		legacyFull := s.dialect == Legacy && reason == "context_full"
		if !legacyFull { // the legacy gateway keeps its worker until the client closes
			s.releaseWorker()
		}
		if s.dialect == OpenVoice {
			s.ovSendClosed(reason)
		} else {
			s.sendClosed(reason, "")
		}
		// Real OpenVoice and the legacy context_full leave the socket to the client.
		if f.KeepOpen || legacyFull || s.dialect == OpenVoice {
			s.closedOpen(reason)
		} else {
			s.closeWith(websocket.CloseNormalClosure, reason)
		}
		s.end("fault: close")
	}
}

// serverError is an error event in the middle of a session: the legacy gateway's
// inference_failed (one failed step), after which the session goes on; OpenVoice's recoverable
// error; or the current gateway's session_failed, after which it gives the session up (close
// 1011).
func (s *session) serverError(code string) {
	msg := fmt.Sprintf("%s: injected by simulator fault", code)
	if s.dialect == OpenVoice {
		s.ovSendError(code, msg, true)
		return
	}
	s.sendJSON(map[string]any{"type": "error", "error": map[string]any{"code": code, "message": msg, "type": "server_error"}})
	if code == "session_failed" {
		s.releaseWorker()
		s.closeWith(websocket.CloseInternalServerErr, "session failed")
		s.end("fault: error")
	}
}

// backendError is a current-dialect worker whose backend is down or still busy with the previous
// session: it answers the init with session.closed before session.created, with no session id.
func (s *session) backendError() {
	s.log.Info("simulator: fault fires", "fault", string(FaultBackendError))
	s.releaseWorker()
	s.sendJSON(map[string]any{"type": "session.closed", "session_id": nil, "reason": "backend_error",
		"diagnostic": map[string]any{"message": "backend unavailable: the previous session is still closing"}})
	s.closeWith(websocket.CloseNormalClosure, "")
	s.end("fault: backend-error")
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
			"metrics": s.metrics(0), "server_send_ts": s.serverTS()})
	case Legacy:
		s.sendJSON(map[string]any{"type": "response.output_audio.delta", "text": "", "audio": garbage,
			"end_of_turn": false, "kv_cache_length": s.kvLen()})
	case OpenVoice:
		s.sendRaw("binary", []byte{1, 2, 3}, true) // odd length: not PCM16
	}
}
